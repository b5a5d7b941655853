package layout

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/devk/devk/internal/validname"
)

// TestExistingClusterJSONKeepsPaths:
// testdata/clusterjson/unversioned-before-roles.json is a cluster.json
// exactly as devk wrote it before nodes had roles (commit b31c417, `devk
// up` of the conformance bench). It loads, node 0 reads as the control
// plane in the cluster's cgroup root, and every path of its node is where
// devk put it then: node 0's directory is the cluster's.
func TestExistingClusterJSONKeepsPaths(t *testing.T) {
	data, err := os.ReadFile("testdata/clusterjson/unversioned-before-roles.json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"role"`) || strings.Contains(string(data), `"cgroupRoot": "/devk-devk_`) {
		t.Fatal("testdata is not a file from before nodes had roles")
	}
	home := t.TempDir()
	dir := filepath.Join(home, "clusters", "devk")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, p, err := Open(home, "devk")
	if err != nil {
		t.Fatalf("today's cluster.json does not load: %v", err)
	}
	n0 := cfg.Network.Nodes[0]
	want := NodeNet{Name: "devk-control-plane", NetNS: "devk-devk-control-plane", IP: "10.250.0.2", HostVeth: "dkve965cd7748",
		Role: RoleControlPlane, CgroupRoot: "/devk-devk"}
	if len(cfg.Network.Nodes) != 1 || n0 != want {
		t.Fatalf("nodes = %+v, want [%+v]", cfg.Network.Nodes, want)
	}
	if i, err := cfg.Network.NodeIndex(n0.IP); err != nil || i != 0 {
		t.Fatalf("NodeIndex(%s) = %d, %v; want 0", n0.IP, i, err)
	}

	nd, err := p.Node(cfg, cfg.FirstNode().Name)
	if err != nil || nd != p.FirstNode() {
		t.Fatalf("NodeDir(node 0) = %+v, %v; want the cluster dir %s", nd, err, p.Dir)
	}
	for _, tc := range []struct{ what, got, want string }{
		{"ConfigFile", p.ConfigFile(), "cluster.json"},
		{"PKI", nd.PKI(), "pki"},
		{"Kubeconfig(admin)", nd.Kubeconfig("admin"), "admin.conf"},
		{"Kubeconfig(super-admin)", nd.Kubeconfig("super-admin"), "super-admin.conf"},
		{"Kubeconfig(kubelet)", nd.Kubeconfig("kubelet"), "kubelet.conf"},
		{"Manifests", nd.Manifests(), "manifests"},
		{"ManifestPath", nd.ManifestPath("kube-apiserver"), "manifests/kube-apiserver.yaml"},
		{"Tmp", nd.Tmp(), "tmp"},
		{"KubeletRoot", nd.KubeletRoot(), "kubelet"},
		{"KubeletPKI", nd.KubeletPKI(), "kubelet/pki"},
		{"KubeletClientCurrent", nd.KubeletClientCurrent(), "kubelet/pki/kubelet-client-current.pem"},
		{"KubeletConfig", nd.KubeletConfig(), "kubelet-config.yaml"},
		{"KubeletBinary", nd.KubeletBinary(), "bin/kubelet"},
		{"Etcd", nd.Etcd(), "etcd"},
		{"BootstrapToken", p.BootstrapToken(), "bootstrap-token"},
		{"E2EImages", p.E2EImages(), "e2e-images.json"},
		{"Home.E2EImages", HomeFiles(filepath.Dir(filepath.Dir(p.Dir))).E2EImages("127.0.0.1:5000"), "../../e2e-images/127.0.0.1_5000.json"},
		{"LoadBalancer", p.LoadBalancer().PIDFile("haproxy"), "haproxy/run/haproxy.pid"},
		{"LoadBalancer().Config", p.LoadBalancer().Config(), "haproxy/haproxy.cfg"},
		{"LoadBalancer().StatsSocket", p.LoadBalancer().StatsSocket(), "haproxy/run/admin.sock"},
		{"LoadBalancer().StateFile", p.LoadBalancer().StateFile(), "haproxy/run/servers.state"},
		{"LoadBalancer().Chroot", p.LoadBalancer().Chroot(), "haproxy/empty"},
		{"Daemons().LogFile", p.Daemons().LogFile("forward-5000"), "logs/forward-5000.log"},
		{"Containerd", nd.Containerd(), "containerd"},
		{"ContainerdConfig", nd.ContainerdConfig(), "containerd/config.toml"},
		{"ContainerdRoot", nd.ContainerdRoot(), "containerd/root"},
		{"ContainerdState", nd.ContainerdState(), "containerd/state"},
		{"ContainerdSocket", nd.ContainerdSocket(), "run/containerd.sock"},
		{"CNIConfDir", nd.CNIConfDir(), "cni/net.d"},
		{"CNINetworks", nd.CNINetworks(), "cni/networks"},
		{"Logs", nd.Logs(), "logs"},
		{"PodLogs", nd.PodLogs(), "logs/pods"},
		{"AuditPolicy", nd.AuditPolicy(), "audit-policy.yaml"},
		{"AuditLog", nd.AuditLog(), "logs/audit/audit.log"},
		{"Run", nd.Run(), "run"},
		{"PIDFile(kubelet)", nd.PIDFile("kubelet"), "run/kubelet.pid"},
		{"PIDFile(containerd)", nd.PIDFile("containerd"), "run/containerd.pid"},
		{"LogFile(containerd)", nd.LogFile("containerd"), "logs/containerd.log"},
		{"Procs().PIDFile", nd.Procs().PIDFile("kubelet"), "run/kubelet.pid"},
		{"Procs().LogFile", nd.Procs().LogFile("kubelet"), "logs/kubelet.log"},
		{"Procs().Work", nd.Procs().Work, "."},
	} {
		if w := filepath.Join(dir, tc.want); tc.got != w {
			t.Errorf("%s = %s, want %s", tc.what, tc.got, w)
		}
	}
	// The socket devk recorded is the node dir's, relative to its home.
	if !strings.HasSuffix(cfg.CRISocket, "/clusters/devk/run/containerd.sock") {
		t.Errorf("recorded criSocket %s is not the node dir's run/containerd.sock", cfg.CRISocket)
	}
	if got := nd.ControlPlane(cfg, n0); got.ManifestsDir != filepath.Join(dir, "manifests") || got.KubeletRootDir != filepath.Join(dir, "kubelet") ||
		got.CRISocket != cfg.CRISocket || got.NetNS != n0.NetNSPath() || got.EtcdURL != "https://10.250.0.2:2379" {
		t.Errorf("node 0 as a control-plane node = %+v", got)
	}

	// Saved again (as SaveConfig writes it) it says the role and cgroup
	// root, and reads back the same.
	out, err := EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"role": "control-plane"`) || !strings.Contains(string(out), `"cgroupRoot": "/devk-devk"`) {
		t.Errorf("saved nodes lack role or cgroupRoot:\n%s", out)
	}
	again, err := ParseConfig(out, "devk")
	if err != nil || !reflect.DeepEqual(again, cfg) {
		t.Errorf("saved config reads back as %+v, %v; want %+v", again.Network, err, cfg.Network)
	}
}

