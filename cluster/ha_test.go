package cluster

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/pki"
)

// threeControlPlanes is a cluster made with --control-planes 3.
func threeControlPlanes(t *testing.T) *Cluster {
	t.Helper()
	cfg, p := testClusterWith(t, layout.RoleControlPlane, "devk-control-plane2", "devk-control-plane3")
	cfg.ControlPlaneEndpoint = cfg.LoadBalancerEndpoint()
	if err := cfg.Validate("devk"); err != nil {
		t.Fatal(err)
	}
	cfg.Images = map[string]string{}
	for _, sp := range StaticPods {
		cfg.Images[sp.Component] = "127.0.0.1:5000/" + sp.Name + "@sha256:" + strings.Repeat("a", 64)
	}
	return &Cluster{Config: cfg, Files: p}
}

func TestControlPlaneEndpoint(t *testing.T) {
	c := threeControlPlanes(t)
	if got, want := c.Config.APIServerURL(), "https://10.250.0.1:6443"; got != want {
		t.Errorf("clients talk to %s, want the load balancer %s", got, want)
	}
	if got := c.joinEndpoint(); got != "10.250.0.1:6443" {
		t.Errorf("nodes join through %s, want the load balancer", got)
	}
	if got := c.Config.ControlPlaneNames(); !slices.Equal(got, []string{"devk-control-plane", "devk-control-plane2", "devk-control-plane3"}) {
		t.Errorf("control planes %v", got)
	}
	// The endpoint is the host's bridge address, nothing else.
	bad := c.Config
	bad.ControlPlaneEndpoint = "192.0.2.7:6443"
	if err := bad.Validate("devk"); err == nil || !strings.Contains(err.Error(), "controlPlaneEndpoint") {
		t.Errorf("an endpoint off devk's bridge: %v", err)
	}
	one, _ := testCluster()
	if one.HA() || one.APIServerURL() != "https://10.250.0.2:6443" {
		t.Errorf("one control plane: HA %v, URL %s", one.HA(), one.APIServerURL())
	}
}

func TestLoadBalancerConfig(t *testing.T) {
	c := threeControlPlanes(t)
	if _, err := c.Config.AddNode("devk-worker", layout.RoleWorker, nil); err != nil {
		t.Fatal(err)
	}
	lb := c.loadBalancer()
	var got []string
	for _, b := range lb.Config.Backends {
		got = append(got, b.Name+"="+b.Address)
	}
	if want := []string{"devk-control-plane=10.250.0.2:6443", "devk-control-plane2=10.250.0.3:6443", "devk-control-plane3=10.250.0.4:6443"}; !slices.Equal(got, want) {
		t.Errorf("backends %v, want %v (workers are not API servers)", got, want)
	}
	if lb.Config.Frontend != "10.250.0.1:6443" || !strings.HasPrefix(lb.File, c.Files.Dir+"/haproxy/") {
		t.Errorf("frontend %s, file %s", lb.Config.Frontend, lb.File)
	}
	if err := lb.Config.Validate(); err != nil {
		t.Error(err)
	}
	if _, err := lb.Config.Render(); err != nil {
		t.Error(err)
	}
}

