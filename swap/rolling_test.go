package swap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/phase"
)

// rollingFixture is two control-plane nodes, each a fake kubelet and
// runtime (containerd and a kubelet need root and a cluster: the e2e
// suite's TestHAControlPlane swaps three real ones behind a real
// HAProxy), running the apiserver from oldImage; the load balancer is a
// log of what the swap asked of it.
type rollingFixture struct {
	*swapFixture
	second *fakeNode
	mu     sync.Mutex
	events []string
}

func newRollingFixture(t *testing.T) *rollingFixture {
	fx := &rollingFixture{swapFixture: newSwapFixture(t)}
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fx.m.Path)
	if err != nil {
		t.Fatal(err)
	}
	path := ManifestFor(dir, "kube-apiserver").Path
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour)
	os.Chtimes(path, long, long)
	fx.second = newFakeNode(t, dir, "node2", "kube-apiserver")
	fx.second.client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.34.4-dirty"}
	return fx
}

func (fx *rollingFixture) log(e string) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.events = append(fx.events, e)
}

func (fx *rollingFixture) taken() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	out := fx.events
	fx.events = nil
	return out
}

// options are a rolling swap of both nodes; out and back log the load
// balancer's part, out checking that the nodes before run the new image.
func (fx *rollingFixture) options(t *testing.T, o Options) Options {
	nodes := []*fakeNode{fx.node, fx.second}
	dialed := map[string]*Target{}
	o.dial = func(nd layout.Node) *Target { return dialed[nd.ManifestsDir] }
	for i, f := range nodes {
		dialed[f.dir] = f.Target()
		before := nodes[:i]
		f.grace = o.StopGrace
		o.ControlPlanes = append(o.ControlPlanes, layout.ControlPlaneNode{
			Name: f.node,
			Node: layout.Node{ManifestsDir: f.dir, Kubeconfig: "unused", CRISocket: "unused"},
			TakeOut: func(ctx context.Context) error {
				for _, b := range before {
					if got := b.running("kube-apiserver"); got != fx.pushed {
						t.Errorf("%s taken out while %s runs %s, not the new image: one node at a time", f.node, b.node, got)
					}
				}
				fx.log("out " + f.node)
				return nil
			},
			PutBack: func(ctx context.Context, untilUp bool) error {
				if untilUp {
					fx.log("back " + f.node)
				} else {
					fx.log("release " + f.node)
				}
				return nil
			},
		})
	}
	o.TreeDir, o.Timeout = fx.tree, 10*time.Second
	return o
}

