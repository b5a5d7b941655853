// Package systemctl is devk run under the name systemctl: a devk node's
// init system. Inside a node (`devk node exec NODE -- systemctl …`, and
// kubeadm there, which finds the init system by looking systemctl up)
// `systemctl` is devk, and it serves the one unit kubeadm and kubeadm's
// docs ask for, kubelet.service, through the supervisor devk runs the
// node's kubelet with. It never forwards to this machine's systemd: a
// `systemctl restart kubelet` in a node must not restart the host's
// kubelet.
package systemctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devk/devk/cluster/innode"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/supervise"
)

// Name is the name devk acts as a node's init system under.
const Name = "systemctl"

// Invoked says whether argv0 (os.Args[0]) runs devk as systemctl.
func Invoked(argv0 string) bool { return filepath.Base(argv0) == Name }

// Exit statuses, systemd's (its LSB ones for status and is-active).
const (
	exitOK = 0
	// exitFailure: bad arguments, no node, a start that failed.
	exitFailure = 1
	// exitInactive: the unit is not running (status, is-active).
	exitInactive = 3
	// exitStatusNoUnit: status of a unit there is not.
	exitStatusNoUnit = 4
	// exitNoUnit: any other verb on a unit there is not.
	exitNoUnit = 5
)

// unitName is the one unit served; kubelet and kubelet.service name it.
const unitName = "kubelet.service"

// defaultStatusLines is how many lines of the kubelet's log status shows
// (systemd's default, -n changes it).
const defaultStatusLines = 10

// Environment variables `devk node exec` gives a command in a node.
const (
	envHome    = "DEVK_HOME"
	envCluster = "DEVK_CLUSTER"
	envNode    = "DEVK_NODE"
)

// Unit is the kubelet of one node as its init system's unit
// (innode.KubeletService).
type Unit interface {
	Node() string
	State() innode.KubeletState
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Restart(ctx context.Context) error
}

// Main runs devk as systemctl with args (os.Args[1:]) in environ and
// returns the exit status.
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer, version string) int {
	return run(ctx, args, stdout, stderr, version, func(inv invocation) (Unit, error) {
		o := innode.ServiceOptions{Home: execx.Getenv(environ, envHome), Name: execx.Getenv(environ, envCluster), Node: execx.Getenv(environ, envNode), Environ: environ}
		if o.Name == "" || o.Node == "" {
			return nil, errNotInNode
		}
		s, err := innode.OpenKubeletService(o)
		if err != nil {
			return nil, err
		}
		if inv.changes() {
			if err := leaveNode(s.SystemctlLink(), args, environ); err != nil {
				return nil, err
			}
		}
		return s, nil
	})
}

// changes says whether inv starts or stops the kubelet.
func (inv invocation) changes() bool {
	switch inv.verb {
	case "start", "stop", "restart", "try-restart":
		return true
	case "enable", "disable":
		return inv.now
	}
	return false
}

// errNotInNode is the error of devk's systemctl run outside a node.
var errNotInNode = errors.New(`this is devk's systemctl, which serves the kubelet of a devk node; it runs inside a node, as ` + "`devk node exec NODE -- systemctl …`" + ` runs it (with DEVK_CLUSTER and DEVK_NODE set; they are not).
It never forwards to this machine's systemd: outside a node, run this machine's systemctl by its path`)

// invocation is a command line, parsed.
type invocation struct {
	verb  string
	units []string
	quiet bool
	now   bool
	lines int
	help  bool
	// version: --version.
	version bool
}

// verbs are the verbs served: what each does to the kubelet, and
// whether it takes units (daemon-reload takes none).
var verbs = map[string]struct {
	units bool
	what  string
}{
	"daemon-reload": {false, "nothing to reload: devk reads the kubelet's files at each start"},
	"start":         {true, "start the kubelet unless it runs"},
	"stop":          {true, "stop the kubelet"},
	"restart":       {true, "stop the kubelet and start it again (with its files read again)"},
	"try-restart":   {true, "restart the kubelet if it runs"},
	"status":        {true, "show the kubelet: loaded, active, main PID, its log's last lines (-n)"},
	"is-active":     {true, "print active or inactive (exit 0 or 3)"},
	"is-enabled":    {true, "print enabled: the kubelet runs while the node runs"},
	"enable":        {true, "accepted (the kubelet runs while the node runs); --now starts it"},
	"disable":       {true, "accepted, changes nothing (`devk down` ends the node); --now stops it"},
}

