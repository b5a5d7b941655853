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

// Node is one Node of the cluster as the Node-scoped phases act on it
// (network, runtime, kubelet, pod network, and down's): its place on the
// cluster's network and where its files are. Node 0, the Node `devk up`
// makes, keeps its files in the cluster directory; every other Node in
// nodes/<name>/ (layout.ClusterFiles.Node).
type Node struct {
	Net   layout.NodeNet
	Files layout.NodeFiles
}

// Name is the node's name (its Node object's).
func (n Node) Name() string { return n.Net.Name }

// PodCIDR is the node's pod subnet once its Node has one ("" before).
func (n Node) PodCIDR() string { return n.Net.PodCIDR }

// IP is the node's address: where its kubelet and, on a control-plane
// node, its static pods listen.
func (n Node) IP() string { return n.Net.IP }

// FirstNode is node 0, the control-plane node `devk up` makes.
func (c *Cluster) FirstNode() Node {
	return Node{Net: c.Config.FirstNode(), Files: c.Files.FirstNode()}
}

// nodeNamed is the cluster's node called name.
func (c *Cluster) nodeNamed(name string) (Node, error) {
	if name == "" {
		return c.FirstNode(), nil
	}
	n, _, err := c.Config.FindNode(name)
	if err != nil {
		return Node{}, err
	}
	p, err := c.Files.Node(c.Config, name)
	if err != nil {
		return Node{}, err
	}
	return Node{Net: n, Files: p}, nil
}

// nodes are every node of the cluster, node 0 first.
func (c *Cluster) nodes() ([]Node, error) {
	out := []Node{c.FirstNode()}
	for _, n := range c.Config.Network.Nodes[1:] {
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
func (c *Cluster) nodesLastFirst() ([]Node, error) {
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
func (c *Cluster) criSocket(n Node) string {
	if n.Name() == c.Config.FirstNode().Name {
		return c.Config.CRISocket
	}
	return n.Files.ContainerdSocket()
}

// nodeMemory is what one more node takes, measured on a worker of a
// v1.34.4 cluster (RSS): kubelet 95 MB, containerd 53 MB, kube-proxy
// 60 MB and its shim 14 MB, 222 MB in all, rounded up for the pods'
// pause containers and shims.
const nodeMemory = 256 << 20

// controlPlaneMemory is what one more control-plane node takes: a
// worker's and its etcd, API server, controller-manager and scheduler.
const controlPlaneMemory = 1024 << 20

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

// memoryProblem says whether the machine lacks the memory for new nodes
// of these roles (nil when it has it, or cannot tell).
func memoryProblem(roles []string, available uint64) *Problem {
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
	return &Problem{Check: "memory", What: fmt.Sprintf("%d more nodes (%d control-plane) need about %d MiB (%d MiB a worker: kubelet, containerd, kube-proxy; %d MiB a control-plane node: etcd and the API server besides), and %d MiB are available",
		len(roles), cps, need>>20, nodeMemory>>20, controlPlaneMemory>>20, available>>20), Fix: "ask for fewer nodes, or free memory"}
}

// checkNodeCount refuses a --nodes or --control-planes that would take
// nodes away, that the cluster's subnet cannot hold, or more than one
// control plane for a cluster made without a load balancer; it makes
// Nodes count the control planes asked for at least.
func (c *Cluster) checkNodeCount() error {
	have, cps := len(c.Config.Network.Nodes), len(c.Config.ControlPlanes())
	switch {
	case c.Nodes < 0:
		return fmt.Errorf("--nodes %d: want the number of nodes, 1 or more", c.Nodes)
	case c.ControlPlanes < 0:
		return fmt.Errorf("--control-planes %d: want the number of control-plane nodes, 1 or more", c.ControlPlanes)
	case c.Nodes > 0 && c.Nodes < have:
		return fmt.Errorf("cluster %s has %d nodes, more than --nodes %d: `devk node remove%s NAME` removes one (its nodes: %s)", c.Config.Name, have, c.Nodes, c.nameFlag(), strings.Join(c.Config.NodeNames(), ", "))
	case c.existed && c.ControlPlanes > 0 && c.ControlPlanes < cps:
		return fmt.Errorf("cluster %s has %d control-plane nodes, more than --control-planes %d: `devk node remove%s NAME` removes one", c.Config.Name, cps, c.ControlPlanes, c.nameFlag())
	case c.existed && c.ControlPlanes > 1 && !c.Config.HA():
		return c.noEndpoint(fmt.Sprintf("--control-planes %d", c.ControlPlanes))
	}
	if c.ControlPlanes > 0 && c.Nodes > 0 && c.Nodes < c.ControlPlanes {
		return fmt.Errorf("--nodes %d is fewer than --control-planes %d: --nodes counts every node, control planes included", c.Nodes, c.ControlPlanes)
	}
	c.Nodes = max(c.Nodes, c.ControlPlanes)
	if _, err := c.nodesToJoinIn(c.Config); err != nil {
		return fmt.Errorf("--nodes %d: %w", c.Nodes, err)
	}
	return nil
}

// noEndpoint is the error of asking a cluster made with one control
// plane for another.
func (c *Cluster) noEndpoint(what string) error {
	return fmt.Errorf("%s: cluster %s was made with one control-plane node and no load balancer (its API server's certificate and every kubeconfig name node 0 itself), so it cannot take another; make it anew with them: `devk down%s && devk up%s --control-planes N`",
		what, c.Config.Name, c.nameFlag(), c.nameFlag())
}

// newNodeRoles are the roles of the nodes up is to add.
func (c *Cluster) newNodeRoles() []string {
	var out []string
	for _, n := range c.nodesToJoin() {
		if _, _, err := c.Config.FindNode(n.Name); err != nil {
			out = append(out, n.Role)
		}
	}
	return out
}

// newNodeMemory is what a new node of the role needs (see nodeMemory).
func newNodeMemory(role string) uint64 {
	if role == layout.RoleControlPlane {
		return controlPlaneMemory
	}
	return nodeMemory
}
