package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
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
}

// NodeNet is one node's namespace, address and veth.
type NodeNet struct {
	Name     string `json:"name"`
	NetNS    string `json:"netns"`
	IP       string `json:"ip"`
	HostVeth string `json:"hostVeth"`
}

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

// NetNSName is the name of a node's network namespace.
func NetNSName(node string) string { return "devk-" + node }

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
	ip := make(net.IP, 4)
	copy(ip, subnet.IP.To4())
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	v += uint32(n)
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).To4()
}

// NewNetwork is the network of a cluster with one node in subnet.
func NewNetwork(cluster, node string, subnet *net.IPNet) Network {
	return Network{
		Subnet:     subnet.String(),
		HostBridge: HostBridgeName(cluster),
		HostIP:     offset(subnet, 1).String(),
		Nodes: []NodeNet{{Name: node, NetNS: NetNSName(node), IP: NodeIP(subnet, 0).String(),
			HostVeth: HostVethName(cluster, 0)}},
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
	if n.HostBridge != HostBridgeName(c.Name) {
		return bad("network.hostBridge", n.HostBridge, "want "+HostBridgeName(c.Name))
	}
	if want := offset(subnet, 1).String(); n.HostIP != want {
		return bad("network.hostIP", n.HostIP, "want "+want)
	}
	if len(n.Nodes) == 0 {
		return bad("network.nodes", "[]", "want the control-plane node")
	}
	for i, node := range n.Nodes {
		field := fmt.Sprintf("network.nodes[%d]", i)
		if errs := validation.IsDNS1123Subdomain(node.Name); len(errs) > 0 {
			return bad(field+".name", node.Name, strings.Join(errs, "; "))
		}
		if node.NetNS != NetNSName(node.Name) {
			return bad(field+".netns", node.NetNS, "want "+NetNSName(node.Name))
		}
		if node.HostVeth != HostVethName(c.Name, i) {
			return bad(field+".hostVeth", node.HostVeth, "want "+HostVethName(c.Name, i))
		}
		if ip := net.ParseIP(node.IP); ip == nil || !subnet.Contains(ip) || node.IP == n.HostIP {
			return bad(field+".ip", node.IP, "want a node address in "+n.Subnet)
		}
	}
	if n.Nodes[0].Name != c.NodeName || n.Nodes[0].IP != c.AdvertiseIP {
		return bad("network.nodes[0]", n.Nodes[0].Name+" "+n.Nodes[0].IP, "want the control-plane node "+c.NodeName+" at advertiseIP "+c.AdvertiseIP)
	}
	return nil
}

// HasNodeNetwork says the cluster's nodes are network namespaces (a
// cluster made before devk did that has none: its node shares the
// host's network).
func (c Config) HasNodeNetwork() bool { return c.Network.Subnet != "" }

// ControlPlane is the control-plane node's network.
func (c Config) ControlPlane() NodeNet {
	if len(c.Network.Nodes) == 0 {
		return NodeNet{}
	}
	return c.Network.Nodes[0]
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
