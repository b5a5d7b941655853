package cluster

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/devk/devk/cluster/internal/containerd"
	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/registry"
	"github.com/devk/devk/source"
)

// aptFix is the line that installs what the private runtime needs.
const aptFix = "apt-get update && apt-get install -y containerd runc containernetworking-plugins"

// Problem is one failed preflight check with its fix.
type Problem struct {
	Check string
	What  string
	Fix   string
}

func (p Problem) String() string {
	if p.Fix == "" {
		return p.Check + ": " + p.What
	}
	return p.Check + ": " + p.What + "; " + p.Fix
}

// PreflightError lists every problem preflight found.
type PreflightError struct{ Problems []Problem }

func (e *PreflightError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d preflight check(s) failed:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - " + p.String())
	}
	return b.String()
}

// CgroupVersion is 2 on a unified hierarchy, else 1.
func CgroupVersion() int {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return 2
	}
	return 1
}

// CgroupSupport says whether a kubelet of version can run on the
// machine's cgroup version, and why not. cgroup v2 support is GA from
// 1.25; cgroup v1 works on every release devk knows, from 1.35 only with
// failCgroupV1: false, which devk sets.
func CgroupSupport(cgroupVersion int, kubeVersion string) error {
	v, err := version.ParseGeneric(kubeVersion)
	if err != nil {
		return nil // an unknown version is let through; the kubelet will say
	}
	major, minor := v.Major(), v.Minor()
	if cgroupVersion == 2 && major == 1 && minor < 25 {
		return fmt.Errorf("Kubernetes %s does not support cgroup v2 well (GA in v1.25): use a v1.25+ tree or a cgroup v1 machine", kubeVersion)
	}
	if cgroupVersion == 1 && major == 1 && minor < 19 {
		return fmt.Errorf("Kubernetes %s is older than devk supports (v1.19+)", kubeVersion)
	}
	return nil
}

// Listener is a process holding a TCP port.
type Listener struct {
	Port    int
	PID     int
	Command string
	// Cluster is the devk cluster the process belongs to, when its
	// command line names a cluster directory.
	Cluster string
	// cmdline is the whole command line.
	cmdline string
}

var clusterDirRE = regexp.MustCompile(`/clusters/([a-z0-9][a-z0-9-]*)/`)

// parseProcNetTCP returns the socket inodes listening on port in the
// contents of /proc/net/tcp or /proc/net/tcp6 that a server binding ip
// would collide with: a listener on ip itself or on the wildcard address.
// A nil ip matches every listener.
func parseProcNetTCP(data string, port int, ip net.IP) []string {
	var inodes []string
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] == "sl" {
			continue
		}
		// f[1] is local "ADDR:PORT" in hex, f[3] the state (0A = LISTEN).
		if f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		if ip != nil {
			addr := procNetIP(f[1][:i])
			if addr == nil || !(addr.IsUnspecified() || addr.Equal(ip)) {
				continue
			}
		}
		inodes = append(inodes, f[9])
	}
	return inodes
}

// procNetIP decodes an address of /proc/net/tcp{,6}: 32-bit words in
// host (little-endian) order.
func procNetIP(h string) net.IP {
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil
	}
	out := make(net.IP, len(b))
	for w := 0; w < len(b); w += 4 {
		out[w], out[w+1], out[w+2], out[w+3] = b[w+3], b[w+2], b[w+1], b[w]
	}
	return out
}

// listenerOn reports the process listening on TCP port in a way that
// collides with binding ip (nil: any listener); pid 0 if the socket's
// owner is not visible.
func listenerOn(port int, ip net.IP) (Listener, bool) {
	var inodes []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err == nil {
			inodes = append(inodes, parseProcNetTCP(string(data), port, ip)...)
		}
	}
	if len(inodes) == 0 {
		return Listener{}, false
	}
	want := map[string]bool{}
	for _, in := range inodes {
		want["socket:["+in+"]"] = true
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, fdDir := range procs {
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err == nil && want[link] {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(fdDir)))
				cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(fdDir), "cmdline"))
				c := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
				l := Listener{Port: port, PID: pid, Command: c, cmdline: c}
				if m := clusterDirRE.FindStringSubmatch(c); m != nil {
					l.Cluster = m[1]
				}
				if len(c) > 60 {
					l.Command = c[:60] + "…"
				}
				return l, true
			}
		}
	}
	return Listener{Port: port}, true
}

