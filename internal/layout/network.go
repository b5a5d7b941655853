package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/devk/devk/internal/validname"
)

// A devk node is a network namespace: a veth joins it to a bridge on the
// host that devk owns, and the node has an address in a subnet of the
// cluster's own, which no host route uses. Every node component
// (containerd, the kubelet, hostNetwork static pods, kube-proxy's rules,
// the pods' CNI bridge) lives in the node's namespace; the host reaches
// the node at its address on the bridge, and the node reaches the host
// (the registry) at the bridge's address.
const (
	// DefaultNodeSubnets is where each cluster's node subnet comes from:
	// the first free /24 of it.
	DefaultNodeSubnets = "10.250.0.0/16"
	// NodeSubnetBits is the prefix length of a cluster's node subnet.
	NodeSubnetBits = 24
	// NetNSDir is where `ip netns` keeps named network namespaces.
	NetNSDir = "/run/netns"
	// NodeInterface is the node's end of its veth, inside its namespace.
	NodeInterface = "eth0"
	// DefaultPodCIDR is the cluster's pod network. Pods live inside
	// their node's namespace, so clusters can all use the same one.
	DefaultPodCIDR = "10.244.0.0/16"
)

// Network is how a cluster's nodes are wired.
type Network struct {
	// Subnet is the nodes' subnet (a /24); HostIP, its first address,
	// is the host's end on HostBridge.
	Subnet     string `json:"subnet"`
	HostBridge string `json:"hostBridge"`
	HostIP     string `json:"hostIP"`
	// Nodes are the cluster's nodes, the first the control plane.
	Nodes []NodeNet `json:"nodes"`
	// ForwardRule says up added the one rule to the host's FORWARD chain
	// that accepts traffic between HostBridge's ports (up
	// --allow-bridge-forward, on a host whose FORWARD policy drops it);
	// down removes it.
	ForwardRule bool `json:"forwardRule,omitempty"`
}

// Node roles.
const (
	// RoleControlPlane runs etcd and the control-plane static pods
	// besides a kubelet. Node 0, the node `devk up` makes, is one.
	RoleControlPlane = "control-plane"
	// RoleWorker runs a kubelet, kube-proxy and pods only.
	RoleWorker = "worker"
)

// NodeNet is one node's namespace, address, veth, role and cgroup root.
// Its index (which address and host veth it has) follows from its
// address: Network.NodeIndex.
type NodeNet struct {
	Name     string `json:"name"`
	NetNS    string `json:"netns"`
	IP       string `json:"ip"`
	HostVeth string `json:"hostVeth"`
	// Role is RoleControlPlane or RoleWorker.
	Role string `json:"role"`
	// CgroupRoot is the node's kubelet cgroupRoot: Config.CgroupRoot
	// for node 0 (so an existing cluster keeps its pods where they
	// are), NodeCgroupRoot for every other node, so that two kubelets'
	// kubepods trees never mix. down kills what is in it.
	CgroupRoot string `json:"cgroupRoot"`
	// PodCIDR is the node's Node.spec.podCIDR once the controller-manager
	// has allocated one (empty before): copied for the pod routes and for
	// down, which must work without an API server. The API is the source
	// of truth.
	PodCIDR string `json:"podCIDR,omitempty"`
	// Tree is the tree whose kubelet a worker runs when it is not the
	// cluster's (a config file's nodes[].tree), absolute.
	Tree string `json:"tree,omitempty"`
	// KubeProxyImage is the image of Tree's kube-proxy that devk pushed
	// for the node, which a DaemonSet of the node's own runs there (""
	// without Tree, or where kube-proxy does not run).
	KubeProxyImage string `json:"kubeProxyImage,omitempty"`
	// Joining says `devk node add` has begun to join the node and not
	// finished: another add resumes it, and `devk node remove` or `devk
	// down` removes what it made.
	Joining bool `json:"joining,omitempty"`
	// Leaving says `devk node remove` has begun to remove the node and
	// not finished (its etcd member may be gone, its kubelet stopped):
	// up and node add leave it alone, and node remove again finishes it.
	Leaving bool `json:"leaving,omitempty"`
}

// OwnKubeProxies are the nodes that run a kube-proxy of their own tree
// (NodeNet.KubeProxyImage), in the cluster's order.
func (c Config) OwnKubeProxies() []NodeNet {
	var out []NodeNet
	for _, n := range c.Network.Nodes {
		if n.KubeProxyImage != "" {
			out = append(out, n)
		}
	}
	return out
}

