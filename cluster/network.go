package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/phase"
)

// daemonEnv is what the daemons devk runs for the cluster's nodes
// (containerd, the kubelet) get on top of devk's own environment: when
// a proxy is set (`sudo -E` keeps HTTPS_PROXY), NO_PROXY with the
// cluster's networks and names, so that their traffic to the cluster
// goes direct (kube.NoProxyEnv).
func (c *Cluster) daemonEnv() []string {
	env := kube.NoProxyEnv(os.Environ(), c.Config.NoProxy())
	if env != nil {
		c.Reporter.Debugf("a proxy is set: the nodes' daemons get %s; devk's own clients reach this machine's networks directly", env[0])
	}
	return env
}

// runNetwork makes the host's bridge, each node's namespace and the veth
// between them, addresses and default routes, and the node's sysctls.
// Every step is skipped when already done.
func (c *Cluster) runNetwork(ctx context.Context) (phase.Outcome, error) {
	changed, err := c.wireBridge(ctx)
	if err != nil {
		return phase.Done, err
	}
	for _, n := range c.Config.ActiveNodes() { // a leaving node's namespace may be gone already
		ch, err := Node{Net: n, Config: &c.Config}.Wire(ctx)
		if err != nil {
			return phase.Done, err
		}
		changed = changed || ch
	}
	cp := c.Config.FirstNode()
	nw := c.Config.Network
	if len(nw.Nodes) > 1 {
		return phase.ChangedIf(changed, "%d nodes at %s…; host %s on %s", len(nw.Nodes), cp.IP, nw.HostIP, nw.HostBridge), nil
	}
	return phase.ChangedIf(changed, "node %s at %s in netns %s; host %s on %s", cp.Name, cp.IP, cp.NetNS, nw.HostIP, nw.HostBridge), nil
}

// wireBridge makes devk's bridge on the host, with the host's address on
// it, after checking that no host route overlaps the cluster's subnet.
func (c *Cluster) wireBridge(ctx context.Context) (bool, error) {
	if err := node.CheckHostRoutes(ctx, c.Config.Network, c.Config.Name); err != nil {
		return false, err
	}
	changed, err := c.allowBridgeForward(ctx)
	if err != nil {
		return changed, err
	}
	made, err := node.WireBridge(ctx, c.Config.Network)
	return changed || made, err
}

// allowBridgeForward adds the FORWARD rule that --allow-bridge-forward
// asks for, or that cluster.json records (put back if it went): recorded
// first, so that a down after a kill between the two removes it.
func (c *Cluster) allowBridgeForward(ctx context.Context) (bool, error) {
	if !c.AllowBridgeForward && !c.Config.Network.ForwardRule {
		return false, nil
	}
	if !c.Config.Network.ForwardRule {
		c.Config.Network.ForwardRule = true
		if err := c.SaveConfig(); err != nil {
			return false, err
		}
	}
	return c.forwardRule().Add(ctx)
}

// removeBridgeForward removes the FORWARD rule up added, if cluster.json
// records one, and then the record.
func (c *Cluster) removeBridgeForward(ctx context.Context) (bool, error) {
	if !c.Config.Network.ForwardRule {
		return false, nil
	}
	removed, err := c.forwardRule().Remove(ctx)
	if err != nil {
		return removed, err
	}
	c.Config.Network.ForwardRule = false
	return removed, c.SaveConfig()
}

// downNetwork kills whatever still runs in each node's namespace (a
// process there keeps it, and its veth, alive), deletes the namespace
// (its veth goes with it), removes the FORWARD rule up added, and
// deletes the host's bridge.
func (c *Cluster) downNetwork(ctx context.Context) (phase.Outcome, error) {
	var did []string
	for _, n := range c.Config.Network.Nodes {
		d, err := node.DeleteNetwork(ctx, n)
		if err != nil {
			return phase.Done, err
		}
		did = append(did, d...)
	}
	if removed, err := c.removeBridgeForward(ctx); err != nil {
		return phase.Done, err
	} else if removed {
		did = append(did, "the FORWARD rule for "+c.Config.Network.HostBridge)
	}
	// The pods' bridge is in the node's namespace: it went with it.
	br := c.Config.Network.HostBridge
	if deleted, err := node.DeleteBridge(ctx, br); err != nil {
		return phase.Done, err
	} else if deleted {
		did = append(did, "bridge "+br)
	}
	if len(did) == 0 {
		return phase.Unchanged("nothing left"), nil
	}
	return phase.Changed("deleted %s", strings.Join(did, ", ")), nil
}

// setPodCIDR records node name's pod subnet in the config (not saved).
func (c *Cluster) setPodCIDR(name, cidr string) {
	for i := range c.Config.Network.Nodes {
		if c.Config.Network.Nodes[i].Name == name {
			c.Config.Network.Nodes[i].PodCIDR = cidr
		}
	}
}

// routePods makes every active node's routes to the other nodes' pods.
func (c *Cluster) routePods(ctx context.Context) (int, error) {
	return node.RoutePods(ctx, c.Config.ActiveNodes())
}

// runPodNetwork is up's pod-network phase: it records node 0's pod
// subnet, checks that it is the one node 0's pods have had their
// addresses from, and routes every node to every other node's pods.
func (c *Cluster) runPodNetwork(ctx context.Context) (phase.Outcome, error) {
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	n := c.FirstNode()
	cidr, err := n.WaitPodCIDR(ctx, cs, n.Files.PodLogs())
	if err != nil {
		return phase.Done, err
	}
	used, err := n.PodSubnet()
	if err != nil {
		return phase.Done, err
	}
	if cidr != used {
		return phase.Done, fmt.Errorf("node %s was given pod subnet %s, but its pods have addresses from %s: the controller-manager gave the first subnet to another node; `devk down --name %s` and up again", n.Name(), cidr, used, c.Config.Name)
	}
	changed := n.Net.PodCIDR != cidr
	if changed {
		c.setPodCIDR(n.Name(), cidr)
		if err := c.SaveConfig(); err != nil {
			return phase.Done, err
		}
	}
	routes, err := c.routePods(ctx)
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(changed, "%s has pods %s; %d routes between nodes", n.Name(), cidr, routes), nil
}
