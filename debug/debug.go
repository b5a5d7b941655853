// Package debug is `devk debug`: a static-pod component rebuilt for a
// debugger (symbols kept, -N -l where the user debugs), its image with
// Delve in it pushed, and swapped in the way `devk swap` does (journal,
// lock, rollback, digests) with the container running `dlv exec
// --headless` around the component's own command; then the breakpoints
// set through Delve's API, and the substitute-path rules from the
// binary's module paths to the tree written for dlv, VS Code and GoLand.
// --stop puts the container back as it was.
package debug

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/delve"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
	"github.com/devk/devk/srcpath"
	"github.com/devk/devk/swap"
)

// DefaultPort is where the debugger of the first component debugged on
// a node listens (Delve's customary port); Ports gives each component
// its own so that several can be debugged at once.
const DefaultPort = 2345

// Ports are the debugger ports by component, DefaultPort and up.
var Ports = map[string]int{
	"apiserver":          DefaultPort,
	"controller-manager": DefaultPort + 1,
	"scheduler":          DefaultPort + 2,
	"etcd":               DefaultPort + 3,
	Kubelet:              DefaultPort + 4,
	"kube-proxy":         DefaultPort + 5,
	build.CoreDNS:        DefaultPort + 6,
}

// Kubelet is the one component `devk debug` runs under Delve that is
// neither a static pod nor an addon: devk supervises it.
const Kubelet = "kubelet"

// AttachTimeout bounds the wait for the debugger to accept a client
// once the component runs under it.
const AttachTimeout = 30 * time.Second

// Components are what `devk debug` runs under Delve: the static pods,
// the kubelet and the addons.
func Components() []string {
	var out []string
	for _, c := range build.Catalog {
		if _, isAddon := addon.Lookup(c.Name); c.StaticPod || c.Name == Kubelet || isAddon {
			out = append(out, c.Name)
		}
	}
	return out
}

// Options say what to debug where.
type Options struct {
	// Component is the static pod's component: apiserver,
	// controller-manager, scheduler, etcd.
	Component string
	// TreeDir is the tree to build; empty: the working directory's.
	TreeDir string
	// Address is the node's address the debugger listens on (a devk
	// node's on devk's bridge); Port its port (zero: Ports').
	Address string
	Port    int
	// Breaks are FILE:LINE breakpoints, FILE relative to the tree.
	Breaks []string
	// DebugPackages are package patterns compiled with -N -l besides
	// the tree's packages changed since the last normal build and the
	// packages of Breaks (build.DebugAll: everything).
	DebugPackages []string
	// HA says the component runs on several control-plane nodes: a
	// paused controller loses its lease (said in the result's notes).
	HA bool
	// StopAtStart leaves the component waiting before main for a
	// client to continue it (dlv without --continue): the swap waits for
	// the container (or kubelet) to run, not for it to be healthy.
	StopAtStart bool
	// Stop puts the normal container back instead.
	Stop bool
	// Swap is the swap's node, lock and waits (its Components and
	// Debug are set here); for the kubelet, Swap.Kubelets is the one
	// debugged.
	Swap swap.Options
	// Node is the files of the node whose kubelet is debugged: dlv goes
	// beside its binary, and the record that runs it under dlv
	// (KubeletDebugger) beside its config.
	Node layout.NodeFiles
	// Image says where images go.
	Image    image.Options
	Reporter progress.Reporter
}