// SwapOn reports whether /proc/swaps lists an active swap area.
func SwapOn(procSwaps string) bool {
	lines := strings.Split(strings.TrimSpace(procSwaps), "\n")
	return len(lines) > 1
}

// canLowerOOMScoreAdj tries, in a child, what runc does for every pod
// sandbox: write a negative oom_score_adj. It fails without
// CAP_SYS_RESOURCE.
func canLowerOOMScoreAdj(ctx context.Context) bool {
	return exec.CommandContext(ctx, "/bin/sh", "-c", "echo -1 > /proc/self/oom_score_adj").Run() == nil
}

// binaryProblems checks the programs a node needs: the runtime, the CNI
// plugins, and what wires its network namespace.
func binaryProblems(lookPath func(string) (string, error), cniDir string) []Problem {
	var out []Problem
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		if _, err := lookPath(b); err != nil {
			out = append(out, Problem{"binaries", b + " is not installed", "install it: " + aptFix})
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(cniDir, p)); err != nil {
			out = append(out, Problem{"binaries", "CNI plugin " + p + " is not in " + cniDir, "install it: " + aptFix})
		}
	}
	for b, pkg := range map[string]string{"ip": "iproute2", "nsenter": "util-linux", "sysctl": "procps", "iptables": "iptables"} {
		if _, err := lookPath(b); err != nil {
			out = append(out, Problem{"binaries", b + " is not installed (a node is a network namespace, with its own iptables)", "install it: apt-get install -y " + pkg})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].What < out[j].What })
	return out
}

func (c *Cluster) runPreflight(ctx context.Context) (phase.Outcome, error) {
	var probs []Problem
	var notes []string
	if os.Geteuid() != 0 {
		probs = append(probs, Problem{"root", "devk up runs containerd and the kubelet, which need root", "run it as root: sudo -E devk up"})
	}
	probs = append(probs, binaryProblems(exec.LookPath, containerd.CNIBinDir())...)
	if p := memoryProblem(c.newNodeRoles(), memAvailable()); p != nil {
		probs = append(probs, *p)
	}
	if c.Config.HA() {
		if _, err := os.Stat(loadbalancer.DefaultBinary); err != nil {
			probs = append(probs, Problem{"binaries", "haproxy is not installed (" + loadbalancer.DefaultBinary + "): more than one control-plane node needs it in front of the API servers",
				"apt-get install --no-install-recommends haproxy (then `systemctl disable --now haproxy`: devk runs its own)"})
		}
	}
	if c.ImagesFrom == "" {
		if _, err := exec.LookPath("go"); err != nil {
			probs = append(probs, Problem{"binaries", "go is not installed (devk builds the components and the pause image)", "install Go, or pass --images-from with a kubelet in place"})
		}
	}
	if len(c.FirstNode().Files.ContainerdSocket())+len(".ttrpc") >= 108 {
		probs = append(probs, Problem{"paths", "the containerd socket path " + c.FirstNode().Files.ContainerdSocket() + " is too long for a unix socket", "set DEVK_HOME to a shorter directory"})
	}
	cg := CgroupVersion()
	version := c.Config.KubeVersion
	if c.ImagesFrom == "" {
		t, err := source.Open(c.TreeDir)
		if err != nil {
			probs = append(probs, Problem{"tree", err.Error(), ""}) // the error says what to do
		} else if v, err := t.Version(ctx); err == nil {
			version = v.GitVersion
		}
	}
	if err := CgroupSupport(cg, version); err != nil {
		probs = append(probs, Problem{"cgroups", err.Error(), ""}) // the error says what to do
	}
	if data, err := os.ReadFile("/proc/swaps"); err == nil && SwapOn(string(data)) {
		notes = append(notes, "swap is on: the kubelet runs with failSwapOn: false (swapoff -a to avoid it)")
	}
	// The cluster's own ports are in its node's network namespace: only
	// the registry's is on the host.
	if _, ours := c.registryPaths().Procs().Running(registry.ProcessName); !ours && c.Registry == "" && c.Config.OwnRegistry {
		if _, portStr, err := splitHostPort(c.Config.Registry); err == nil {
			p, _ := strconv.Atoi(portStr)
			if l, busy := listenerOn(p, nil); busy && !registry.Answers(ctx, c.Config.Registry) {
				probs = append(probs, portProblem(l, "the registry"))
			}
		}
	}
	if !c.Exists() {
		probs = append(probs, c.namesTaken()...)
	}
	p, note := c.forwardProblem(ctx)
	if p != nil {
		probs = append(probs, *p)
	}
	if note != "" {
		notes = append(notes, note)
	}
	restrict := !canLowerOOMScoreAdj(ctx)
	if restrict {
		notes = append(notes, "no CAP_SYS_RESOURCE: containerd gets restrict_oom_score_adj = true")
	}
	c.Config.RestrictOOMScoreAdj = restrict
	if len(probs) > 0 {
		return phase.Done, &PreflightError{Problems: probs}
	}
	if c.Config.Created.IsZero() {
		c.Config.Created = timeNow()
	}
	if err := c.SaveConfig(); err != nil {
		return phase.Done, err
	}
	for _, n := range notes {
		c.Reporter.Infof("  note: %s", n)
	}
	return phase.Unchanged("cgroup v%d, %s", cg, orUnknown(version)), nil
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}

