package cluster

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
)

const (
	testCoreDNSImage   = "127.0.0.1:5000/coredns@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	testKubeProxyImage = "127.0.0.1:5000/kube-proxy@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// addonCluster is a placed cluster with both addons' images recorded.
func addonCluster(t *testing.T) *Cluster {
	t.Helper()
	cfg, _ := testCluster()
	cfg.Images = map[string]string{addons.CoreDNS: testCoreDNSImage, addons.KubeProxy: testKubeProxyImage}
	return &Cluster{Config: cfg, Files: layout.HomeFiles(t.TempDir()).Cluster(cfg.Name)}
}

// applyAddons applies both addons to cs as up's phases do (client-go's
// fake API server; cluster/internal/addons' tests check the objects).
func applyAddons(t *testing.T, c *Cluster, cs kubernetes.Interface) {
	t.Helper()
	for _, a := range upAddons() {
		var n addons.Count
		if err := a.objects(context.Background(), cs, c.Config, c.Config.Images[a.Name], &n); err != nil {
			t.Fatalf("apply %s: %v", a.Name, err)
		}
	}
}

// TestApplyAddonOutcome: a phase is Unchanged only when nothing it
// applied changed and its workload is rolled out; otherwise addon/wait
// waits for the workload.
func TestApplyAddonOutcome(t *testing.T) {
	for _, tt := range []struct {
		name      string
		changed   int
		available int32
		unchanged bool
	}{
		{name: "objects written", changed: 2},
		{name: "objects written, the old pods ready", changed: 1, available: 1},
		{name: "nothing written, not ready"},
		{name: "nothing written, ready", available: 1, unchanged: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := upAddon{
				Name: addons.KubeProxy,
				objects: func(_ context.Context, _ kubernetes.Interface, _ layout.Config, _ string, n *addons.Count) error {
					for i := range 3 {
						_ = n.Add(i < tt.changed, nil)
					}
					return nil
				},
				workload: addonWorkload(addons.KubeProxy),
			}
			cs := fake.NewClientset(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: addons.KubeProxy, Namespace: metav1.NamespaceSystem, Generation: 1},
				Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberAvailable: tt.available}})
			c := addonCluster(t)
			out, err := c.applyAddonWith(context.Background(), cs, a, "img")
			if err != nil {
				t.Fatal(err)
			}
			if out.Changed == tt.unchanged {
				t.Errorf("outcome %+v, want changed %v", out, !tt.unchanged)
			}
			if waits := len(c.addonsApplied) == 1; waits == tt.unchanged {
				t.Errorf("addon/wait waits for %v", c.addonsApplied)
			}
			if checked := slices.ContainsFunc(cs.Actions(), func(a clienttesting.Action) bool { return a.Matches("get", "daemonsets") }); tt.changed > 0 && checked {
				t.Error("checked readiness right after a change, when the status is stale anyway")
			}
		})
	}
}

// TestAddonWorkloads: each of up's addons waits for its workload as
// internal/addon knows it.
func TestAddonWorkloads(t *testing.T) {
	for _, a := range upAddons() {
		if a.workload.Component != a.Name || a.workload.Kind == "" {
			t.Errorf("addon %s: workload %+v", a.Name, a.workload)
		}
	}
}

func TestApplyAddonNeedsImage(t *testing.T) {
	c := addonCluster(t)
	delete(c.Config.Images, addons.CoreDNS)
	for _, a := range upAddons() {
		if a.Name != addons.CoreDNS {
			continue
		}
		_, err := c.applyAddon(context.Background(), a, false)
		if err == nil || !strings.Contains(err.Error(), "--skip-phases addon/coredns") || !strings.Contains(err.Error(), "images.coredns") {
			t.Errorf("applying coredns without an image: %v", err)
		}
	}
}