// Result is what `devk debug` did and how to attach.
type Result struct {
	Component string `json:"component"`
	// Image is the debug image running (repo@sha256:…); after --stop,
	// the normal one. The kubelet has none: Binary is its debug build.
	Image  string `json:"image,omitempty"`
	Binary string `json:"binary,omitempty"`
	Attach
	// Addresses are, for an addon, every pod's debugger (Address is the
	// first: the pod on --node, if one runs there).
	Addresses []string `json:"addresses,omitempty"`
	// Breakpoints are those set.
	Breakpoints []Breakpoint `json:"breakpoints,omitempty"`
	// DebugPackages are the patterns compiled with -N -l.
	DebugPackages []string `json:"debugPackages,omitempty"`
	// Notes say what devk changed so a paused component survives, and
	// what it could not.
	Notes []string `json:"notes,omitempty"`
	// WaitsAtStart says the component waits before main for a client
	// to continue it (--stop-at-start).
	WaitsAtStart bool `json:"waitsAtStart,omitempty"`
	// Stopped says --stop put the normal container back.
	Stopped bool         `json:"stopped,omitempty"`
	Swap    *swap.Report `json:"swap,omitempty"`
}

// Breakpoint is one breakpoint set in the running component.
type Breakpoint struct {
	ID int `json:"id"`
	// File is tree-relative; Reported is the path the binary reports.
	File     string `json:"file"`
	Reported string `json:"reported"`
	Line     int    `json:"line"`
	Function string `json:"function,omitempty"`
}

// job is one `devk debug` run.
type job struct {
	Options
	comp build.Component
	// addon is the component's workload if it is an addon.
	addon  *addon.Workload
	tree   *source.Tree
	srcmap *srcpath.Map
	breaks []breakAt
	img    *image.Job
	swap   *swap.Job
	res    *Result
	// recorded says the debugger phase wrote the kubelet's record.
	recorded bool
}

// Phases are `devk debug`: check, the build and push phases of `devk
// build --push` (a debug build with the debugger in the image), the
// phases of `devk swap` under swap/, then attach and the IDE files.
func Phases() []*phase.Phase[*job] {
	ps := []*phase.Phase[*job]{{
		Name:  "check",
		Short: "check the component, the breakpoints (a file of the tree, a line with code) and the debugger's port",
		Run:   phase.Method((*job).check),
	}}
	ps = append(ps, phase.Map(image.BuildPhases(), func(j *job) *image.Job { return j.img })...)
	ps = append(ps, &phase.Phase[*job]{
		Name:  "debugger",
		Short: "the kubelet's: dlv beside its binary, and the record that makes its next start run it under dlv",
		If:    func(j *job) (bool, string) { return j.comp.Name == Kubelet, "a static pod runs dlv from its image" },
		Run:   phase.Method((*job).kubeletDebugger),
	})
	swaps := phase.Map(swap.Phases(), func(j *job) *swap.Job {
		if j.swap == nil {
			return &swap.Job{} // a plan
		}
		return j.swap
	})
	const parent = "swap"
	phase.Nest(parent, swaps)
	return append(ps, &phase.Phase[*job]{
		Name:     parent,
		Short:    "swap the debug image in, the component under dlv, its liveness and startup probes off (the phases of devk swap)",
		Children: swaps,
		Run: func(_ context.Context, j *job) (phase.Outcome, error) {
			// The push recorded the debug image: read it now.
			sj, err := swap.NewJob(j.Swap)
			if err != nil {
				return phase.Done, err
			}
			j.swap = sj
			return phase.Unchanged("%s", j.comp.Name), nil
		},
	}, &phase.Phase[*job]{
		Name:  "attach",
		Short: "connect to the debugger, set the breakpoints and let the component run on",
		Run:   phase.Method((*job).attach),
	}, &phase.Phase[*job]{
		Name:  "ide",
		Short: "write the substitute-path rules as a dlv init file, a VS Code launch.json and a GoLand run configuration",
		Run:   phase.Method((*job).ide),
	})
}