// IsControlPlane says whether the node runs the control plane.
func (n NodeNet) IsControlPlane() bool { return n.Role == RoleControlPlane }

// NetNSPath is the bind mount that names the node's namespace; processes
// enter it with `nsenter --net=<path>`.
func (n NodeNet) NetNSPath() string { return filepath.Join(NetNSDir, n.NetNS) }

// HostBridgeName is the cluster's bridge on the host: "dkb-<name>" when
// that fits Linux's 15-byte interface names, else "dkb_" and 11 hex
// digits of the name's SHA-256 (cluster names have no '_').
func HostBridgeName(cluster string) string {
	if b := "dkb-" + cluster; len(b) <= 15 {
		return b
	}
	return "dkb_" + shortHash(cluster, 11)
}

// HostVethName is the host's end of node i's veth: "dkv" and 10 hex
// digits of a hash of the cluster's name and the index, 13 bytes.
func HostVethName(cluster string, i int) string {
	return "dkv" + shortHash(cluster+"/"+strconv.Itoa(i), 10)
}

// NetNSName is the name of a node's network namespace. It is the same
// for a node name in any cluster: AddNode refuses a name another
// cluster's node has.
func NetNSName(node string) string { return "devk-" + node }

// NodeCgroupRoot is the kubelet cgroupRoot of a node other than node 0:
// the cluster's, "_", the node's name. Neither name has a '_', so no two
// (cluster, node) pairs and no cluster's own CgroupRoot share one.
func NodeCgroupRoot(cluster, node string) string { return CgroupRoot(cluster) + "_" + node }

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// NodeIP is the address of node i (0-based) in subnet: the host has the
// first address, the nodes the ones after it.
func NodeIP(subnet *net.IPNet, i int) net.IP {
	return offset(subnet, i+2)
}

func offset(subnet *net.IPNet, n int) net.IP {
	v := ipv4Uint(subnet.IP) + uint32(n)
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).To4()
}

func ipv4Uint(ip net.IP) uint32 {
	ip4 := ip.To4()
	return uint32(ip4[0])<<24 | uint32(ip4[1])<<16 | uint32(ip4[2])<<8 | uint32(ip4[3])
}

// lastAddress is subnet's broadcast address.
func lastAddress(subnet *net.IPNet) net.IP {
	ones, bits := subnet.Mask.Size()
	return offset(subnet, 1<<(bits-ones)-1)
}

// maxNodes is how many node addresses subnet holds: all but the network
// address, the host's (the first) and the broadcast address.
func maxNodes(subnet *net.IPNet) int {
	ones, bits := subnet.Mask.Size()
	return 1<<(bits-ones) - 3
}

// NodeIndex is the index of the node at address ip (a canonical IPv4
// address): NodeIP(subnet, index) is ip. The index names the node's host
// veth (HostVethName), so it must stay the node's for its life, and a
// removed node's index is free again (FreeIndex).
func (n Network) NodeIndex(ip string) (int, error) {
	_, subnet, err := net.ParseCIDR(n.Subnet)
	if err != nil || subnet.IP.To4() == nil {
		return 0, fmt.Errorf("network subnet %q: want an IPv4 subnet", n.Subnet)
	}
	addr := net.ParseIP(ip)
	if addr == nil || addr.To4() == nil || addr.String() != ip || !subnet.Contains(addr) {
		return 0, fmt.Errorf("%q is not an IPv4 address in %s, written as Go writes it", ip, n.Subnet)
	}
	i := int(ipv4Uint(addr)-ipv4Uint(subnet.IP)) - 2
	if i < 0 || i >= maxNodes(subnet) {
		return 0, fmt.Errorf("%s is not a node address of %s: the first is the host's (%s), the last is broadcast", ip, n.Subnet, offset(subnet, 1))
	}
	return i, nil
}

