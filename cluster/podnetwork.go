package cluster

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/containerd"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/phase"
)

// The pod network of a multi-node cluster, as kindnet makes it but set
// from outside the nodes: each node's pods are on a CNI bridge in the
// node's namespace, with addresses from the node's Node.spec.podCIDR (the
// controller-manager allocates a /config.NodeCIDRMaskSize of the cluster's pod
// CIDR to each node, in order); every node has a route to every other
// node's pod subnet through that node's address on devk's bridge; and a
// node masquerades only what its pods send beyond the cluster's pod CIDR
// (to node addresses, the registry relay), so pods see each other's own
// addresses across nodes.

// conflistName is the node's CNI network file in its conf_dir.
const conflistName = "10-devk.conflist"

// masqueradeComment marks devk's masquerade rule in a node's nat table.
const masqueradeComment = "devk: pod traffic leaving the cluster's pod network"

// podSubnet is the first node's slice of the pod CIDR: the first
// /config.NodeCIDRMaskSize, which the controller-manager gives the first node
// that registers (node 0).
func podSubnet(podCIDR string) (string, error) {
	_, n, err := net.ParseCIDR(podCIDR)
	if err != nil || n.IP.To4() == nil {
		return "", fmt.Errorf("pod CIDR %q: want an IPv4 CIDR such as 10.244.0.0/16", podCIDR)
	}
	if ones, _ := n.Mask.Size(); ones > config.NodeCIDRMaskSize {
		return n.String(), nil
	}
	return (&net.IPNet{IP: n.IP.To4(), Mask: net.CIDRMask(config.NodeCIDRMaskSize, 32)}).String(), nil
}

// podSubnetOf is node n's pod subnet: the Node's spec.podCIDR once
// recorded; before that, for node 0, the subnet the controller-manager
// will give it (so its pods need not wait for it), and for any other
// node none yet ("": its pod-network phase writes the conflist once the
// Node has one).
func (c *Cluster) podSubnetOf(n Node) (string, error) {
	if n.Net.PodCIDR != "" {
		return n.Net.PodCIDR, nil
	}
	if n.Name() != c.Config.FirstNode().Name {
		return "", nil
	}
	return podSubnet(c.Config.PodCIDR)
}

// writeConflist writes node n's CNI network for its pod subnet.
func (c *Cluster) writeConflist(n Node, subnet string) (bool, error) {
	conf, err := containerd.CNIConflist("devk-"+c.Config.Name, c.Config.Bridge, subnet, n.Files.CNINetworks(), c.Config.Network.Subnet, c.Config.ServiceCIDR, c.Config.PodCIDR)
	if err != nil {
		return false, err
	}
	return atomicfile.WriteIfChanged(filepath.Join(n.Files.CNIConfDir(), conflistName), append(conf, '\n'), 0o644, "")
}

// nodeIptables runs iptables in node n (its own tables, and its own
// /run/xtables.lock: the host's are never touched).
func nodeIptables(ctx context.Context, n Node, args ...string) error {
	argv := n.enter(append([]string{"iptables", "-w"}, args...)...)
	return execx.Run(ctx, execx.Cmd{Name: argv[0], Args: argv[1:]})
}

// ensurePodMasquerade makes node n masquerade what its pods (subnet)
// send beyond the cluster's pod network: replies to a pod address would
// otherwise head for the host, which has no route to pods. Traffic to
// pods on other nodes keeps its source. The rule is added once (checked
// with -C first).
func ensurePodMasquerade(ctx context.Context, n Node, subnet, clusterPods string) error {
	rule := []string{"POSTROUTING", "-s", subnet, "!", "-d", clusterPods, "-m", "comment", "--comment", masqueradeComment, "-j", "MASQUERADE"}
	if nodeIptables(ctx, n, append([]string{"-t", "nat", "-C"}, rule...)...) == nil {
		return nil
	}
	if err := nodeIptables(ctx, n, append([]string{"-t", "nat", "-A"}, rule...)...); err != nil {
		return fmt.Errorf("node %s: masquerade its pods' traffic beyond %s: %w", n.Name(), clusterPods, err)
	}
	return nil
}

