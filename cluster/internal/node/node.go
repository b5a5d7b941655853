// Package node is one node of a devk cluster on this machine, as the
// node-scoped phases of up, node add, down and node remove act on it: a
// network namespace wired to devk's bridge (veth, address, routes to the
// other nodes' pods, the pods' masquerade, sysctls), a mount namespace,
// and the containerd and kubelet devk runs in both. A Node is given
// everything it needs (the cluster's configuration, the daemons'
// environment, a reporter); it imports nothing of cluster's.
package node

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/devk/devk/cluster/internal/preflight"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/mountns"
)

// Node is one node of the cluster: its place on the cluster's network
// and where its files are. Node 0, the node `devk up` makes, keeps its
// files in the cluster directory; every other node in nodes/<name>/
// (layout.ClusterFiles.Node).
type Node struct {
	Net   layout.NodeNet
	Files layout.NodeFiles
	// Config is the cluster's configuration (cluster.json), shared with
	// the caller, which saves it.
	Config *layout.Config
}

// Name is the node's name (its Node object's).
func (n Node) Name() string { return n.Net.Name }

// PodCIDR is the node's pod subnet once its Node has one ("" before).
func (n Node) PodCIDR() string { return n.Net.PodCIDR }

// IP is the node's address: where its kubelet and, on a control-plane
// node, its static pods listen.
func (n Node) IP() string { return n.Net.IP }

// First says whether n is node 0.
func (n Node) First() bool { return n.Name() == n.Config.FirstNode().Name }

// Enter is argv run in node n: in its mount and network namespaces.
func (n Node) Enter(argv ...string) []string {
	return mountns.Enter(n.Files.MountNS(), n.Net.NetNSPath(), argv...)
}

// NameFlag is the --name flag that names cluster in a command line devk
// tells the user to run ("" for the default cluster).
func NameFlag(cluster string) string {
	if cluster == layout.DefaultName {
		return ""
	}
	return " --name " + cluster
}

// nodeMemory is what one more node takes, measured on a worker of a
// v1.34.4 cluster (RSS): kubelet 95 MB, containerd 53 MB, kube-proxy
// 60 MB and its shim 14 MB, 222 MB in all, rounded up for the pods'
// pause containers and shims.
const nodeMemory = 256 << 20

// controlPlaneMemory is what one more control-plane node takes: a
// worker's and its etcd, API server, controller-manager and scheduler.
const controlPlaneMemory = 1024 << 20

// MemAvailable is /proc/meminfo's MemAvailable, in bytes (0 if unknown).
func MemAvailable() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// MemoryProblem says whether the machine lacks the memory for new nodes
// of these roles (nil when it has it, or cannot tell).
func MemoryProblem(roles []string, available uint64) *preflight.Problem {
	var need uint64
	cps := 0
	for _, r := range roles {
		need += newNodeMemory(r)
		if r == layout.RoleControlPlane {
			cps++
		}
	}
	if len(roles) == 0 || available == 0 || available >= need {
		return nil
	}
	return &preflight.Problem{Check: "memory", What: fmt.Sprintf("%d more nodes (%d control-plane) need about %d MiB (%d MiB a worker: kubelet, containerd, kube-proxy; %d MiB a control-plane node: etcd and the API server besides), and %d MiB are available",
		len(roles), cps, need>>20, nodeMemory>>20, controlPlaneMemory>>20, available>>20), Fix: "ask for fewer nodes, or free memory"}
}

// newNodeMemory is what a new node of the role needs (see nodeMemory).
func newNodeMemory(role string) uint64 {
	if role == layout.RoleControlPlane {
		return controlPlaneMemory
	}
	return nodeMemory
}
