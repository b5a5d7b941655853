package cluster

import (
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
)

type phaseT = phase.Phase[*Cluster]

// testCluster is a new cluster placed with no other and no host route:
// its node is 10.250.0.2, the host's bridge 10.250.0.1.
func testCluster() (layout.Config, layout.ClusterFiles) {
	cfg := layout.NewConfig("devk")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		panic(err)
	}
	return cfg, layout.HomeFiles("/home/u/.devk").Cluster("devk")
}

// testClusterWith is testCluster with nodes of role added by name.
func testClusterWith(t *testing.T, role string, names ...string) (layout.Config, layout.ClusterFiles) {
	t.Helper()
	cfg, p := testCluster()
	for _, name := range names {
		if _, err := cfg.AddNode(name, role, nil); err != nil {
			t.Fatal(err)
		}
	}
	return cfg, p
}

func TestConfigAddresses(t *testing.T) {
	cfg := layout.NewConfig("dev2")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	ip, err := cfg.ServiceIP()
	if err != nil || ip.String() != "10.96.0.1" {
		t.Errorf("ServiceIP = %v, %v", ip, err)
	}
	if cfg.DNSIP() != "10.96.0.10" || cfg.APIServerURL() != "https://10.250.0.2:6443" || cfg.FirstNode().Name != "dev2-control-plane" {
		t.Errorf("config %+v", cfg)
	}
	if b := layout.BridgeName("a-very-long-cluster-name"); len(b) > 15 {
		t.Errorf("bridge name %q is longer than an interface name may be", b)
	}
	for _, bad := range []string{"", "Dev", "-x", "x/y", "a..b", strings.Repeat("a", 40)} {
		if layout.ValidateName(bad) == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	for _, good := range []string{"devk", "dev2", "my-cluster"} {
		if err := layout.ValidateName(good); err != nil {
			t.Errorf("name %q refused: %v", good, err)
		}
	}
}

func TestPhaseTree(t *testing.T) {
	var paths []string
	var walk func(prefix string, ps []*phaseT)
	walk = func(prefix string, ps []*phaseT) {
		for _, p := range ps {
			path := p.Name
			if prefix != "" {
				path = prefix + "/" + p.Name
			}
			paths = append(paths, path)
			walk(path, p.Children)
		}
	}
	walk("", UpPhases())
	for _, want := range []string{"preflight", "runtime", "registry", "images", "certs/ca", "certs/apiserver",
		"certs/apiserver-kubelet-client", "certs/front-proxy-ca", "certs/front-proxy-client", "certs/etcd/ca",
		"certs/etcd/server", "certs/etcd/peer", "certs/etcd/healthcheck-client", "certs/apiserver-etcd-client",
		"certs/controller-manager-server", "certs/scheduler-server", "certs/sa",
		"kubeconfig/admin", "kubeconfig/super-admin", "kubeconfig/controller-manager", "kubeconfig/scheduler", "kubeconfig/kubelet",
		"etcd", "control-plane/apiserver", "control-plane/controller-manager", "control-plane/scheduler",
		"kubelet-start", "wait-control-plane", "upload-config", "mark-control-plane", "bootstrap-token", "kubelet-finalize", "kubeconfig-merge"} {
		if !slices.Contains(paths, want) {
			t.Errorf("up has no phase %s (it has %v)", want, paths)
		}
	}
}

// TestLoopbackRegistriesFollowTheFlag: on a new cluster the runtime
// phase (containerd's mirrors) runs before the registry phase records
// --registry in the config, so the flag must win already then.
func TestLoopbackRegistriesFollowTheFlag(t *testing.T) {
	c := &Cluster{Options: Options{Registry: "127.0.0.1:5055"}}
	c.Config.Registry = layout.DefaultRegistry
	if got := c.loopbackRegistries(); !slices.Equal(got, []string{"127.0.0.1:5055"}) {
		t.Fatalf("loopback registries %v with --registry 127.0.0.1:5055, want it alone", got)
	}
	c.Registry = ""
	if got := c.loopbackRegistries(); !slices.Equal(got, []string{layout.DefaultRegistry}) {
		t.Fatalf("loopback registries %v without --registry, want the config's", got)
	}
}
