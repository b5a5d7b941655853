package cluster

import (
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/internal/layout"
)

// twoWorkers is testCluster with two workers added, the first with a
// pod subnet already.
func twoWorkers(t *testing.T) *Cluster {
	t.Helper()
	cfg, p := testClusterWith(t, layout.RoleWorker, "devk-worker", "devk-worker2")
	cfg.Network.Nodes[0].PodCIDR = "10.244.0.0/24"
	cfg.Network.Nodes[1].PodCIDR = "10.244.1.0/24"
	return &Cluster{Config: cfg, Files: p}
}

func TestNodesAndTheirFiles(t *testing.T) {
	c := twoWorkers(t)
	ns, err := c.nodes()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range ns {
		names = append(names, n.Name())
	}
	if want := []string{"devk-control-plane", "devk-worker", "devk-worker2"}; !slices.Equal(names, want) {
		t.Fatalf("nodes %v, want %v", names, want)
	}
	if ns[0].Files.Dir != c.Files.Dir || ns[1].Files.Dir != c.Files.Dir+"/nodes/devk-worker" {
		t.Errorf("node dirs %s, %s", ns[0].Files.Dir, ns[1].Files.Dir)
	}
	last, _ := c.nodesLastFirst()
	if last[len(last)-1].Name() != "devk-control-plane" {
		t.Errorf("down stops node 0 last: %v", last)
	}
	if _, err := c.nodeNamed("nope"); err == nil || !strings.Contains(err.Error(), "devk-worker2") {
		t.Errorf("an unknown node's error names the cluster's: %v", err)
	}
}

func TestJoinedKubelet(t *testing.T) {
	c := twoWorkers(t)
	w, err := c.nodeNamed("devk-worker")
	if err != nil {
		t.Fatal(err)
	}
	argv := w.KubeletArgv()
	for _, f := range []string{
		"--net=/run/netns/devk-devk-worker", "--node-ip=10.250.0.3", "--hostname-override=devk-worker",
		"--bootstrap-kubeconfig=" + w.Files.Dir + "/bootstrap-kubelet.conf", "--kubeconfig=" + w.Files.Dir + "/kubelet.conf",
		"--root-dir=" + w.Files.Dir + "/kubelet", w.Files.Dir + "/bin/kubelet",
	} {
		if !slices.Contains(argv, f) {
			t.Errorf("worker kubelet argv lacks %s: %v", f, argv)
		}
	}
	if slices.ContainsFunc(c.FirstNode().KubeletArgv(), func(a string) bool { return strings.HasPrefix(a, "--bootstrap-kubeconfig") }) {
		t.Error("node 0's kubelet has a credential devk issued: no TLS bootstrap")
	}
}

func TestPodSubnets(t *testing.T) {
	c := twoWorkers(t)
	for _, tc := range []struct {
		node, want string
	}{
		{"devk-control-plane", "10.244.0.0/24"},
		{"devk-worker", "10.244.1.0/24"},
		{"devk-worker2", ""}, // not allocated yet: no conflist before it is
	} {
		n, _ := c.nodeNamed(tc.node)
		if got, err := n.PodSubnet(); err != nil || got != tc.want {
			t.Errorf("PodSubnet(%s) = %q, %v; want %q", tc.node, got, err, tc.want)
		}
	}
	c.Config.Network.Nodes[0].PodCIDR = ""
	if got, _ := c.FirstNode().PodSubnet(); got != "10.244.0.0/24" {
		t.Errorf("node 0 before its Node has one: %q, want the first /24 (what the controller-manager gives the first node)", got)
	}
}

func TestPodRoutes(t *testing.T) {
	c := twoWorkers(t)
	var got []string
	for _, r := range node.PodRoutes(c.Config.Network.Nodes) {
		got = append(got, r.In.Name+" "+r.To+" via "+r.Via)
	}
	want := []string{
		"devk-control-plane 10.244.1.0/24 via 10.250.0.3",
		"devk-worker 10.244.0.0/24 via 10.250.0.2",
		"devk-worker2 10.244.0.0/24 via 10.250.0.2",
		"devk-worker2 10.244.1.0/24 via 10.250.0.3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("routes\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNodesToJoin(t *testing.T) {
	c := twoWorkers(t)
	c.Nodes = 5
	names := func(ns []config.Node) (out []string) {
		for _, n := range ns {
			out = append(out, n.Role+":"+n.Name)
		}
		return out
	}
	got := names(c.nodesToJoin())
	if want := []string{"worker:devk-worker", "worker:devk-worker2", "worker:devk-worker3", "worker:devk-worker4"}; !slices.Equal(got, want) {
		t.Errorf("nodesToJoin %v, want %v", got, want)
	}
	// Control planes join before workers; the file's names are used.
	c.Nodes, c.ControlPlanes = 6, 3
	c.fileNodes = []config.Node{{Role: layout.RoleControlPlane, Name: "cp-b"}, {Role: layout.RoleControlPlane}, {Role: layout.RoleWorker, Name: "w-x"}}
	got = names(c.nodesToJoin())
	if want := []string{"worker:devk-worker", "worker:devk-worker2", "control-plane:cp-b", "control-plane:devk-control-plane2", "worker:w-x"}; !slices.Equal(got, want) {
		t.Errorf("nodesToJoin %v, want %v", got, want)
	}
	// Up again with the file once some of its nodes joined: the names
	// the cluster has are not joined twice.
	c.Nodes, c.ControlPlanes = 4, 0
	c.fileNodes = []config.Node{{Role: layout.RoleWorker}, {Role: layout.RoleWorker, Name: "devk-worker2"}, {Role: layout.RoleWorker, Name: "small"}}
	got = names(c.nodesToJoin())
	if want := []string{"worker:devk-worker", "worker:devk-worker2", "worker:small"}; !slices.Equal(got, want) {
		t.Errorf("nodesToJoin again %v, want %v", got, want)
	}
	if err := c.checkNodeCount(); err != nil {
		t.Errorf("up again with the file: %v", err)
	}
	c.ControlPlanes, c.fileNodes = 0, nil
	if len(c.Config.Network.Nodes) != 3 {
		t.Errorf("nodesToJoin changed the config: %d nodes", len(c.Config.Network.Nodes))
	}
	c.Nodes = 0
	if got := c.nodesToJoin(); len(got) != 2 {
		t.Errorf("with no --nodes, the joined ones come back: %v", got)
	}
	one := &Cluster{}
	one.Config, one.Files = testCluster()
	if ok, _ := nodesPhaseIf(one); ok {
		t.Error("a single-node cluster runs the nodes phase")
	}
}

func TestCheckNodeCount(t *testing.T) {
	c := twoWorkers(t)
	for _, tc := range []struct {
		nodes int
		want  string
	}{
		{0, ""}, {3, ""}, {10, ""},
		{2, "has 3 nodes, more than --nodes 2: `devk node remove NAME` removes one"},
		{-1, "want the number of nodes"},
		{300, "no address left"},
	} {
		c.Nodes = tc.nodes
		err := c.checkNodeCount()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("--nodes %d: %v, want %q", tc.nodes, err, tc.want)
		}
	}
	if len(c.Config.Network.Nodes) != 3 {
		t.Errorf("checkNodeCount changed the config: %v", c.Config.NodeNames())
	}
}
