package node

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/internal/layout"
)

func TestFirstPodSubnet(t *testing.T) {
	if sn, err := firstPodSubnet("10.244.0.0/16"); err != nil || sn != "10.244.0.0/24" {
		t.Errorf("firstPodSubnet = %q, %v", sn, err)
	}
	if _, err := firstPodSubnet("fd00::/64"); err == nil {
		t.Error("IPv6 pod CIDR accepted")
	}
}

// TestKubeletArgv: node 0's kubelet runs in the node's network and
// mount namespaces, with the node's address, name and root dir.
func TestKubeletArgv(t *testing.T) {
	cfg := layout.NewConfig("devk")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	p := layout.HomeFiles("/home/u/.devk").Cluster("devk")
	argv := Node{Net: cfg.FirstNode(), Files: p.FirstNode(), Config: &cfg}.KubeletArgv()
	if want := []string{"nsenter", "--net=/run/netns/devk-devk-control-plane", "--mount=/home/u/.devk/clusters/devk/mntns/mnt", "--", p.FirstNode().KubeletBinary()}; !slices.Equal(argv[:5], want) {
		t.Errorf("the kubelet does not run in the node's network and mount namespaces: %v", argv)
	}
	for _, f := range []string{"--node-ip=10.250.0.2", "--hostname-override=devk-control-plane", "--root-dir=/home/u/.devk/clusters/devk/kubelet"} {
		if !slices.Contains(argv, f) {
			t.Errorf("kubelet argv lacks %s: %v", f, argv)
		}
	}
}

func TestNodePodCIDR(t *testing.T) {
	for _, tc := range []struct {
		spec corev1.NodeSpec
		want string
	}{
		{corev1.NodeSpec{}, ""},
		{corev1.NodeSpec{PodCIDR: "10.244.2.0/24"}, "10.244.2.0/24"},
		{corev1.NodeSpec{PodCIDRs: []string{"fd00::/64", "10.244.3.0/24"}}, "10.244.3.0/24"},
	} {
		if got := nodePodCIDR(&corev1.Node{Spec: tc.spec}); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.spec, got, tc.want)
		}
	}
}

func TestMemoryProblem(t *testing.T) {
	w, cp := layout.RoleWorker, layout.RoleControlPlane
	if p := MemoryProblem([]string{w, w}, 4<<30); p != nil {
		t.Errorf("4 GiB free refuses 2 nodes: %v", p)
	}
	if p := MemoryProblem(nil, 1); p != nil {
		t.Errorf("no new node, yet %v", p)
	}
	p := MemoryProblem(slices.Repeat([]string{w}, 10), 1<<30)
	if p == nil || !strings.Contains(p.What, "10 more nodes (0 control-plane) need about 2560 MiB") {
		t.Errorf("10 nodes in 1 GiB: %+v", p)
	}
	p = MemoryProblem([]string{cp, cp, w}, 2<<30)
	if p == nil || !strings.Contains(p.What, "3 more nodes (2 control-plane) need about 2304 MiB") {
		t.Errorf("2 control planes and a worker in 2 GiB: %+v", p)
	}
}
