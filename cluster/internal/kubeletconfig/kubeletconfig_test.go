package kubeletconfig

import (
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
)

// testCluster is a new cluster placed with no other and no host route
// (its node 0 is 10.250.0.2), and a worker it added (10.250.0.3): the
// worker's files are its own (ClusterFiles.Node).
func testCluster(t *testing.T) (cfg layout.Config, p layout.NodeFiles, worker layout.NodeNet, wp layout.NodeFiles) {
	t.Helper()
	cfg = layout.NewConfig("devk")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	cp := layout.HomeFiles("/home/u/.devk").Cluster("devk")
	p = cp.FirstNode()
	worker, err := cfg.AddNode("devk-worker", layout.RoleWorker, nil)
	if err != nil {
		t.Fatal(err)
	}
	wp, err = cp.Node(cfg, worker.Name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, p, worker, wp
}

// TestYAML: node 0's kubelet config.
func TestYAML(t *testing.T) {
	cfg, p, _, _ := testCluster(t)
	data, err := YAML(Input{Config: cfg, Node: cfg.FirstNode(), Files: p, CRISocket: "/c/run/containerd.sock"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"kind":                     "KubeletConfiguration",
		"cgroupDriver":             "cgroupfs",
		"failCgroupV1":             false,
		"staticPodPath":            "/home/u/.devk/clusters/devk/manifests",
		"containerRuntimeEndpoint": "unix:///c/run/containerd.sock",
		"address":                  "10.250.0.2",
		"healthzBindAddress":       "10.250.0.2",
		"readOnlyPort":             float64(0),
		"clusterDomain":            "cluster.local",
		"podLogsDir":               "/home/u/.devk/clusters/devk/logs/pods",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}
	if dns := m["clusterDNS"].([]any); len(dns) != 1 || dns[0] != "10.96.0.10" {
		t.Errorf("clusterDNS = %v", dns)
	}
}

// TestJoinedYAML: a joined node's kubelet config is its own: its
// address, cgroup root, files and runtime, and the CA discovery wrote.
func TestJoinedYAML(t *testing.T) {
	cfg, _, wn, w := testCluster(t)
	data, err := YAML(Input{Config: cfg, Files: w, Node: wn, CRISocket: w.ContainerdSocket()})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{
		"address": "10.250.0.3", "healthzBindAddress": "10.250.0.3", "cgroupRoot": "/devk-devk_devk-worker",
		"staticPodPath": w.Dir + "/manifests", "containerRuntimeEndpoint": "unix://" + w.Dir + "/run/containerd.sock",
	} {
		if m[k] != v {
			t.Errorf("worker kubelet config %s = %v, want %v", k, m[k], v)
		}
	}
	ca := m["authentication"].(map[string]any)["x509"].(map[string]any)["clientCAFile"]
	if ca != w.Dir+"/pki/ca.crt" {
		t.Errorf("the worker's kubelet trusts %v, not the CA discovery wrote", ca)
	}
}

// TestFlags: the kubelet of a node that joined gets its client
// certificate by TLS bootstrap; node 0's has a credential devk issued.
func TestFlags(t *testing.T) {
	cfg, p, wn, w := testCluster(t)
	own, defaults := Flags(cfg, p, cfg.FirstNode())
	if _, ok := own["bootstrap-kubeconfig"]; ok || own["hostname-override"] != cfg.FirstNode().Name || own["cert-dir"] != p.KubeletPKI() {
		t.Errorf("node 0's kubelet flags %v", own)
	}
	if defaults["v"] != "1" {
		t.Errorf("defaults %v", defaults)
	}
	own, _ = Flags(cfg, w, wn)
	if own["bootstrap-kubeconfig"] != w.Kubeconfig(BootstrapKubeconfig) || own["node-ip"] != "10.250.0.3" || own["root-dir"] != w.KubeletRoot() {
		t.Errorf("the worker's kubelet flags %v", own)
	}
}