// A joining control-plane node's view gives its own certificates and
// manifests: its address, name and files; the load balancer in the API
// server's SANs.
func TestJoiningControlPlaneNode(t *testing.T) {
	c := threeControlPlanes(t)
	n, err := c.nodeNamed("devk-control-plane2")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := c.pkiConfig(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range pki.Specs(pc) {
		if s.Name != "apiserver" {
			continue
		}
		for _, want := range []string{"10.250.0.3", "10.250.0.1"} {
			if !slices.ContainsFunc(s.IPs, func(ip net.IP) bool { return ip.String() == want }) {
				t.Errorf("apiserver SANs %v lack %s", s.IPs, want)
			}
		}
		if s.DNSNames[0] != "devk-control-plane2" {
			t.Errorf("apiserver DNS names %v", s.DNSNames)
		}
	}
	data, err := controlplane.Manifest("etcd", controlplane.ManifestInput{Config: c.Config, Node: n.Net, Files: n.Files, Image: c.Config.Images["etcd"],
		EtcdInitialCluster: "devk-control-plane=https://10.250.0.2:2380,devk-control-plane2=https://10.250.0.3:2380"})
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := staticpod.Parse(data)
	f := staticpod.Flags(pod, "etcd")
	if f["initial-cluster-state"] != "existing" || f["name"] != "devk-control-plane2" || f["listen-peer-urls"] != "https://10.250.0.3:2380" ||
		!strings.HasPrefix(f["data-dir"], c.Files.Dir+"/nodes/devk-control-plane2/") {
		t.Errorf("a joining member's etcd flags: %v", f)
	}
	data, err = controlplane.Manifest("kube-apiserver", controlplane.ManifestInput{Config: c.Config, Node: n.Net, Files: n.Files, Image: c.Config.Images["apiserver"]})
	if err != nil {
		t.Fatal(err)
	}
	pod, _ = staticpod.Parse(data)
	if f := staticpod.Flags(pod, "kube-apiserver"); f["advertise-address"] != "10.250.0.3" || f["etcd-servers"] != "https://10.250.0.3:2379" {
		t.Errorf("its API server: %v", f)
	}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		data, err := controlplane.Manifest(name, controlplane.ManifestInput{Config: c.Config, Node: n.Net, Files: n.Files, Image: c.Config.Images["scheduler"]})
		if err != nil {
			t.Fatal(err)
		}
		pod, _ := staticpod.Parse(data)
		if f := staticpod.Flags(pod, name); f["leader-elect"] != "true" {
			t.Errorf("%s of an HA cluster: leader-elect=%s, want true", name, f["leader-elect"])
		}
	}
	one, p := testCluster()
	data, _ = controlplane.Manifest("kube-scheduler", controlplane.ManifestInput{Config: one, Node: one.FirstNode(), Files: p.FirstNode(), Image: c.Config.Images["scheduler"]})
	pod, _ = staticpod.Parse(data)
	if f := staticpod.Flags(pod, "kube-scheduler"); f["leader-elect"] != "false" {
		t.Errorf("one control plane: leader-elect=%s, want false (as before)", f["leader-elect"])
	}
}

func TestControlPlaneCounts(t *testing.T) {
	c := twoWorkers(t)
	c.existed, c.ControlPlanes = true, 2
	if err := c.checkNodeCount(); err == nil || !strings.Contains(err.Error(), "no load balancer") || !strings.Contains(err.Error(), "--control-planes N") {
		t.Errorf("a second control plane on a cluster without a load balancer: %v", err)
	}
	c.ControlPlanes, c.Nodes = 1, 0
	if err := c.checkNodeCount(); err != nil {
		t.Errorf("--control-planes 1 on a one-control-plane cluster: %v", err)
	}
	h := threeControlPlanes(t)
	h.existed, h.ControlPlanes = true, 2
	if err := h.checkNodeCount(); err == nil || !strings.Contains(err.Error(), "has 3 control-plane nodes, more than --control-planes 2") {
		t.Errorf("fewer control planes than the cluster has: %v", err)
	}
	h.ControlPlanes, h.Nodes = 5, 4
	if err := h.checkNodeCount(); err == nil || !strings.Contains(err.Error(), "fewer than --control-planes") {
		t.Errorf("--nodes 4 --control-planes 5: %v", err)
	}
	h.ControlPlanes, h.Nodes = 4, 0
	if err := h.checkNodeCount(); err != nil || h.Nodes != 4 {
		t.Errorf("--control-planes 4: %v, nodes %d", err, h.Nodes)
	}
	if got := h.newNodeRoles(); !slices.Equal(got, []string{layout.RoleControlPlane}) {
		t.Errorf("new roles %v", got)
	}
	if err := h.checkJoinControlPlane(); err != nil {
		t.Error(err)
	}
	if err := c.checkJoinControlPlane(); err == nil {
		t.Error("node add --control-plane on a cluster without a load balancer")
	}
}