// usageError is a command line devk's systemctl does not take.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// parse reads a systemctl command line: options anywhere (the ones
// systemctl's callers commonly pass are accepted), the verb, its units.
func parse(args []string) (invocation, error) {
	inv := invocation{lines: defaultStatusLines}
	var words []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			words = append(words, args[i+1:]...)
			i = len(args)
		case a == "-h" || a == "--help":
			inv.help = true
		case a == "--version":
			inv.version = true
		case a == "-q" || a == "--quiet":
			inv.quiet = true
		case a == "--now":
			inv.now = true
		case slices.Contains([]string{"--no-pager", "--no-legend", "--no-block", "--no-ask-password", "--system", "-l", "--full", "--plain"}, a):
			// how systemd pages, waits or prints: nothing to change here
		case a == "-n" || a == "--lines" || strings.HasPrefix(a, "--lines=") || (strings.HasPrefix(a, "-n") && len(a) > 2):
			v, rest := "", ""
			switch {
			case strings.HasPrefix(a, "--lines="):
				v = strings.TrimPrefix(a, "--lines=")
			case strings.HasPrefix(a, "-n") && len(a) > 2:
				v = a[2:]
			case i+1 < len(args):
				i++
				v = args[i]
			default:
				rest = a
			}
			n, err := strconv.Atoi(v)
			if rest != "" || err != nil || n < 0 {
				return inv, usageError{fmt.Sprintf("%s wants a number of lines (e.g. -n 50)", a)}
			}
			inv.lines = n
		case a == "--user":
			return inv, usageError{"--user: devk's systemctl serves the node's kubelet, a system unit; a node has no user manager"}
		case strings.HasPrefix(a, "-") && a != "-":
			return inv, usageError{fmt.Sprintf("unrecognized option %q (devk's systemctl takes -q, --now, -n N and the display options systemctl's callers pass; see --help)", a)}
		default:
			words = append(words, a)
		}
	}
	if inv.help || inv.version {
		return inv, nil
	}
	if len(words) == 0 {
		return inv, usageError{"no verb: devk's systemctl serves " + unitName + " (e.g. `systemctl restart kubelet`; see --help)"}
	}
	inv.verb, inv.units = words[0], words[1:]
	v, ok := verbs[inv.verb]
	switch {
	case !ok:
		return inv, usageError{fmt.Sprintf("unknown command verb %q: devk's systemctl serves %s with %s (see --help)", inv.verb, unitName, strings.Join(verbNames(), ", "))}
	case !v.units && len(inv.units) > 0:
		return inv, usageError{fmt.Sprintf("%s takes no unit", inv.verb)}
	case v.units && len(inv.units) == 0 && inv.verb != "status":
		return inv, usageError{fmt.Sprintf("%s: which unit? devk's systemctl serves %s (`systemctl %s kubelet`)", inv.verb, unitName, inv.verb)}
	}
	if inv.verb == "status" && len(inv.units) == 0 {
		inv.units = []string{unitName}
	}
	return inv, nil
}