// TestAddonPhases: the addons come last but for kubectl's install (built
// beside the phases since the images phase), after the kubelet's
// credential moved and the user's context was written, each can be
// skipped, and every phase says what it does and touches.
func TestAddonPhases(t *testing.T) {
	var paths []string
	for _, s := range phase.Flatten(UpPhases()) {
		paths = append(paths, s.Path)
		if s.Phase.Short == "" {
			t.Errorf("phase %s has no help", s.Path)
		}
		if strings.HasPrefix(s.Path, "addon/") && s.Phase.IO == nil {
			t.Errorf("phase %s has no IO", s.Path)
		}
	}
	i := slices.Index(paths, "addon")
	if i < 0 || !slices.Equal(paths[i:], []string{"addon", "addon/kube-proxy", "addon/coredns", "addon/wait", "kubectl"}) {
		t.Fatalf("phases end %v", paths[max(i, 0):])
	}
	for _, before := range []string{"bootstrap-token", "kubelet-finalize", "kubeconfig-merge", "mark-control-plane"} {
		if j := slices.Index(paths, before); j < 0 || j > i {
			t.Errorf("%s is not before addon: %v", before, paths)
		}
	}
	c := addonCluster(t)
	for _, skip := range []string{"addon/coredns", "addon/kube-proxy", "addon/wait", "addon"} {
		var plan strings.Builder
		if _, err := phase.Run(context.Background(), UpPhases(), c, phase.Options{DryRun: true, Skip: []string{skip}, PlanOut: &plan}); err != nil {
			t.Errorf("--skip-phases %s: %v", skip, err)
		}
	}
}

// TestKubeProxyRuns: kube-proxy runs only where host-network pods live
// in the node's own network namespace.
func TestKubeProxyRuns(t *testing.T) {
	_, subnet, _ := net.ParseCIDR("10.250.7.0/24")
	withNetwork := layout.NewConfig("kp")
	withNetwork.Network = layout.NewNetwork("kp", layout.FirstNodeName("kp"), subnet)
	foreignRuntime := withNetwork
	foreignRuntime.OwnRuntime = false
	for _, tt := range []struct {
		name string
		cfg  layout.Config
		runs bool
	}{
		{"node in its own network namespace", withNetwork, true},
		{"a runtime that is not devk's", foreignRuntime, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			runs, why := KubeProxyRuns(tt.cfg)
			if runs != tt.runs || (!runs && !strings.Contains(why, "iptables")) {
				t.Errorf("KubeProxyRuns = %v, %q; want %v", runs, why, tt.runs)
			}
		})
	}
}

// TestNodeImages: up's pull phase pulls what the node will run: the
// static pods' and pause images, and those of the addons the spec turns
// on and the node can run.
func TestNodeImages(t *testing.T) {
	_, subnet, _ := net.ParseCIDR("10.250.7.0/24")
	cfg := layout.NewConfig("pull")
	cfg.Network = layout.NewNetwork("pull", layout.FirstNodeName("pull"), subnet)
	cfg.OwnRuntime = true
	cfg.Images = map[string]string{"etcd": "r/etcd@sha256:1", "apiserver": "r/apiserver@sha256:2", "pause": "r/pause@sha256:3",
		addons.KubeProxy: testKubeProxyImage, addons.CoreDNS: testCoreDNSImage}
	c := &Cluster{Config: cfg}
	if got := c.nodeImages(); len(got) != 5 {
		t.Fatalf("all on: %v", got)
	}
	off := false
	c.Config.Spec.Addons.CoreDNS = &off
	if got := c.nodeImages(); got[addons.CoreDNS] != "" || got[addons.KubeProxy] == "" || len(got) != 4 {
		t.Fatalf("addons.coreDNS false: %v", got)
	}
	c.Config.OwnRuntime = false // host-network pods may share the machine's network: no kube-proxy
	if got := c.nodeImages(); got[addons.KubeProxy] != "" || got["apiserver"] == "" || len(got) != 3 {
		t.Fatalf("a runtime that is not devk's: %v", got)
	}
}
