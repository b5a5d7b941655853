package cluster

import (
	"fmt"
	"slices"
	"strings"

	"github.com/devk/devk/cluster/internal/node"
)

// Node is one node of the cluster as the node-scoped phases act on it
// (network, runtime, kubelet, pod network, and down's): its place on the
// cluster's network, where its files are, and the cluster's config.
type Node = node.Node

// FirstNode is node 0, the control-plane node `devk up` makes.
func (c *Cluster) FirstNode() Node {
	return Node{Net: c.Config.FirstNode(), Files: c.Files.FirstNode(), Config: &c.Config}
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
	return Node{Net: n, Files: p, Config: &c.Config}, nil
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
func (c *Cluster) nameFlag() string { return node.NameFlag(c.Config.Name) }

// criSocket is node n's CRI runtime: node 0's is the config's (devk's
// containerd, or the one --cri-socket named); every other node's is its
// own containerd's.
func (c *Cluster) criSocket(n Node) string {
	if n.Name() == c.Config.FirstNode().Name {
		return c.Config.CRISocket
	}
	return n.Files.ContainerdSocket()
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