func verbNames() []string {
	var out []string
	for v := range verbs {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// served says whether a unit name is the kubelet's; full is the name as
// systemd spells it (a name without a type is a .service).
func served(unit string) (full string, ok bool) {
	full = unit
	if !strings.Contains(unit, ".") {
		full = unit + ".service"
	}
	return full, full == unitName
}

// run runs the parsed command line against the unit open gives.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, version string, open func(invocation) (Unit, error)) int {
	inv, err := parse(args)
	if err != nil {
		fmt.Fprintln(stderr, "systemctl:", err)
		return exitFailure
	}
	switch {
	case inv.help:
		fmt.Fprint(stdout, usage())
		return exitOK
	case inv.version:
		fmt.Fprintf(stdout, "devk %s, as systemctl: a devk node's init system, serving %s\n", version, unitName)
		return exitOK
	}
	for _, u := range inv.units {
		if full, ok := served(u); !ok {
			return noUnit(stderr, inv.verb, full)
		}
	}
	unit, err := open(inv)
	if err != nil {
		fmt.Fprintln(stderr, "systemctl:", err)
		return exitFailure
	}
	return do(ctx, inv, unit, stdout, stderr)
}

// noUnit answers for a unit devk's systemctl does not serve, as systemd
// answers for one there is not, and says which it serves.
func noUnit(stderr io.Writer, verb, full string) int {
	code := exitNoUnit
	if verb == "status" {
		fmt.Fprintf(stderr, "Unit %s could not be found.\n", full)
		code = exitStatusNoUnit
	} else {
		fmt.Fprintf(stderr, "Failed to %s %s: Unit %s not found.\n", verb, full, full)
	}
	fmt.Fprintf(stderr, "devk's systemctl serves only %s in a devk node; devk runs the node's other daemons itself (see `devk status`).\n", unitName)
	return code
}

// do runs inv's verb on unit (each of inv's units is unit: there is one).
func do(ctx context.Context, inv invocation, unit Unit, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "Failed to %s %s: %v\n", inv.verb, unitName, err)
		return exitFailure
	}
	say := func(w io.Writer, s string) {
		if !inv.quiet {
			fmt.Fprintln(w, s)
		}
	}
	var err error
	switch inv.verb {
	case "daemon-reload":
		return exitOK
	case "start":
		err = unit.Start(ctx)
	case "stop":
		err = unit.Stop(ctx)
	case "restart":
		err = unit.Restart(ctx)
	case "try-restart":
		if unit.State().PID != 0 {
			err = unit.Restart(ctx)
		}
	case "enable":
		if inv.now {
			err = unit.Start(ctx)
		}
	case "disable":
		say(stderr, "devk's systemctl: the kubelet runs while node "+unit.Node()+" runs; disable changes nothing (`devk down` ends the node)")
		if inv.now {
			err = unit.Stop(ctx)
		}
	case "is-enabled":
		say(stdout, "enabled")
	case "is-active":
		if unit.State().PID == 0 {
			say(stdout, "inactive")
			return exitInactive
		}
		say(stdout, "active")
	case "status":
		st := unit.State()
		status(stdout, unit.Node(), st, inv.lines, time.Now())
		if st.PID == 0 {
			return exitInactive
		}
	}
	if err != nil {
		return fail(err)
	}
	return exitOK
}

// status writes systemctl status's text for the node's kubelet: the
// lines kubeadm reads (Loaded), Active, the main PID, the command line,
// the log and its last lines.
func status(w io.Writer, node string, st innode.KubeletState, lines int, now time.Time) {
	dot, active := "○", "inactive (dead)"
	if st.PID != 0 {
		dot, active = "●", "active (running)"
		if !st.Since.IsZero() {
			active += fmt.Sprintf(" since %s; %s ago", st.Since.Format("Mon 2006-01-02 15:04:05 MST"), now.Sub(st.Since).Round(time.Second))
		}
	}
	fmt.Fprintf(w, "%s %s - kubelet: The Kubernetes Node Agent (node %s, supervised by devk)\n", dot, unitName, node)
	fmt.Fprintf(w, "     Loaded: loaded (devk; enabled: the kubelet runs while the node runs)\n")
	fmt.Fprintf(w, "     Active: %s\n", active)
	if st.PID != 0 {
		fmt.Fprintf(w, "   Main PID: %d (kubelet)\n", st.PID)
		if len(st.Argv) > 0 {
			fmt.Fprintf(w, "    Command: %s\n", strings.Join(st.Argv, " "))
		}
	}
	fmt.Fprintf(w, "        Log: %s\n", st.Log)
	if lines > 0 {
		if tail := strings.TrimRight(supervise.Tail(st.Log, lines), "\n"); tail != "" {
			fmt.Fprintf(w, "\n%s\n", tail)
		}
	}
}

// usage is --help's text.
func usage() string {
	var b strings.Builder
	b.WriteString(`systemctl [OPTIONS] VERB [kubelet]

This is devk's systemctl: inside a devk node (devk node exec NODE -- …) it is
the node's init system and serves one unit, kubelet.service, the kubelet devk
supervises for the node. kubeadm finds it as it finds systemd, and
` + "`systemctl restart kubelet`" + ` (after ` + "`kubeadm certs renew`" + `) restarts the node's
kubelet, never this machine's: it never forwards to this machine's systemd.
The node is DEVK_HOME, DEVK_CLUSTER and DEVK_NODE, which node exec sets.

Verbs:
`)
	for _, v := range verbNames() {
		fmt.Fprintf(&b, "  %-14s %s\n", v, verbs[v].what)
	}
	b.WriteString(`
Options: -q/--quiet, --now (with enable/disable), -n/--lines N (status);
--no-pager, --no-legend, --no-block, --no-ask-password, --system, -l/--full
and --plain are accepted and change nothing.

Other units: exit 5 (status: 4) with systemd's "not found", as for a unit
there is not. start, stop and restart take the node's lock, as devk swap does.
`)
	return b.String()
}