// FreeIndex is the first index no node has: a node added after one was
// removed takes its address and host veth name, so the subnet does not
// run out by adding and removing.
func (n Network) FreeIndex() (int, error) {
	_, subnet, err := net.ParseCIDR(n.Subnet)
	if err != nil || subnet.IP.To4() == nil {
		return 0, fmt.Errorf("network subnet %q: want an IPv4 subnet", n.Subnet)
	}
	used := map[int]bool{}
	for _, node := range n.Nodes {
		if i, err := n.NodeIndex(node.IP); err == nil {
			used[i] = true
		}
	}
	for i := range maxNodes(subnet) {
		if !used[i] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no address left in %s for another node (it holds %d): remove one (`devk node remove NAME`)", n.Subnet, maxNodes(subnet))
}

// NewNetwork is the network of a cluster with one node in subnet.
func NewNetwork(cluster, node string, subnet *net.IPNet) Network {
	return Network{
		Subnet:     subnet.String(),
		HostBridge: HostBridgeName(cluster),
		HostIP:     offset(subnet, 1).String(),
		Nodes: []NodeNet{{Name: node, NetNS: NetNSName(node), IP: NodeIP(subnet, 0).String(),
			HostVeth: HostVethName(cluster, 0), Role: RoleControlPlane, CgroupRoot: CgroupRoot(cluster)}},
	}
}

// validate checks a network read from cluster.json: down deletes the
// bridge, the veths and the namespaces it names.
func (n Network) validate(c Config, bad func(field, got, want string) error) error {
	_, subnet, err := net.ParseCIDR(n.Subnet)
	if err != nil || subnet.IP.To4() == nil || subnet.String() != n.Subnet {
		return bad("network.subnet", n.Subnet, "want an IPv4 subnet such as 10.250.1.0/24")
	}
	if ones, _ := subnet.Mask.Size(); ones > 30 {
		return bad("network.subnet", n.Subnet, "want room for the host and a node (/30 or larger)")
	}
	if err := CheckPrivate(subnet); err != nil {
		return bad("network.subnet", n.Subnet, "want a private subnet ("+err.Error()+")")
	}
	if n.HostBridge != HostBridgeName(c.Name) {
		return bad("network.hostBridge", n.HostBridge, "want "+HostBridgeName(c.Name))
	}
	if want := offset(subnet, 1).String(); n.HostIP != want {
		return bad("network.hostIP", n.HostIP, "want "+want)
	}
	if len(n.Nodes) == 0 {
		return bad("network.nodes", "[]", "want the control-plane node")
	}
	_, pods, err := net.ParseCIDR(c.PodCIDR)
	if err != nil {
		return bad("podCIDR", c.PodCIDR, "want an IPv4 CIDR")
	}
	names, ips := map[string]int{}, map[string]int{}
	podNets := map[int]*net.IPNet{}
	for i, node := range n.Nodes {
		field := fmt.Sprintf("network.nodes[%d]", i)
		if err := validname.Node(node.Name); err != nil {
			return bad(field+".name", node.Name, "want a DNS-1123 label ("+err.Error()+")")
		}
		if j, dup := names[node.Name]; dup {
			return bad(field+".name", node.Name, fmt.Sprintf("but network.nodes[%d] has that name", j))
		}
		names[node.Name] = i
		if node.NetNS != NetNSName(node.Name) {
			return bad(field+".netns", node.NetNS, "want "+NetNSName(node.Name))
		}
		index, err := n.NodeIndex(node.IP)
		if err != nil {
			return bad(field+".ip", node.IP, "want a node address in "+n.Subnet+" ("+err.Error()+")")
		}
		if j, dup := ips[node.IP]; dup {
			return bad(field+".ip", node.IP, fmt.Sprintf("but network.nodes[%d] has that address", j))
		}
		ips[node.IP] = i
		if node.HostVeth != HostVethName(c.Name, index) {
			return bad(field+".hostVeth", node.HostVeth, fmt.Sprintf("want %s (the node at %s has index %d)", HostVethName(c.Name, index), node.IP, index))
		}
		switch {
		case i == 0 && node.Role != RoleControlPlane:
			return bad(field+".role", node.Role, "want "+RoleControlPlane+": node 0 is the control plane `devk up` made")
		case node.Role != RoleControlPlane && node.Role != RoleWorker:
			return bad(field+".role", node.Role, "want "+RoleControlPlane+" or "+RoleWorker)
		}
		wantRoot := NodeCgroupRoot(c.Name, node.Name)
		if i == 0 {
			wantRoot = c.CgroupRoot
		}
		if node.CgroupRoot != wantRoot {
			return bad(field+".cgroupRoot", node.CgroupRoot, "want "+wantRoot)
		}
		if node.PodCIDR != "" {
			_, pn, err := net.ParseCIDR(node.PodCIDR)
			if err != nil || pn.IP.To4() == nil || pn.String() != node.PodCIDR || !pods.Contains(pn.IP) || !pods.Contains(lastAddress(pn)) {
				return bad(field+".podCIDR", node.PodCIDR, "want a subnet of the pod CIDR "+c.PodCIDR)
			}
			for j := range i {
				if other := podNets[j]; other != nil && Overlaps(pn, other) {
					return bad(field+".podCIDR", node.PodCIDR, fmt.Sprintf("but it overlaps network.nodes[%d]'s %s", j, other))
				}
			}
			podNets[i] = pn
		}
	}
	return nil
}

// FirstNode is node 0, the control-plane node `devk up` made.
func (c Config) FirstNode() NodeNet { return c.Network.Nodes[0] }

// NodeNetNS is the network namespace of the node called name (its path,
// for setns or `nsenter --net`), whose loopback is the node's own; "" for
// a name the cluster lacks.
func (c Config) NodeNetNS(name string) string {
	if n, _, err := c.FindNode(name); err == nil {
		return n.NetNSPath()
	}
	return ""
}

// privateNodeSubnets are the ranges a node subnet must lie in: RFC
// 1918's private networks and RFC 6598's shared address space (CGNAT),
// which no public, multicast or reserved address is in.
var privateNodeSubnets = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"}

// CheckPrivate refuses a node subnet outside privateNodeSubnets.
func CheckPrivate(subnet *net.IPNet) error {
	for _, s := range privateNodeSubnets {
		_, p, _ := net.ParseCIDR(s)
		if pOnes, _ := p.Mask.Size(); p.Contains(subnet.IP) {
			if ones, _ := subnet.Mask.Size(); ones >= pOnes {
				return nil
			}
		}
	}
	return fmt.Errorf("%s is not in a private range: choose a subnet inside %s (RFC 1918), or %s (CGNAT)", subnet, strings.Join(privateNodeSubnets[:3], ", "), privateNodeSubnets[3])
}

// NoProxy is what must bypass an HTTP proxy for the cluster (NO_PROXY's
// entries): its node subnet, pod and service CIDRs, and every node's
// name and address, the load balancer's on the bridge included.
func (c Config) NoProxy() []string {
	var out []string
	for _, s := range []string{c.Network.Subnet, c.PodCIDR, c.ServiceCIDR, c.Network.HostIP} {
		if s != "" {
			out = append(out, s)
		}
	}
	for _, n := range c.Network.Nodes {
		out = append(out, n.Name, n.IP)
	}
	return out
}

// Overlaps says whether two IPv4 networks share an address.
func Overlaps(a, b *net.IPNet) bool { return a.Contains(b.IP) || b.Contains(a.IP) }

// PlaceAmong gives a new cluster the first /24 of DefaultNodeSubnets that
// no other cluster uses and no host route or address (taken) overlaps,
// and its node the second address of it. (The pod network may be the
// same for every cluster: pods live in their node's namespace.)
func (c *Config) PlaceAmong(others []Config, taken []*net.IPNet) error {
	used := append([]*net.IPNet(nil), taken...)
	for _, o := range others {
		if _, n, err := net.ParseCIDR(o.Network.Subnet); err == nil {
			used = append(used, n)
		}
	}
	_, pool, _ := net.ParseCIDR(DefaultNodeSubnets)
	ones, _ := pool.Mask.Size()
	for i := 0; i < 1<<(NodeSubnetBits-ones); i++ {
		cand := &net.IPNet{IP: offset(pool, i<<(32-NodeSubnetBits)), Mask: net.CIDRMask(NodeSubnetBits, 32)}
		free := true
		for _, u := range used {
			free = free && !Overlaps(cand, u)
		}
		if !free {
			continue
		}
		c.place(cand)
		return nil
	}
	return fmt.Errorf("no free /%d left in %s for cluster %s's nodes: remove a cluster (`devk down --name …`)", NodeSubnetBits, DefaultNodeSubnets, c.Name)
}

// NodeNames are the cluster's nodes' names, node 0 first.
func (c Config) NodeNames() []string {
	var out []string
	for _, n := range c.Network.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// FindNode is the node called name and its position in Network.Nodes
// (0: the node `devk up` made).
func (c Config) FindNode(name string) (NodeNet, int, error) {
	for i, n := range c.Network.Nodes {
		if n.Name == name {
			return n, i, nil
		}
	}
	return NodeNet{}, 0, fmt.Errorf("cluster %s has no node %q; its nodes: %s", c.Name, name, strings.Join(c.NodeNames(), ", "))
}

// FirstNodeName is the name of node 0 of the cluster called cluster, the
// control-plane node `devk up` makes: <cluster>-control-plane, as kind
// names it.
func FirstNodeName(cluster string) string { return cluster + "-" + RoleControlPlane }

// NextNodeName is the first free name in kind's style for another node
// of role: <cluster>-worker, <cluster>-worker2, …; <cluster>-control-plane2,
// … (<cluster>-control-plane is node 0).
func (c Config) NextNodeName(role string) string {
	base := c.Name + "-" + role
	taken := map[string]bool{}
	for _, n := range c.NodeNames() {
		taken[n] = true
	}
	for k := 1; ; k++ {
		name := base
		if k > 1 {
			name += strconv.Itoa(k)
		}
		if !taken[name] {
			return name
		}
	}
}

// AddNode adds a node called name with role to the cluster's network,
// at the first free index (FreeIndex), and returns it. others are the
// machine's other clusters: a node's network namespace is named by the
// node alone (NetNSName), so a name one of them uses is refused. It
// changes only c; the caller saves it once the node exists.
func (c *Config) AddNode(name, role string, others []Config) (NodeNet, error) {
	if err := validname.Node(name); err != nil {
		return NodeNet{}, err
	}
	if role != RoleControlPlane && role != RoleWorker {
		return NodeNet{}, fmt.Errorf("node role %q: want %s or %s", role, RoleControlPlane, RoleWorker)
	}
	if _, _, err := c.FindNode(name); err == nil {
		return NodeNet{}, fmt.Errorf("cluster %s has a node %s already: choose another name (`devk status` lists the nodes)", c.Name, name)
	}
	for _, o := range others {
		for _, on := range o.NodeNames() {
			if on == name {
				return NodeNet{}, fmt.Errorf("node name %s is taken by cluster %s, and the two would share network namespace %s: choose another name", name, o.Name, NetNSName(name))
			}
		}
	}
	i, err := c.Network.FreeIndex()
	if err != nil {
		return NodeNet{}, fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	_, subnet, _ := net.ParseCIDR(c.Network.Subnet)
	n := NodeNet{Name: name, NetNS: NetNSName(name), IP: NodeIP(subnet, i).String(), HostVeth: HostVethName(c.Name, i),
		Role: role, CgroupRoot: NodeCgroupRoot(c.Name, name)}
	c.Network.Nodes = append(c.Network.Nodes, n)
	return n, nil
}

// ActiveNodes are the cluster's nodes but those being removed (Leaving):
// the ones up starts, routes to and puts behind the load balancer.
func (c Config) ActiveNodes() []NodeNet {
	var out []NodeNet
	for _, n := range c.Network.Nodes {
		if !n.Leaving {
			out = append(out, n)
		}
	}
	return out
}

// LeavingNodes are the names of the nodes being removed.
func (c Config) LeavingNodes() []string {
	var out []string
	for _, n := range c.Network.Nodes {
		if n.Leaving {
			out = append(out, n.Name)
		}
	}
	return out
}

// SetLeaving marks the node called name as being removed
// (NodeNet.Leaving).
func (c *Config) SetLeaving(name string) {
	if _, i, err := c.FindNode(name); err == nil {
		c.Network.Nodes[i].Leaving = true
	}
}

// RemoveNode takes the node called name out of the cluster's network;
// its index is free again. Node 0 cannot go: the cluster's directory is
// its directory, and `devk down` removes it with the cluster.
func (c *Config) RemoveNode(name string) error {
	_, i, err := c.FindNode(name)
	if err != nil {
		return err
	}
	if i == 0 && len(c.ControlPlanes()) == 1 {
		return fmt.Errorf("node %s is the cluster's only control-plane node (its etcd and API server are the cluster's): it goes only with the cluster, `devk down --name %s`", name, c.Name)
	}
	if i == 0 {
		return fmt.Errorf("node %s is the control-plane node `devk up` made, whose directory is the cluster's: it goes only with the cluster (`devk down --name %s`); remove another control-plane node", name, c.Name)
	}
	c.Network.Nodes = append(c.Network.Nodes[:i:i], c.Network.Nodes[i+1:]...)
	return nil
}
