package node

import (
	"context"
	"fmt"
	"net"
	"net/url"
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

// apiServiceComment marks devk's rule in a node's nat table that takes
// pods to the API server before kube-proxy's rules for the kubernetes
// Service exist.
const apiServiceComment = "devk: the kubernetes Service until kube-proxy's rules"

// unservedComment marks devk's rule in a node's filter table that
// refuses pod traffic to a service address kube-proxy has not rewritten.
const unservedComment = "devk: pod traffic to a service address no kube-proxy rule took"

// firstPodSubnet is the first node's slice of the pod CIDR: the first
// /config.NodeCIDRMaskSize, which the controller-manager gives the first node
// that registers (node 0).
func firstPodSubnet(podCIDR string) (string, error) {
	_, n, err := net.ParseCIDR(podCIDR)
	if err != nil || n.IP.To4() == nil {
		return "", fmt.Errorf("pod CIDR %q: want an IPv4 CIDR such as 10.244.0.0/16", podCIDR)
	}
	if ones, _ := n.Mask.Size(); ones > config.NodeCIDRMaskSize {
		return n.String(), nil
	}
	return (&net.IPNet{IP: n.IP.To4(), Mask: net.CIDRMask(config.NodeCIDRMaskSize, 32)}).String(), nil
}

// PodSubnet is node n's pod subnet: the Node's spec.podCIDR once
// recorded; before that, for node 0, the subnet the controller-manager
// will give it (so its pods need not wait for it), and for any other
// node none yet ("": its pod-network phase writes the conflist once the
// Node has one).
func (n Node) PodSubnet() (string, error) {
	if n.Net.PodCIDR != "" {
		return n.Net.PodCIDR, nil
	}
	if !n.First() {
		return "", nil
	}
	return firstPodSubnet(n.Config.PodCIDR)
}

// ConflistPath is node n's CNI network file.
func (n Node) ConflistPath() string { return filepath.Join(n.Files.CNIConfDir(), conflistName) }

// WriteConflist writes node n's CNI network for its pod subnet.
func (n Node) WriteConflist(subnet string) (bool, error) {
	cfg := n.Config
	conf, err := containerd.CNIConflist("devk-"+cfg.Name, cfg.Bridge, subnet, n.Files.CNINetworks(), cfg.Network.Subnet, cfg.ServiceCIDR, cfg.PodCIDR)
	if err != nil {
		return false, err
	}
	return atomicfile.WriteIfChanged(n.ConflistPath(), append(conf, '\n'), 0o644, "")
}

// iptables runs iptables in node n (its own tables, and its own
// /run/xtables.lock: the host's are never touched).
func (n Node) iptables(ctx context.Context, args ...string) error {
	argv := n.Enter(append([]string{"iptables", "-w"}, args...)...)
	return execx.Run(ctx, execx.Cmd{Name: argv[0], Args: argv[1:]})
}

// EnsurePodRules adds node n's rules for what its pods (subnet) send,
// each once (checked with -C first):
//   - masquerade what leaves the cluster's pod network: replies to a pod
//     address would otherwise head for the host, which has no route to
//     pods (traffic to pods on other nodes keeps its source);
//   - send the kubernetes Service's address (the API server, for pods)
//     to the API server devk's kubeconfigs name, and refuse, rather than
//     route to the host, anything else still addressed to the service
//     CIDR when it is forwarded. Both only meet what kube-proxy has not
//     rewritten: its jump to its Service rules comes first in the nat
//     table (it inserts, devk appends), and a Service's address it
//     handles is rewritten before the forward. So a pod that starts
//     before kube-proxy has synced (kubeadm's addon phase starts CoreDNS
//     beside it, and CoreDNS lists through 10.96.0.1 at once) reaches
//     the API server, or is refused and retries, instead of waiting out
//     dial timeouts and the client's back-off.
func (n Node) EnsurePodRules(ctx context.Context, subnet string) error {
	cfg := n.Config
	apiIP, err := cfg.ServiceIP()
	if err != nil {
		return err
	}
	api, err := url.Parse(cfg.APIServerURL())
	if err != nil {
		return err
	}
	for _, r := range []struct {
		table, what string
		rule        []string
	}{
		{"nat", "masquerade its pods' traffic beyond " + cfg.PodCIDR,
			[]string{"POSTROUTING", "-s", subnet, "!", "-d", cfg.PodCIDR, "-m", "comment", "--comment", masqueradeComment, "-j", "MASQUERADE"}},
		{"nat", "send its pods' traffic to the kubernetes Service (" + apiIP.String() + ":443) to " + api.Host + " until kube-proxy's rules take it",
			[]string{"PREROUTING", "-s", subnet, "-d", apiIP.String() + "/32", "-p", "tcp", "--dport", "443", "-m", "comment", "--comment", apiServiceComment, "-j", "DNAT", "--to-destination", api.Host}},
		{"filter", "refuse its pods' traffic to the service CIDR " + cfg.ServiceCIDR + " that kube-proxy has not rewritten",
			[]string{"FORWARD", "-s", subnet, "-d", cfg.ServiceCIDR, "-m", "comment", "--comment", unservedComment, "-j", "REJECT"}},
	} {
		if n.iptables(ctx, append([]string{"-t", r.table, "-C"}, r.rule...)...) == nil {
			continue
		}
		if err := n.iptables(ctx, append([]string{"-t", r.table, "-A"}, r.rule...)...); err != nil {
			return fmt.Errorf("node %s: %s: %w", n.Name(), r.what, err)
		}
	}
	return nil
}

// PodRoute is a route in one node's namespace to another node's pods.
type PodRoute struct {
	// In is the node whose namespace holds the route.
	In layout.NodeNet
	// To is the pod subnet, Via the address of the node that has it.
	To, Via string
}

// PodRoutes are the routes every node needs to every other node's pods:
// one per ordered pair of nodes whose target has a pod subnet.
func PodRoutes(nodes []layout.NodeNet) []PodRoute {
	var out []PodRoute
	for _, a := range nodes {
		for _, b := range nodes {
			if a.Name != b.Name && b.PodCIDR != "" {
				out = append(out, PodRoute{In: a, To: b.PodCIDR, Via: b.IP})
			}
		}
	}
	return out
}

// RoutePods makes every node's routes to the other nodes' pods
// (`ip route replace`, so a re-run changes nothing).
func RoutePods(ctx context.Context, nodes []layout.NodeNet) (int, error) {
	routes := PodRoutes(nodes)
	for _, r := range routes {
		if err := ipCmd(ctx, "-n", r.In.NetNS, "route", "replace", r.To, "via", r.Via, "dev", layout.NodeInterface); err != nil {
			return 0, fmt.Errorf("route node %s's traffic to %s through %s: %w", r.In.Name, r.To, r.Via, err)
		}
	}
	return len(routes), nil
}

// UnroutePods deletes, in every other node, the route to gone's pods.
func UnroutePods(ctx context.Context, nodes []layout.NodeNet, gone layout.NodeNet) int {
	if gone.PodCIDR == "" {
		return 0
	}
	n := 0
	for _, r := range PodRoutes(nodes) {
		if r.To == gone.PodCIDR && r.In.Name != gone.Name && ipCmd(ctx, "-n", r.In.NetNS, "route", "del", r.To) == nil {
			n++
		}
	}
	return n
}

// WaitPodCIDR waits until the controller-manager has given node n a pod
// subnet, and returns it; podLogs is where the controller-manager's log
// is.
func (n Node) WaitPodCIDR(ctx context.Context, cs kubernetes.Interface, podLogs string) (string, error) {
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
		return "", fmt.Errorf("node %s got no pod subnet within %s (%v): the controller-manager allocates them (--allocate-node-cidrs); see its log under %s", n.Name(), podCIDRTimeout, last, podLogs)
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

// DescribeRoutes is PodRoutes for a plan.
func DescribeRoutes(nodes []layout.NodeNet) string {
	var parts []string
	for _, r := range PodRoutes(nodes) {
		parts = append(parts, r.In.Name+": "+r.To+" via "+r.Via)
	}
	if len(parts) == 0 {
		return "no other node's pods to route to"
	}
	return strings.Join(parts, "; ")
}