func portProblem(l Listener, user string) Problem {
	who := "another process"
	if l.PID > 0 {
		who = fmt.Sprintf("pid %d (%s)", l.PID, l.Command)
	}
	fix := "stop it, then run devk up again"
	if l.Cluster != "" {
		fix = fmt.Sprintf("it belongs to devk cluster %q: `devk down --name %s` first", l.Cluster, l.Cluster)
	}
	return Problem{"ports", fmt.Sprintf("port %d (%s) is in use by %s", l.Port, user, who), fix}
}

// namesTaken are the machine-wide names a new cluster would take (its
// host bridge, its nodes' network namespaces, its kubelet cgroup roots)
// that exist already: another DEVK_HOME's cluster of the same name, or
// one's leftovers. devk would otherwise share them, and its down would
// remove what the other runs.
func (c *Cluster) namesTaken() []Problem {
	fix := fmt.Sprintf("another DEVK_HOME's cluster %q has it? `devk down` it there, or choose another --name", c.Config.Name)
	var out []Problem
	if nw := c.Config.Network; nw.HostBridge != "" && linkExists(nw.HostBridge) {
		out = append(out, Problem{"names", "bridge " + nw.HostBridge + " exists already", fix})
	}
	for _, n := range c.Config.Network.Nodes {
		if _, err := os.Stat(n.NetNSPath()); err == nil {
			out = append(out, Problem{"names", "network namespace " + n.NetNS + " exists already", fix})
		}
		if cgroupExists(n.CgroupRoot) {
			out = append(out, Problem{"names", "cgroup " + n.CgroupRoot + " exists already", fix})
		}
	}
	return out
}

// cgroupExists says whether cgroup root exists in any hierarchy.
func cgroupExists(root string) bool {
	if root == "" || root == "/" {
		return false
	}
	for _, h := range cgroupRoots() {
		if _, err := os.Stat(filepath.Join(h, root)); err == nil {
			return true
		}
	}
	return false
}

// forwardProblem is preflight's look at the host's FORWARD chain
// (forwardDrops): a problem when the host drops the traffic between the
// cluster's nodes and up is to have more than one node without
// --allow-bridge-forward, a note otherwise. It changes nothing.
func (c *Cluster) forwardProblem(ctx context.Context) (*Problem, string) {
	nfCall, rules, err := readForward(ctx, hostIPTables)
	if err != nil {
		return nil, fmt.Sprintf("could not read the host's FORWARD chain (%v): if it drops forwarded traffic, nodes cannot reach each other; see %s", err, AllowBridgeForwardFlag)
	}
	v := forwardDrops(nfCall, rules, c.Config.Network.HostBridge)
	rule := c.forwardRule()
	switch {
	case !v.Drops:
		return nil, ""
	case c.AllowBridgeForward || c.Config.Network.ForwardRule:
		return nil, fmt.Sprintf("br_netfilter passes bridged traffic through iptables and %s: up adds one rule (%s), down removes it", v.Why, rule)
	case len(c.Config.Network.Nodes)+len(c.newNodeRoles()) <= 1:
		return nil, fmt.Sprintf("br_netfilter passes bridged traffic through iptables and %s: one node needs no forwarding, but before `devk node add`, run up again with %s", v.Why, AllowBridgeForwardFlag)
	}
	return &Problem{"network",
		"the host would drop the traffic between the cluster's nodes: br_netfilter passes bridged traffic through iptables (" + bridgeNFCallIPTables + " is 1) and " + v.Why,
		"pass " + AllowBridgeForwardFlag + " (up adds one rule, `" + rule.String() + "`, and down removes it), or add such a rule yourself"}, ""
}