func placed(t *testing.T, name string) Config {
	t.Helper()
	c := NewConfig(name)
	if err := c.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func addNode(t *testing.T, c *Config, name, role string) NodeNet {
	t.Helper()
	n, err := c.AddNode(name, role, nil)
	if err != nil {
		t.Fatalf("AddNode(%s): %v", name, err)
	}
	if err := c.Validate(c.Name); err != nil {
		t.Fatalf("after adding %s: %v", name, err)
	}
	return n
}

// TestNodeFilesOtherNodes: every node but node 0 has its own directory
// under nodes/, so two kubelets and two containerds never share a file.
func TestNodeFilesOtherNodes(t *testing.T) {
	c := placed(t, "devk")
	addNode(t, &c, "devk-worker", RoleWorker)
	p := HomeFiles("/h").Cluster("devk")
	w, err := p.Node(c, "devk-worker")
	if err != nil {
		t.Fatal(err)
	}
	if w.Dir != "/h/clusters/devk/nodes/devk-worker" {
		t.Fatalf("worker's dir = %s", w.Dir)
	}
	n0, _ := p.Node(c, "devk-control-plane")
	for _, f := range []func(NodeFiles) string{NodeFiles.ContainerdSocket, NodeFiles.KubeletRoot, NodeFiles.KubeletConfig, NodeFiles.CNIConfDir,
		NodeFiles.CNINetworks, NodeFiles.Manifests, NodeFiles.PodLogs, func(p NodeFiles) string { return p.PIDFile("kubelet") },
		func(p NodeFiles) string { return p.Kubeconfig("kubelet") }} {
		if a, b := f(n0), f(w); a == b || !strings.HasPrefix(b, w.Dir+"/") {
			t.Errorf("node 0's %s and the worker's %s", a, b)
		}
	}
	for _, name := range []string{"devk-other", "../devk", "nodes", ""} {
		if _, err := p.Node(c, name); err == nil || !strings.Contains(err.Error(), "its nodes: devk-control-plane, devk-worker") {
			t.Errorf("Node(%q): %v; want an error listing the nodes", name, err)
		}
	}
}

// TestAddNodeFirstFreeIndex: a new node takes the first free index, so a
// removed node's address and host veth come back, and validation ties the
// veth to the address, not to the node's place in the list.
func TestAddNodeFirstFreeIndex(t *testing.T) {
	c := placed(t, "devk") // 10.250.0.0/24: host .1, node 0 .2
	w1 := addNode(t, &c, "devk-worker", RoleWorker)
	w2 := addNode(t, &c, "devk-worker2", RoleWorker)
	want1 := NodeNet{Name: "devk-worker", NetNS: "devk-devk-worker", IP: "10.250.0.3", HostVeth: HostVethName("devk", 1),
		Role: RoleWorker, CgroupRoot: "/devk-devk_devk-worker"}
	if w1 != want1 || w2.IP != "10.250.0.4" || w2.HostVeth != HostVethName("devk", 2) {
		t.Fatalf("added %+v and %+v; want %+v and the next index", w1, w2, want1)
	}
	if err := c.RemoveNode("devk-worker"); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate("devk"); err != nil {
		t.Fatalf("after removing node 1 of 3 (node 2 now second in the list): %v", err)
	}
	w3 := addNode(t, &c, "devk-control-plane2", RoleControlPlane)
	if w3.IP != w1.IP || w3.HostVeth != w1.HostVeth || w3.CgroupRoot != "/devk-devk_devk-control-plane2" {
		t.Fatalf("re-added node %+v; want the removed node's index 1 (%s, %s)", w3, w1.IP, w1.HostVeth)
	}
	if got := c.NodeNames(); !reflect.DeepEqual(got, []string{"devk-control-plane", "devk-worker2", "devk-control-plane2"}) {
		t.Fatalf("nodes %v", got)
	}
	if i, err := c.Network.FreeIndex(); err != nil || i != 3 {
		t.Fatalf("FreeIndex = %d, %v; want 3", i, err)
	}
}

func TestNodeIndex(t *testing.T) {
	n := Network{Subnet: "10.250.7.0/24"}
	for ip, want := range map[string]int{"10.250.7.2": 0, "10.250.7.3": 1, "10.250.7.254": 252} {
		if i, err := n.NodeIndex(ip); err != nil || i != want {
			t.Errorf("NodeIndex(%s) = %d, %v; want %d", ip, i, err, want)
		}
		if got := NodeIP(cidr(t, n.Subnet), want).String(); got != ip {
			t.Errorf("NodeIP(%d) = %s, want %s", want, got, ip)
		}
	}
	for _, ip := range []string{"10.250.7.0", "10.250.7.1", "10.250.7.255", "10.250.8.2", "::ffff:10.250.7.2", "10.250.7.02", "", "x"} {
		if i, err := n.NodeIndex(ip); err == nil {
			t.Errorf("NodeIndex(%q) = %d; want an error", ip, i)
		}
	}
}

// TestAddNodeRefuses: bad input gives a clear error and leaves the config
// as it was.
func TestAddNodeRefuses(t *testing.T) {
	other := placed(t, "dev2")
	if _, err := other.AddNode("shared", RoleWorker, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, node, role string
		want             string
	}{
		{"upper case", "Worker", RoleWorker, "node name"},
		{"dot", "w.local", RoleWorker, "node name"},
		{"underscore", "a_b", RoleWorker, "node name"},
		{"path", "../x", RoleWorker, "node name"},
		{"64 characters", strings.Repeat("w", 64), RoleWorker, "node name"},
		{"role", "w", "master", `node role "master"`},
		{"no role", "w", "", "node role"},
		{"node 0's name", "devk-control-plane", RoleWorker, "has a node devk-control-plane already"},
		{"added before", "devk-worker", RoleWorker, "has a node devk-worker already"},
		{"another cluster's node 0", "dev2-control-plane", RoleWorker, "taken by cluster dev2"},
		{"another cluster's worker", "shared", RoleWorker, "network namespace devk-shared"},
	} {
		c := placed(t, "devk")
		addNode(t, &c, "devk-worker", RoleWorker)
		before := append([]NodeNet(nil), c.Network.Nodes...)
		if _, err := c.AddNode(tc.node, tc.role, []Config{other}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
		if !reflect.DeepEqual(c.Network.Nodes, before) {
			t.Errorf("%s: nodes changed to %+v", tc.name, c.Network.Nodes)
		}
	}

	// A /29 holds the host and five nodes.
	small := NewConfig("small")
	if err := small.PlaceAt(cidr(t, "10.250.9.0/29"), nil, nil); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		addNode(t, &small, small.NextNodeName(RoleWorker), RoleWorker)
	}
	if last := small.Network.Nodes[4].IP; last != "10.250.9.6" {
		t.Fatalf("fifth node at %s, want 10.250.9.6 (.7 is broadcast)", last)
	}
	if _, err := small.AddNode("one-more", RoleWorker, nil); err == nil || !strings.Contains(err.Error(), "no address left in 10.250.9.0/29") {
		t.Fatalf("a sixth node in a /29: %v", err)
	}
}

func TestRemoveNode(t *testing.T) {
	c := placed(t, "devk")
	addNode(t, &c, "devk-worker", RoleWorker)
	if err := c.RemoveNode("devk-control-plane"); err == nil || !strings.Contains(err.Error(), "devk down --name devk") {
		t.Errorf("removing node 0: %v", err)
	}
	if err := c.RemoveNode("nope"); err == nil || !strings.Contains(err.Error(), "its nodes: devk-control-plane, devk-worker") {
		t.Errorf("removing a node the cluster lacks: %v", err)
	}
	if err := c.RemoveNode("devk-worker"); err != nil || len(c.Network.Nodes) != 1 {
		t.Errorf("RemoveNode: %v, nodes %+v", err, c.Network.Nodes)
	}
}

func TestNextNodeName(t *testing.T) {
	c := placed(t, "dev2")
	for _, tc := range []struct{ role, want string }{
		{RoleWorker, "dev2-worker"}, {RoleWorker, "dev2-worker2"}, {RoleControlPlane, "dev2-control-plane2"}, {RoleWorker, "dev2-worker3"},
	} {
		got := c.NextNodeName(tc.role)
		if got != tc.want {
			t.Fatalf("NextNodeName(%s) = %s, want %s", tc.role, got, tc.want)
		}
		addNode(t, &c, got, tc.role)
	}
	// The longest cluster name still gives valid node names.
	long := placed(t, strings.Repeat("c", 32))
	if err := validname.Node(long.NextNodeName(RoleControlPlane) + "99"); err != nil {
		t.Fatal(err)
	}
}

// TestNodeValidation: down acts on every node's netns, veth and cgroup
// root, so a node entry that is not devk's own is refused when
// cluster.json is read.
func TestNodeValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string // "" for a change that is valid
	}{
		{"pod CIDRs allocated", func(c *Config) {
			c.Network.Nodes[0].PodCIDR, c.Network.Nodes[1].PodCIDR = "10.244.0.0/24", "10.244.1.0/24"
		}, ""},
		{"duplicate name", func(c *Config) { c.Network.Nodes[2] = c.Network.Nodes[1] }, "network.nodes[2].name"},
		{"duplicate address", func(c *Config) {
			c.Network.Nodes[2].IP, c.Network.Nodes[2].HostVeth = c.Network.Nodes[1].IP, c.Network.Nodes[1].HostVeth
		}, "network.nodes[2].ip"},
		{"veths swapped", func(c *Config) {
			c.Network.Nodes[1].HostVeth, c.Network.Nodes[2].HostVeth = c.Network.Nodes[2].HostVeth, c.Network.Nodes[1].HostVeth
		}, "network.nodes[1].hostVeth"},
		{"host's address", func(c *Config) { c.Network.Nodes[1].IP = "10.250.0.1" }, "network.nodes[1].ip"},
		{"broadcast", func(c *Config) { c.Network.Nodes[1].IP = "10.250.0.255" }, "network.nodes[1].ip"},
		{"address written oddly", func(c *Config) { c.Network.Nodes[1].IP = "::ffff:10.250.0.3" }, "network.nodes[1].ip"},
		{"name with a dot", func(c *Config) {
			c.Network.Nodes[1].Name, c.Network.Nodes[1].NetNS = "w.x", NetNSName("w.x")
		}, "network.nodes[1].name"},
		{"worker without role", func(c *Config) { c.Network.Nodes[1].Role = "" }, "network.nodes[1].role"},
		{"unknown role", func(c *Config) { c.Network.Nodes[1].Role = "master" }, "network.nodes[1].role"},
		{"node 0 a worker", func(c *Config) { c.Network.Nodes[0].Role = RoleWorker }, "network.nodes[0].role"},
		{"worker in the cluster's cgroup root", func(c *Config) { c.Network.Nodes[1].CgroupRoot = "/devk-devk" }, "network.nodes[1].cgroupRoot"},
		{"worker in another's cgroup root", func(c *Config) { c.Network.Nodes[1].CgroupRoot = c.Network.Nodes[2].CgroupRoot }, "network.nodes[1].cgroupRoot"},
		{"worker without cgroup root", func(c *Config) { c.Network.Nodes[1].CgroupRoot = "" }, "network.nodes[1].cgroupRoot"},
		{"node 0 elsewhere", func(c *Config) { c.Network.Nodes[0].CgroupRoot = "/" }, "network.nodes[0].cgroupRoot"},
		{"pod CIDR outside the cluster's", func(c *Config) { c.Network.Nodes[1].PodCIDR = "10.96.0.0/24" }, "network.nodes[1].podCIDR"},
		{"pod CIDR wider than the cluster's", func(c *Config) { c.Network.Nodes[1].PodCIDR = "10.0.0.0/8" }, "network.nodes[1].podCIDR"},
		{"pod CIDR not a network address", func(c *Config) { c.Network.Nodes[1].PodCIDR = "10.244.1.7/24" }, "network.nodes[1].podCIDR"},
		{"pod CIDRs overlap", func(c *Config) {
			c.Network.Nodes[1].PodCIDR, c.Network.Nodes[2].PodCIDR = "10.244.0.0/23", "10.244.1.0/24"
		}, "overlaps network.nodes[1]'s 10.244.0.0/23"},
	} {
		c := placed(t, "devk")
		addNode(t, &c, "devk-worker", RoleWorker)
		addNode(t, &c, "devk-worker2", RoleWorker)
		tc.change(&c)
		err := c.Validate("devk")
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// TestDerivedNamesFit: the longest names validname allows give a netns
// and cgroup root within Linux's 255-byte file names and a host veth
// within its 15-byte interface names; cgroup roots never collide.
func TestDerivedNamesFit(t *testing.T) {
	cluster, node := strings.Repeat("c", 32), strings.Repeat("n", 63)
	if validname.Cluster(cluster) != nil || validname.Node(node) != nil {
		t.Fatal("test names are not the longest valid ones")
	}
	const nameMax = 255
	if len(NetNSName(node)) > nameMax || len(NodeCgroupRoot(cluster, node))-1 > nameMax {
		t.Errorf("netns %d or cgroup root %d bytes", len(NetNSName(node)), len(NodeCgroupRoot(cluster, node)))
	}
	if v := HostVethName(cluster, maxNodes(cidr(t, "10.250.0.0/16"))); len(v) > 15 {
		t.Errorf("veth %s", v)
	}
	// Cluster "a" node "b-c" and cluster "a-b" node "c" would meet at
	// /devk-a-b-c; with '_' they cannot, nor meet a cluster's own root.
	if NodeCgroupRoot("a", "b-c") == NodeCgroupRoot("a-b", "c") {
		t.Error("cgroup roots collide")
	}
	if err := validname.Cluster(strings.TrimPrefix(NodeCgroupRoot("a", "b"), "/devk-")); err == nil {
		t.Error("a node's cgroup root could be a cluster's")
	}
}
