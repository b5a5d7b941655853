package cluster

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/devk/devk/internal/layout"
)

// node is one node of the cluster as the node-scoped phases act on it
// (network, runtime, kubelet, pod network, and down's): its place on the
// cluster's network and where its files are. Node 0, the node `devk up`
// makes, keeps its files in the cluster directory; every other node in
// nodes/<name>/ (layout.Paths.NodeDir).
type node struct {
	Net layout.NodeNet
	layout.Paths
}

// Name is the node's name (its Node object's).
func (n node) Name() string { return n.Net.Name }

// PodCIDR is the node's pod subnet once its Node has one ("" before).
func (n node) PodCIDR() string { return n.Net.PodCIDR }

// IP is the node's address: where its kubelet and, on a control-plane
// node, its static pods listen.
func (n node) IP() string { return n.Net.IP }

// firstNode is node 0, the control-plane node `devk up` makes.
func (c *Cluster) firstNode() node { return node{Net: c.Config.ControlPlane(), Paths: c.Paths} }

// nodeNamed is the cluster's node called name.
func (c *Cluster) nodeNamed(name string) (node, error) {
	if name == "" || name == c.Config.NodeName {
		return c.firstNode(), nil
	}
	n, _, err := c.Config.FindNode(name)
	if err != nil {
		return node{}, err
	}
	p, err := c.Paths.NodeDir(c.Config, name)
	if err != nil {
		return node{}, err
	}
	return node{Net: n, Paths: p}, nil
}

// nodes are every node of the cluster, node 0 first.
func (c *Cluster) nodes() ([]node, error) {
	out := []node{c.firstNode()}
	for _, n := range c.Config.Network.Nodes[min(1, len(c.Config.Network.Nodes)):] {
		nd, err := c.nodeNamed(n.Name)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Config.Name, err)
		}
		out = append(out, nd)
	}
	return out, nil
}

// nodesLastFirst are the nodes in the order down stops them: the
// control-plane node, whose API server the others talk to, last.
func (c *Cluster) nodesLastFirst() ([]node, error) {
	ns, err := c.nodes()
	slices.Reverse(ns)
	return ns, err
}

// nameFlag is the --name flag that names this cluster in a command line
// devk tells the user to run ("" for the default cluster).
func (c *Cluster) nameFlag() string {
	if c.Config.Name == layout.DefaultName {
		return ""
	}
	return " --name " + c.Config.Name
}

// criSocket is node n's CRI runtime: node 0's is the config's (devk's
// containerd, or the one --cri-socket named); every other node's is its
// own containerd's.
func (c *Cluster) criSocket(n node) string {
	if n.Name() == c.Config.NodeName {
		return c.Config.CRISocket
	}
	return n.ContainerdSocket()
}

// nodeMemory is what one more node takes, measured on a worker of a
// v1.34.4 cluster (RSS): kubelet 95 MB, containerd 53 MB, kube-proxy
// 60 MB and its shim 14 MB, 222 MB in all, rounded up for the pods'
// pause containers and shims.
const nodeMemory = 256 << 20

// memAvailable is /proc/meminfo's MemAvailable, in bytes (0 if unknown).
func memAvailable() uint64 {
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

// memoryProblem says whether the machine lacks the memory for more new
// nodes (nil when it has it, or cannot tell).
func memoryProblem(more int, available uint64) *Problem {
	need := uint64(more) * nodeMemory
	if more <= 0 || available == 0 || available >= need {
		return nil
	}
	return &Problem{"memory", fmt.Sprintf("%d more nodes need about %d MiB (%d MiB each: kubelet, containerd, kube-proxy), and %d MiB are available",
		more, need>>20, nodeMemory>>20, available>>20), fmt.Sprintf("ask for fewer nodes (at most %d more here), or free memory", available/nodeMemory)}
}

// checkNodeCount refuses a --nodes that would take nodes away, or that
// the cluster's subnet cannot hold.
func (c *Cluster) checkNodeCount() error {
	have := len(c.Config.Network.Nodes)
	switch {
	case c.Nodes < 0:
		return fmt.Errorf("--nodes %d: want the number of nodes, 1 or more", c.Nodes)
	case c.Nodes > 0 && c.Nodes < have:
		return fmt.Errorf("cluster %s has %d nodes, more than --nodes %d: `devk node remove%s NAME` removes one (its nodes: %s)", c.Config.Name, have, c.Nodes, c.nameFlag(), strings.Join(c.Config.NodeNames(), ", "))
	}
	cfg := c.Config
	cfg.Network.Nodes = slices.Clone(cfg.Network.Nodes)
	for range max(0, c.Nodes-have) {
		if _, err := cfg.AddNode(cfg.NextNodeName(layout.RoleWorker), layout.RoleWorker, nil); err != nil {
			return fmt.Errorf("--nodes %d: %w", c.Nodes, err)
		}
	}
	return nil
}