// Run debugs (or with Stop, stops debugging) o.Component.
func Run(ctx context.Context, o Options, popts phase.Options) (*Result, error) {
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	comp, err := Lookup(o.Component)
	if err != nil {
		return nil, err
	}
	res := &Result{Component: comp.Name}
	o.Swap.Components = []string{comp.Name}
	o.Swap.Reporter = o.Reporter
	if o.Stop {
		o.Swap.Debug = &swap.Debugging{Stop: true, Restart: comp.Name == Kubelet}
		if comp.Name == Kubelet {
			if err := stopKubelet(o.Node); err != nil {
				return res, err
			}
		}
		rep, err := swap.Run(ctx, o.Swap, popts)
		res.Swap, res.Stopped = rep, err == nil
		if rep != nil && len(rep.StaticPods) > 0 {
			res.Image = rep.StaticPods[0].NewImage
		}
		if rep != nil && len(rep.Addons) > 0 {
			res.Image = rep.Addons[0].NewImage
		}
		return res, err
	}
	if o.Port == 0 {
		o.Port = Ports[comp.Name]
	}
	if o.Address == "" {
		return res, fmt.Errorf("no address for the debugger to listen on: on a node devk did not make pass --address, the node's IP")
	}
	j := &job{Options: o, comp: comp, res: res}
	if w, ok := addon.Lookup(comp.Name); ok {
		j.addon = &w
		if o.StopAtStart {
			return res, fmt.Errorf("--stop-at-start is for static pods and the kubelet: the controller of %s rolls its pods out one at a time, each ready before the next, and a pod waiting before main is never ready (set a --break early instead)", w)
		}
	}
	if j.tree, err = source.Open(o.TreeDir); err != nil {
		return res, err
	}
	if j.srcmap, err = srcpath.New(ctx, j.tree); err != nil {
		return res, err
	}
	if j.breaks, err = parseBreaks(j.tree.Root, j.srcmap, o.Breaks); err != nil {
		return res, err
	}
	pkgs := slices.Clone(o.DebugPackages)
	for _, b := range j.breaks {
		pkgs = append(pkgs, b.pkg)
	}
	slices.Sort(pkgs)
	bo := build.Options{TreeDir: j.tree.Root, Components: []string{comp.Name}, Debug: true, DebugPackages: slices.Compact(pkgs), DebugChanged: true, Reporter: o.Reporter}
	io := o.Image
	io.Debugger, io.Push = true, true
	if comp.Name == Kubelet {
		// A binary devk runs, with dlv beside it: no image.
		bo.Components = append(bo.Components, build.Delve)
		io.Debugger, io.Push = false, false
	}
	if j.img, err = image.NewJob(bo, io); err != nil {
		return res, err
	}
	j.Swap.Debug = &swap.Debugging{Command: j.command, StopAtStart: o.StopAtStart, Port: int32(j.Port)}
	j.Swap.TreeDir = j.tree.Root
	popts.Reporter = o.Reporter
	_, err = phase.Run(ctx, Phases(), j, popts)
	if j.swap != nil {
		err = j.swap.Close(ctx, err)
		res.Swap = j.swap.Report
	}
	if err != nil && j.recorded {
		err = j.undoKubeletDebugger(ctx, err)
	}
	return res, err
}

// Lookup is the static-pod component name names.
func Lookup(name string) (build.Component, error) {
	c, err := build.Lookup(name)
	if err != nil || !slices.Contains(Components(), c.Name) {
		return build.Component{}, fmt.Errorf("devk debug runs a static pod, the kubelet or an addon under the debugger: %s, not %q", strings.Join(Components(), ", "), name)
	}
	return c, nil
}

// listen is the debugger's host:port.
func (j *job) listen() string { return net.JoinHostPort(j.Address, strconv.Itoa(j.Port)) }

// debugged is how the component runs under the debugger at dlv: an
// addon's listens on its pod's address, which the kubelet puts in its
// command line (each pod its own).
func (j *job) debugged(dlv string) delve.Debugged {
	listen := j.listen()
	if j.addon != nil {
		listen = net.JoinHostPort(addon.DebugListenHost, strconv.Itoa(j.Port))
	}
	return delve.Debugged{Debugger: dlv, Listen: listen, StopAtStart: j.StopAtStart}
}

