package layout

import (
	"net"
	"strings"
	"testing"
)

func cidr(t *testing.T, s string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPlaceAmong: each cluster gets its own node subnet, clear of the
// host's routes and of the other clusters, and the node the second
// address of it.
func TestPlaceAmong(t *testing.T) {
	first := NewConfig("devk")
	if err := first.PlaceAmong(nil, []*net.IPNet{cidr(t, "192.0.2.0/24"), cidr(t, "10.250.0.7/32")}); err != nil {
		t.Fatal(err)
	}
	if first.Network.Subnet != "10.250.1.0/24" || first.FirstNode().IP != "10.250.1.2" || first.Network.HostIP != "10.250.1.1" {
		t.Errorf("first cluster: %+v, advertise %s (10.250.0.0/24 holds a host route)", first.Network, first.FirstNode().IP)
	}
	second := NewConfig("dev2")
	if err := second.PlaceAmong([]Config{first}, []*net.IPNet{cidr(t, "10.250.2.0/23")}); err != nil {
		t.Fatal(err)
	}
	if second.Network.Subnet != "10.250.0.0/24" {
		t.Errorf("second cluster got %s; want 10.250.0.0/24 (1 is the first's, 2-3 the host's)", second.Network.Subnet)
	}
	if first.Network.HostBridge == second.Network.HostBridge || first.Network.Nodes[0].HostVeth == second.Network.Nodes[0].HostVeth ||
		first.Network.Nodes[0].NetNS == second.Network.Nodes[0].NetNS {
		t.Errorf("two clusters share a bridge, veth or netns: %+v %+v", first.Network, second.Network)
	}
	for _, c := range []Config{first, second} {
		if err := c.Validate(c.Name); err != nil {
			t.Errorf("placed config does not validate: %v", err)
		}
	}
	full := NewConfig("dev3")
	if err := full.PlaceAmong(nil, []*net.IPNet{cidr(t, "10.0.0.0/8")}); err == nil || !strings.Contains(err.Error(), "no free /24") {
		t.Errorf("a host route over the whole pool: %v", err)
	}
}

func TestInterfaceNamesFit(t *testing.T) {
	long := strings.Repeat("a", 40)
	for _, name := range []string{"devk", "a", long, long + "b"} {
		for _, ifname := range []string{HostBridgeName(name), HostVethName(name, 0), HostVethName(name, 12)} {
			if len(ifname) > 15 {
				t.Errorf("%q is longer than Linux's 15 bytes", ifname)
			}
		}
	}
	if HostBridgeName(long) == HostBridgeName(long+"b") || HostVethName("a", 0) == HostVethName("a", 1) {
		t.Error("names collide")
	}
}

// TestNetworkTampering: down deletes what network names, so a field that
// is not this cluster's is refused when cluster.json is read.
func TestNetworkTampering(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"host bridge", func(c *Config) { c.Network.HostBridge = "eth0" }, "network.hostBridge"},
		{"veth", func(c *Config) { c.Network.Nodes[0].HostVeth = "eth0" }, "network.nodes[0].hostVeth"},
		{"netns", func(c *Config) { c.Network.Nodes[0].NetNS = "other" }, "network.nodes[0].netns"},
		{"subnet", func(c *Config) { c.Network.Subnet = "10.250.1.0/33" }, "network.subnet"},
		{"node ip outside", func(c *Config) { c.Network.Nodes[0].IP = "192.0.2.2" }, "network.nodes[0].ip"},
		{"multicast subnet", func(c *Config) { c.Network.Subnet = "224.0.0.0/24" }, "want a private subnet"},
	} {
		c := NewConfig("devk")
		if err := c.PlaceAmong(nil, nil); err != nil {
			t.Fatal(err)
		}
		tc.change(&c)
		if err := c.Validate("devk"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// TestCheckPrivate: a node subnet lies inside an RFC 1918 or the CGNAT
// range, whole.
func TestCheckPrivate(t *testing.T) {
	for s, ok := range map[string]bool{
		"10.250.0.0/24": true, "10.0.0.0/8": true, "172.16.0.0/12": true, "172.31.255.0/24": true,
		"192.168.0.0/16": true, "192.168.7.0/30": true, "100.64.0.0/10": true, "100.127.0.0/24": true,
		"9.0.0.0/8": false, "10.0.0.0/7": false, "172.32.0.0/24": false, "172.0.0.0/8": false, "192.0.2.0/24": false,
		"198.18.0.0/24": false, "224.0.0.0/24": false, "239.1.0.0/16": false, "240.0.0.0/24": false, "127.1.0.0/24": false,
		"169.254.0.0/24": false, "0.0.0.0/24": false, "100.128.0.0/24": false, "8.8.8.0/24": false,
	} {
		err := CheckPrivate(cidr(t, s))
		if (err == nil) != ok {
			t.Errorf("CheckPrivate(%s) = %v; want ok=%v", s, err, ok)
		}
	}
}

// TestPlaceAtTaken: a chosen node subnet that a host route, a gateway
// or another cluster's nodes overlap is refused, saying which.
func TestPlaceAtTaken(t *testing.T) {
	other := NewConfig("other")
	if err := other.PlaceAt(cidr(t, "10.251.9.0/24"), nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		subnet string
		taken  []*net.IPNet
		want   string
	}{
		{"192.168.1.0/24", []*net.IPNet{cidr(t, "192.168.0.0/16")}, "192.168.1.0/24 overlaps the host's route or address 192.168.0.0/16"},
		{"192.168.0.0/16", []*net.IPNet{cidr(t, "192.168.1.1/32")}, "overlaps the host's route or address 192.168.1.1/32"},
		{"10.251.9.128/25", nil, "overlaps devk cluster other's nodes (10.251.9.0/24)"},
	} {
		c := NewConfig("devk")
		err := c.PlaceAt(cidr(t, tc.subnet), []Config{other}, tc.taken)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PlaceAt(%s) = %v; want %q", tc.subnet, err, tc.want)
		}
	}
}

// TestNoProxy: a cluster's NO_PROXY entries are its networks and its
// nodes' names and addresses.
func TestNoProxy(t *testing.T) {
	c := NewConfig("devk")
	if err := c.PlaceAt(cidr(t, "10.250.3.0/24"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddNode("devk-worker", RoleWorker, nil); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.NoProxy(), ",")
	for _, want := range []string{"10.250.3.0/24", c.PodCIDR, c.ServiceCIDR, "10.250.3.1", c.FirstNode().Name, "10.250.3.2", "devk-worker", "10.250.3.3"} {
		if !strings.Contains(","+got+",", ","+want+",") {
			t.Errorf("NoProxy = %s; want %s in it", got, want)
		}
	}
}
