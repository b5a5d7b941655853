// Package preflight is kubeadm's phases/preflight for devk: the checks
// of the machine before up or a node's join changes anything, each a
// function of what it looks at. A failed check is a Problem with its
// fix; the phase collects them into one Error.
package preflight

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/devk/devk/cluster/internal/cgroups"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/skew"
)

// aptFix is the line that installs what the private runtime needs.
const aptFix = "apt-get update && apt-get install -y containerd runc containernetworking-plugins"

// maxSocketPath is the longest path a unix socket may have (sun_path,
// its terminating NUL included).
const maxSocketPath = 108

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

// Error lists every problem preflight found.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d preflight check(s) failed:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - " + p.String())
	}
	return b.String()
}

// Root is the problem of running up without root (nil as root).
func Root() *Problem {
	if os.Geteuid() == 0 {
		return nil
	}
	return &Problem{"root", "devk up runs containerd and the kubelet, which need root", "run it as root: sudo -E devk up"}
}

// TreeNotOlder refuses `devk up` of an existing cluster from a tree of an
// older minor version than the cluster runs (recorded: cluster.json's
// version, which devk upgrade sets): up would put that tree's kubelets
// and kubectl back under the newer control plane. A new cluster, or a
// version that does not parse, passes.
func TreeNotOlder(name, recorded, tree string) *Problem {
	r, err1 := version.ParseGeneric(recorded)
	t, err2 := version.ParseGeneric(tree)
	if err1 != nil || err2 != nil || r.Major() < t.Major() || r.Major() == t.Major() && r.Minor() <= t.Minor() {
		return nil
	}
	return &Problem{"version", fmt.Sprintf("cluster %s runs %s (devk upgrade made it so), the tree is %s: up would put this older tree's kubelets back under the newer control plane", name, recorded, tree),
		fmt.Sprintf("run devk up from a v%d.%d tree (--tree), or `devk upgrade --rollback` first", r.Major(), r.Minor())}
}