func TestRollingSwapOneNodeAtATime(t *testing.T) {
	fx := newRollingFixture(t)
	ctx := context.Background()
	rep, err := Run(ctx, fx.options(t, Options{Components: []string{"apiserver"}, StopGrace: 3 * time.Second}), phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Both released first, without waiting (a killed roll may have left
	// one out), then each out around its own swap, in turn, and back
	// until its checks pass.
	want := []string{"release node1", "release node2", "out node1", "back node1", "out node2", "back node2"}
	if got := fx.taken(); !slices.Equal(got, want) {
		t.Errorf("load balancer: %v, want %v", got, want)
	}
	if len(rep.StaticPods) != 2 || rep.StaticPods[0].Node != "node1" || rep.StaticPods[1].Node != "node2" {
		t.Fatalf("report: %+v", rep.StaticPods)
	}
	for _, r := range rep.StaticPods {
		if bad := failedChecks(r); len(bad) > 0 || r.Unchanged || r.NewImage != fx.pushed {
			t.Errorf("%s: %+v, failed checks %v", r.Node, r, bad)
		}
	}
	for _, f := range []*fakeNode{fx.node, fx.second} {
		if got := f.running("kube-apiserver"); got != fx.pushed {
			t.Errorf("%s runs %s, want %s", f.node, got, fx.pushed)
		}
	}

	// Again: nothing changes, so no node leaves the load balancer.
	rep, err = Run(ctx, fx.options(t, Options{Components: []string{"apiserver"}, StopGrace: 3 * time.Second}), phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fx.taken(); !slices.Equal(got, []string{"release node1", "release node2"}) {
		t.Errorf("an unchanged roll asked the load balancer %v", got)
	}
	if len(rep.StaticPods) != 2 || !rep.StaticPods[0].Unchanged || !rep.StaticPods[1].Unchanged {
		t.Errorf("an unchanged roll: %+v", rep.StaticPods)
	}
}

func TestRollingSwapStopsAtTheFailingNode(t *testing.T) {
	fx := newRollingFixture(t)
	fx.second.broken[digest.Of(fx.pushed)] = true
	_, err := Run(context.Background(), fx.options(t, Options{Components: []string{"apiserver"}, Timeout: 2 * time.Second}), phase.Options{})
	if err == nil || !strings.Contains(err.Error(), "node node2") {
		t.Fatalf("a build that cannot start on node2: %v", err)
	}
	// node1 keeps the new build, node2 is back on the old one and in
	// the load balancer again.
	if got := fx.node.running("kube-apiserver"); got != fx.pushed {
		t.Errorf("node1 runs %s, want the new %s", got, fx.pushed)
	}
	if got := fx.second.running("kube-apiserver"); got != oldImage {
		t.Errorf("node2 runs %s, want the old %s after the rollback", got, oldImage)
	}
	if got := fx.taken(); len(got) == 0 || got[len(got)-1] != "back node2" {
		t.Errorf("node2 was not put back after its rollback: %v", got)
	}
}

// `devk swap apiserver --node node2` on a cluster of several control
// planes: that node only, still taken out around its swap.
func TestRollingSwapOfOneNodeStillTakesItOut(t *testing.T) {
	fx := newRollingFixture(t)
	o := fx.options(t, Options{Components: []string{"apiserver"}})
	o.ControlPlanes = o.ControlPlanes[1:]
	o.ControlPlanes[0].TakeOut = func(context.Context) error { fx.log("out node2"); return nil }
	if _, err := Run(context.Background(), o, phase.Options{}); err != nil {
		t.Fatal(err)
	}
	if got, want := fx.taken(), []string{"release node2", "out node2", "back node2"}; !slices.Equal(got, want) {
		t.Errorf("load balancer: %v, want %v", got, want)
	}
	if got := fx.node.running("kube-apiserver"); got != oldImage {
		t.Errorf("node1, which --node left out, runs %s", got)
	}
	if got := fx.second.running("kube-apiserver"); got != fx.pushed {
		t.Errorf("node2 runs %s, want %s", got, fx.pushed)
	}
}

// TestRollingSwapHoldsTheClusterThroughout: on a devk cluster the rolling
// swap holds the cluster's lock and every node's from before the first
// node to after the last (real flock): a node removal, an up or a swap on
// either node, tried while any node is out, is refused naming it; then
// all are free.
func TestRollingSwapHoldsTheClusterThroughout(t *testing.T) {
	fx := newRollingFixture(t)
	cluster := t.TempDir()
	o := fx.options(t, Options{Components: []string{"apiserver"}, ClusterDir: cluster, ClusterNodes: []string{fx.node.dir, fx.second.dir}})
	probes := 0
	for i := range o.ControlPlanes {
		takeOut := o.ControlPlanes[i].TakeOut
		o.ControlPlanes[i].TakeOut = func(ctx context.Context) error {
			probes++
			if _, err := nodelock.AcquireCluster(cluster, nil, "devk node remove"); !errors.Is(err, nodelock.ErrBusy) || !strings.Contains(err.Error(), "(pid ") {
				t.Errorf("a cluster job during the roll: %v, want it refused naming the swap", err)
			}
			for _, dir := range []string{fx.node.dir, fx.second.dir} {
				if _, err := nodelock.Acquire(dir, "devk swap"); !errors.Is(err, nodelock.ErrBusy) {
					t.Errorf("a swap on %s during the roll: %v", dir, err)
				}
			}
			return takeOut(ctx)
		}
	}
	if _, err := Run(context.Background(), o, phase.Options{}); err != nil {
		t.Fatal(err)
	}
	if probes != 2 {
		t.Errorf("%d nodes taken out, want 2", probes)
	}
	s, err := nodelock.AcquireCluster(cluster, []string{fx.node.dir, fx.second.dir}, "devk up")
	if err != nil {
		t.Fatalf("after the roll: %v", err)
	}
	s.Release()
}

// TestOnCluster: one control plane is the plain swap of one node, several
// a rolling swap of those picked (node 0's first), none picked a NoNode
// that says what to add; the stop grace and relists are the cluster's.
func TestOnCluster(t *testing.T) {
	node0 := layout.Node{ManifestsDir: "/c/manifests"}
	cp := func(name string) layout.ControlPlaneNode {
		return layout.ControlPlaneNode{Name: name, Node: layout.Node{ManifestsDir: "/c/nodes/" + name + "/manifests"}}
	}
	three := []layout.ControlPlaneNode{{Name: "c-control-plane", Node: node0}, cp("c-control-plane2"), cp("c-control-plane3")}
	for _, tc := range []struct {
		name     string
		cps      []layout.ControlPlaneNode
		picked   []string
		rolling  []string // the rolling swap's nodes; none: one node's swap
		node     string   // o.NodeName after
		noNode   string   // in o.NoNode
		relisted string   // the node o.Relist restarts
	}{
		{name: "one control plane", cps: three[:1], node: "c-control-plane", relisted: "c-control-plane"},
		{name: "one control plane, a worker picked", cps: three[:1], picked: []string{"c-worker"}, node: "c-control-plane",
			noNode: "which --node leaves out: add --node c-control-plane", relisted: "c-control-plane"},
		{name: "three", cps: three, rolling: []string{"c-control-plane", "c-control-plane2", "c-control-plane3"}, node: "c-control-plane", relisted: "c-control-plane"},
		{name: "three, two picked", cps: three, picked: []string{"c-control-plane3", "c-control-plane2"},
			rolling: []string{"c-control-plane2", "c-control-plane3"}, node: "c-control-plane2", relisted: "c-control-plane2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var relisted []string
			c := Cluster{Dir: "/c", NodeManifests: []string{"/c/manifests"}, NodeName: "c-control-plane", ControlPlanes: tc.cps, StopGrace: 7 * time.Second,
				Relist: func(ctx context.Context, node string) error { relisted = append(relisted, node); return nil }}
			for _, cp := range tc.cps {
				c.ControlPlaneNames = append(c.ControlPlaneNames, cp.Name)
			}
			o := Options{Node: node0, NodeName: "c-control-plane"}
			o.OnCluster(c, tc.picked)
			var rolling []string
			for _, cp := range o.ControlPlanes {
				rolling = append(rolling, cp.Name)
				_ = cp.Relist(context.Background())
			}
			if !slices.Equal(rolling, tc.rolling) || o.NodeName != tc.node || o.StopGrace != c.StopGrace || o.ClusterDir != c.Dir {
				t.Errorf("rolling %v on %s (grace %s, dir %q); want rolling %v on %s", rolling, o.NodeName, o.StopGrace, o.ClusterDir, tc.rolling, tc.node)
			}
			if !slices.Equal(relisted, tc.rolling) {
				t.Errorf("the control planes' relists restarted %v, want %v", relisted, tc.rolling)
			}
			relisted = nil
			_ = o.Relist(context.Background())
			if !slices.Equal(relisted, []string{tc.relisted}) {
				t.Errorf("Relist restarted %v, want %s's", relisted, tc.relisted)
			}
			if (o.NoNode == nil) != (tc.noNode == "") || (o.NoNode != nil && !strings.Contains(o.NoNode.Error(), tc.noNode)) {
				t.Errorf("NoNode = %v, want %q", o.NoNode, tc.noNode)
			}
		})
	}
}