// podRoute is a route in one node's namespace to another node's pods.
type podRoute struct {
	// In is the node whose namespace holds the route.
	In layout.NodeNet
	// To is the pod subnet, Via the address of the node that has it.
	To, Via string
}

// podRoutes are the routes every node needs to every other node's pods:
// one per ordered pair of nodes whose target has a pod subnet.
func podRoutes(nodes []layout.NodeNet) []podRoute {
	var out []podRoute
	for _, a := range nodes {
		for _, b := range nodes {
			if a.Name != b.Name && b.PodCIDR != "" {
				out = append(out, podRoute{In: a, To: b.PodCIDR, Via: b.IP})
			}
		}
	}
	return out
}

// routePods makes every node's routes to the other nodes' pods
// (`ip route replace`, so a re-run changes nothing).
func (c *Cluster) routePods(ctx context.Context) (int, error) {
	routes := podRoutes(c.Config.ActiveNodes())
	for _, r := range routes {
		if err := ipCmd(ctx, "-n", r.In.NetNS, "route", "replace", r.To, "via", r.Via, "dev", layout.NodeInterface); err != nil {
			return 0, fmt.Errorf("route node %s's traffic to %s through %s: %w", r.In.Name, r.To, r.Via, err)
		}
	}
	return len(routes), nil
}

// unroutePods deletes, in every other node, the route to gone's pods.
func (c *Cluster) unroutePods(ctx context.Context, gone layout.NodeNet) int {
	if gone.PodCIDR == "" {
		return 0
	}
	n := 0
	for _, r := range podRoutes(c.Config.Network.Nodes) {
		if r.To == gone.PodCIDR && r.In.Name != gone.Name && ipCmd(ctx, "-n", r.In.NetNS, "route", "del", r.To) == nil {
			n++
		}
	}
	return n
}

// waitPodCIDR waits until the controller-manager has given node n a pod
// subnet, and returns it.
func (c *Cluster) waitPodCIDR(ctx context.Context, cs kubernetes.Interface, n Node) (string, error) {
	var cidr string
	var last error
	err := wait.PollUntilContextTimeout(ctx, podCIDRPollInterval, podCIDRTimeout, true, func(ctx context.Context) (bool, error) {
		obj, err := cs.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		cidr = nodePodCIDR(obj)
		return cidr != "", nil
	})
	if poll.TimedOut(ctx, err) {
		if last == nil {
			last = fmt.Errorf("spec.podCIDR is empty")
		}
		return "", fmt.Errorf("node %s got no pod subnet within %s (%v): the controller-manager allocates them (--allocate-node-cidrs); see its log under %s", n.Name(), podCIDRTimeout, last, c.FirstNode().Files.PodLogs())
	}
	return cidr, err
}

// nodePodCIDR is the IPv4 pod subnet the Node was given ("" before).
func nodePodCIDR(n *corev1.Node) string {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, s := range cidrs {
		if _, ipn, err := net.ParseCIDR(s); err == nil && ipn.IP.To4() != nil {
			return ipn.String()
		}
	}
	return ""
}

// setPodCIDR records node name's pod subnet in the config (not saved).
func (c *Cluster) setPodCIDR(name, cidr string) {
	for i := range c.Config.Network.Nodes {
		if c.Config.Network.Nodes[i].Name == name {
			c.Config.Network.Nodes[i].PodCIDR = cidr
		}
	}
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
	cidr, err := c.waitPodCIDR(ctx, cs, n)
	if err != nil {
		return phase.Done, err
	}
	used, err := c.podSubnetOf(n)
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

// describeRoutes is podRoutes for a plan.
func describeRoutes(nodes []layout.NodeNet) string {
	var parts []string
	for _, r := range podRoutes(nodes) {
		parts = append(parts, r.In.Name+": "+r.To+" via "+r.Via)
	}
	if len(parts) == 0 {
		return "no other node's pods to route to"
	}
	return strings.Join(parts, "; ")
}