// EmulatedVersion is the problem with a config file's emulatedVersion
// for components of version (the tree's), nil when there is none: it
// is set and they cannot emulate it. An unknown version passes.
func EmulatedVersion(emulated, version string) *Problem {
	if emulated == "" || version == "" {
		return nil
	}
	if err := skew.CheckEmulated(emulated, version); err != nil {
		return &Problem{Check: "emulated-version", What: err.Error()} // the error says what to do
	}
	return nil
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

// SwapOn reports whether /proc/swaps lists an active swap area.
func SwapOn(procSwaps string) bool {
	lines := strings.Split(strings.TrimSpace(procSwaps), "\n")
	return len(lines) > 1
}

// SwapNote is the note of a machine with swap on ("" when it is off).
func SwapNote() string {
	if data, err := os.ReadFile("/proc/swaps"); err == nil && SwapOn(string(data)) {
		return "swap is on: the kubelet runs with failSwapOn: false (swapoff -a to avoid it)"
	}
	return ""
}

// CanLowerOOMScoreAdj tries, in a child, what runc does for every pod
// sandbox: write a negative oom_score_adj. It fails without
// CAP_SYS_RESOURCE.
func CanLowerOOMScoreAdj(ctx context.Context) bool {
	return exec.CommandContext(ctx, "/bin/sh", "-c", "echo -1 > /proc/self/oom_score_adj").Run() == nil
}

// Binaries checks the programs a node needs: the runtime, the CNI
// plugins in cniDir, and what wires its network namespace.
func Binaries(lookPath func(string) (string, error), cniDir string) []Problem {
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

// HAProxy checks for haproxy at binary, which a cluster of more than one
// control-plane node runs in front of its API servers.
func HAProxy(binary string) *Problem {
	if _, err := os.Stat(binary); err == nil {
		return nil
	}
	return &Problem{"binaries", "haproxy is not installed (" + binary + "): more than one control-plane node needs it in front of the API servers",
		"apt-get install --no-install-recommends haproxy (then `systemctl disable --now haproxy`: devk runs its own)"}
}

// Go checks for the go command, which builds the components and the
// pause image.
func Go(lookPath func(string) (string, error)) *Problem {
	if _, err := lookPath("go"); err == nil {
		return nil
	}
	return &Problem{"binaries", "go is not installed (devk builds the components and the pause image)", "install Go, or pass --images-from with a kubelet in place"}
}

// SocketPath checks that containerd's socket (and its ttrpc socket
// beside it) fits in a unix socket address.
func SocketPath(socket string) *Problem {
	if len(socket)+len(".ttrpc") < maxSocketPath {
		return nil
	}
	return &Problem{"paths", "the containerd socket path " + socket + " is too long for a unix socket", "set DEVK_HOME to a shorter directory"}
}

// NamesTaken are the machine-wide names a new cluster called name on
// network nw would take (its host bridge, its nodes' network namespaces,
// its kubelet cgroup roots) that exist already: another DEVK_HOME's
// cluster of the same name, or one's leftovers. devk would otherwise
// share them, and its down would remove what the other runs. linkExists
// says whether a network device is there.
func NamesTaken(name string, nw layout.Network, linkExists func(string) bool) []Problem {
	fix := fmt.Sprintf("another DEVK_HOME's cluster %q has it? `devk down` it there, or choose another --name", name)
	var out []Problem
	if nw.HostBridge != "" && linkExists(nw.HostBridge) {
		out = append(out, Problem{"names", "bridge " + nw.HostBridge + " exists already", fix})
	}
	for _, n := range nw.Nodes {
		if _, err := os.Stat(n.NetNSPath()); err == nil {
			out = append(out, Problem{"names", "network namespace " + n.NetNS + " exists already", fix})
		}
		if cgroups.Exists(n.CgroupRoot) {
			out = append(out, Problem{"names", "cgroup " + n.CgroupRoot + " exists already", fix})
		}
	}
	return out
}

// JoinInput is what a joining node's checks look at.
type JoinInput struct {
	// Kubelet is the kubelet binary the node gets (node 0's).
	Kubelet string
	// Net is the node's network; New says it is not in cluster.json yet:
	// its names must then be free, and Memory is the problem of the
	// machine's memory for it (nil: enough, or not checked).
	Net    layout.NodeNet
	New    bool
	Memory *Problem
	// Socket is the node's containerd socket.
	Socket string
}

// Join are the problems of joining a node to a cluster on this machine
// (node add's preflight before it asks the API server): root, the
// programs (lookPath, the CNI plugins in cniDir), the kubelet to give
// it, for a new node its memory and free names, its socket's length.
func Join(in JoinInput, lookPath func(string) (string, error), cniDir string) []Problem {
	var probs []Problem
	if os.Geteuid() != 0 {
		probs = append(probs, Problem{Check: "root", What: "a node runs containerd and the kubelet, which need root", Fix: "run it as root: sudo -E devk node add"})
	}
	probs = append(probs, Binaries(lookPath, cniDir)...)
	if _, err := os.Stat(in.Kubelet); err != nil {
		probs = append(probs, Problem{Check: "kubelet", What: "no kubelet at " + in.Kubelet + " to give the node", Fix: "run `devk up` (it builds and installs the kubelet)"})
	}
	if in.New {
		if in.Memory != nil {
			probs = append(probs, *in.Memory)
		}
		if _, err := os.Stat(in.Net.NetNSPath()); err == nil {
			probs = append(probs, Problem{Check: "names", What: "network namespace " + in.Net.NetNS + " exists already", Fix: "another DEVK_HOME's cluster has a node " + in.Net.Name + "? choose another name"})
		}
		if cgroups.Exists(in.Net.CgroupRoot) {
			probs = append(probs, Problem{Check: "names", What: "cgroup " + in.Net.CgroupRoot + " exists already", Fix: "another DEVK_HOME's cluster has it? choose another name"})
		}
	}
	if len(in.Socket)+len(".ttrpc") >= maxSocketPath {
		probs = append(probs, Problem{Check: "paths", What: "the node's containerd socket path " + in.Socket + " is too long for a unix socket", Fix: "set DEVK_HOME to a shorter directory, or give the node a shorter name"})
	}
	return probs
}