// check refuses what would fail after the node was changed: a
// breakpoint nowhere (parseBreaks did), a port another process holds.
func (j *job) check(ctx context.Context) (phase.Outcome, error) {
	if err := j.portFree(ctx); err != nil {
		return phase.Done, err
	}
	if j.HA && j.comp.Name != "apiserver" && j.comp.Name != "etcd" {
		j.res.Notes = append(j.res.Notes, fmt.Sprintf("%s keeps leader election on a cluster of several control planes: paused longer than its lease, another replica takes over and this one exits when it runs on (its pod restarts under the debugger)", j.comp.Name))
	}
	return phase.Unchanged("%s at %s, %d breakpoint(s)", j.comp.Name, j.listen(), len(j.breaks)), nil
}

// portFree fails when something other than this component's debugger
// (which the swap replaces) accepts connections at the port.
func (j *job) portFree(ctx context.Context) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", j.listen())
	if err != nil {
		return nil
	}
	conn.Close()
	if j.comp.Name == Kubelet {
		if d, err := delve.ReadDebugged(j.Node.KubeletDebugger()); err == nil && d != nil && d.Listen == j.listen() {
			return nil
		}
	} else if j.addon != nil {
		if st, _, err := j.addonState(ctx); err == nil && st != nil && st.Debugging() {
			return nil // the swap replaces its pods
		}
	} else if pod, _, err := swap.ManifestFor(j.Swap.Node.ManifestsDir, j.comp.Binary).Read(); err == nil {
		if _, debugging, _ := staticpod.DebugOriginal(pod); debugging {
			if c, err := staticpod.Container(pod, j.comp.Binary); err == nil && slices.Contains(c.Command, delve.ListenFlag(j.listen())) {
				return nil
			}
		}
	}
	return fmt.Errorf("%s is in use by another process on the node: pass --port (nothing was changed)", j.listen())
}

// command is the container's command under Delve: dlv exec, headless,
// on the node's address, the component run on at once, its own flags
// after `--`, with what a component paused at a breakpoint needs
// (PausableArgv).
func (j *job) command(own []string) ([]string, error) {
	if len(own) == 0 {
		return nil, fmt.Errorf("no command")
	}
	// Delve execs a path, not a name looked up on PATH: kubeadm's
	// manifests name the binary alone, which devk's images keep in
	// image.BinDir.
	argv := slices.Clone(own)
	if !strings.Contains(argv[0], "/") {
		argv[0] = path.Join(image.BinDir, argv[0])
	}
	return j.debugged(image.DebuggerPath).Command(PausableArgv(argv, j.comp.Name, j.HA)), nil
}

// PausableArgv is argv (a component's binary and flags) with the flags
// a component paused at a breakpoint needs (pauseFlags) in place of its
// own, appended in name order.
func PausableArgv(argv []string, component string, ha bool) []string {
	flags := slices.Clone(argv[1:])
	set := pauseFlags(component, ha)
	for _, name := range slices.Sorted(maps.Keys(set)) {
		flags = slices.DeleteFunc(flags, func(f string) bool { return f == "--"+name || strings.HasPrefix(f, "--"+name+"=") })
		flags = append(flags, "--"+name+"="+set[name])
	}
	return append([]string{argv[0]}, flags...)
}

// DebugRequestTimeout is the API server's --request-timeout while it is
// debugged: a request held at a breakpoint answers when the debugger
// lets it go, not with the 504 of the default minute.
const DebugRequestTimeout = time.Hour

// pauseFlags are the flags a paused component needs: the API server's
// request timeout; for the controllers of one control plane, leader
// election off (a paused leader loses its lease and exits).
func pauseFlags(component string, ha bool) map[string]string {
	switch {
	case component == "apiserver":
		return map[string]string{"request-timeout": DebugRequestTimeout.String()}
	case !ha && (component == "controller-manager" || component == "scheduler"):
		return map[string]string{"leader-elect": "false"}
	}
	return nil
}
