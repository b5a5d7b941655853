package swap

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsac "k8s.io/client-go/applyconfigurations/apps/v1"
	coreac "k8s.io/client-go/applyconfigurations/core/v1"
	metaac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/phase"
)

// The images `devk up` installed the addons with.
const (
	upProxy   = "localhost:5000/kube-proxy@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	upCoreDNS = "localhost:5000/coredns@sha256:1111111111111111111111111111111111111111111111111111111111111111"
)

// addonFixture is a cluster running kube-proxy (a DaemonSet, one pod on
// the local node) and CoreDNS (a Deployment, two replicas, one of them
// on another node) as `devk up` applies them, a fake controller and
// kubelet (fakeController) rolling them out, a real in-process registry
// holding the pushed images, and a tree whose state.json records those
// pushes.
type addonFixture struct {
	node   *fakeNode
	ctl    *fakeController
	tree   string
	pushed map[string]string // component -> repo@sha256:…
}

func newAddonFixture(t *testing.T) *addonFixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	node := newFakeNode(t, dir, "node1")
	fx := &addonFixture{node: node, ctl: newFakeController(t, node), pushed: map[string]string{}}
	fx.up(t, map[string]string{"kube-proxy": upProxy, "coredns": upCoreDNS})

	reg := httptest.NewServer(ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	fx.tree = testtree.Copy(t)
	for _, comp := range []string{"kube-proxy", "coredns"} {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := name.ParseReference(host + "/" + comp + ":v1.34.4-dirty")
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		fx.pushed[comp] = host + "/" + comp + "@" + d.String()
		if err := build.UpdateState(fx.tree, func(st *build.StateFile) error {
			st.Components[comp] = &build.ComponentState{Pushed: &build.PushRecord{Ref: fx.pushed[comp], Repository: host + "/" + comp,
				Tag: "v1.34.4-dirty", Digest: d.String(), PushedAt: time.Now()}}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	fx.awaitRolledOut(t)
	return fx
}

// up applies the addons as `devk up`'s addon phase does: server-side
// apply as kube.FieldManager, each with the image addon.KeptImage gives
// for the image up recorded.
func (fx *addonFixture) up(t *testing.T, recorded map[string]string) {
	t.Helper()
	ctx := context.Background()
	cs := fx.node.client
	for _, w := range addon.Workloads {
		live, err := addon.Get(ctx, cs, w)
		if err != nil {
			t.Fatal(err)
		}
		img, _ := addon.KeptImage(recorded[w.Component], live)
		labels := map[string]string{"k8s-app": w.Name}
		tmpl := coreac.PodTemplateSpec().WithLabels(labels).WithSpec(coreac.PodSpec().WithHostNetwork(w.Kind == addon.DaemonSet).
			WithContainers(coreac.Container().WithName(w.Container).WithImage(img).WithCommand("/" + w.Container)))
		sel := metaac.LabelSelector().WithMatchLabels(labels)
		switch w.Kind {
		case addon.DaemonSet:
			ac := appsac.DaemonSet(w.Name, w.Namespace).WithLabels(labels).WithSpec(appsac.DaemonSetSpec().WithSelector(sel).WithTemplate(tmpl))
			_, err = kube.Apply(ctx, cs.AppsV1().DaemonSets(w.Namespace), w.Name, ac)
		case addon.Deployment:
			ac := appsac.Deployment(w.Name, w.Namespace).WithLabels(labels).WithSpec(appsac.DeploymentSpec().WithReplicas(2).WithSelector(sel).WithTemplate(tmpl))
			_, err = kube.Apply(ctx, cs.AppsV1().Deployments(w.Namespace), w.Name, ac)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (fx *addonFixture) awaitRolledOut(t *testing.T) {
	t.Helper()
	n := fx.node.Target()
	for _, w := range addon.Workloads {
		s, err := addon.Get(context.Background(), n.Client, w)
		if err != nil || s == nil {
			t.Fatalf("%s: %v", w, err)
		}
		if err := n.awaitRollout(context.Background(), w, s.Image(), &AddonResult{}); err != nil {
			t.Fatal(err)
		}
	}
}

func (fx *addonFixture) state(t *testing.T, comp string) *addon.State {
	t.Helper()
	w, _ := addon.Lookup(comp)
	s, err := addon.Get(context.Background(), fx.node.client, w)
	if err != nil || s == nil {
		t.Fatalf("%s: %v", w, err)
	}
	return s
}

// run runs the swap's phases on the fake cluster, as swap.Run does.
func (fx *addonFixture) run(t *testing.T, o Options, popts phase.Options) (*Report, error) {
	t.Helper()
	ctx := context.Background()
	o.TreeDir = fx.tree
	o.Node = layout.Node{ManifestsDir: fx.node.dir, Kubeconfig: "unused", CRISocket: "unused"}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	j, err := NewJob(o)
	if err != nil {
		t.Fatal(err)
	}
	j.target = fx.node.Target()
	j.target.Timeout = o.Timeout
	if popts.DryRun {
		_ = j.selectPods()
		_ = j.selectAddons(ctx)
	}
	_, err = phase.Run(ctx, Phases(), j, popts)
	return j.Report, j.Close(ctx, err)
}

func addonResult(t *testing.T, rep *Report, comp string) *AddonResult {
	t.Helper()
	for _, r := range rep.Addons {
		if r.Component == comp {
			return r
		}
	}
	t.Fatalf("no result for %s in %+v", comp, rep)
	return nil
}

func TestAddonSwapRollsOutAndVerifies(t *testing.T) {
	fx := newAddonFixture(t)
	// No component named: every addon whose workload does not name its
	// last pushed digest.
	rep, err := fx.run(t, Options{}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for comp, up := range map[string]string{"kube-proxy": upProxy, "coredns": upCoreDNS} {
		r := addonResult(t, rep, comp)
		if r.RolledBack || r.Unchanged || r.OldImage != up || r.NewImage != fx.pushed[comp] || r.RolledOut <= 0 {
			t.Fatalf("%s: %+v", comp, r)
		}
		names := map[string]bool{}
		for _, c := range r.Checks {
			if !c.OK {
				t.Errorf("%s: check %s: got %s, want %s", comp, c.Name, c.Got, c.Want)
			}
			names[c.Name] = true
		}
		// The pod on this node is checked through CRI too.
		var local bool
		for n := range names {
			local = local || strings.HasSuffix(n, " "+digest.CheckPodCRI)
		}
		if !names[digest.CheckWorkload] || !local {
			t.Errorf("%s: checks %v lack the workload's image or a CRI check", comp, names)
		}
		s := fx.state(t, comp)
		if s.Image() != fx.pushed[comp] || s.Annotations[addon.SwappedImageAnnotation] != fx.pushed[comp] || s.Annotations[addon.PreviousImageAnnotation] != up {
			t.Fatalf("%s names %s with annotations %v", s.Workload, s.Image(), s.Annotations)
		}
		// What `devk up` applied stays: the swap applied only the image.
		if c := s.Container(); len(c.Command) != 1 || s.Template.Labels["k8s-app"] == "" {
			t.Fatalf("the swap lost up's fields: %+v", s.Template)
		}
	}
	coredns := addonResult(t, rep, "coredns")
	if n := strings.Count(strings.Join(checkNames(coredns), "\n"), " "+digest.CheckPodImageID); n != 2 {
		t.Fatalf("coredns: %d pods' imageIDs checked, want both replicas'", n)
	}

	// `devk up` again keeps the swapped images (addon.KeptImage) and the
	// swap's annotations (another field manager's).
	fx.up(t, map[string]string{"kube-proxy": upProxy, "coredns": upCoreDNS})
	for comp := range fx.pushed {
		if s := fx.state(t, comp); s.Image() != fx.pushed[comp] || s.Annotations[addon.PreviousImageAnnotation] == "" {
			t.Fatalf("after up %s names %s (annotations %v), want the swapped %s", comp, s.Image(), s.Annotations, fx.pushed[comp])
		}
	}

	// Again: nothing to change, the rollout and the checks pass.
	rep, err = fx.run(t, Options{Components: []string{"kube-proxy"}}, phase.Options{})
	if err != nil || len(rep.Addons) != 1 || !rep.Addons[0].Unchanged {
		t.Fatalf("second swap: %+v, %v", rep.Addons, err)
	}

	// --rollback: back to what up installed, verified; a second one
	// finds it restored.
	rep, err = fx.run(t, Options{Components: []string{"kube-proxy"}, Rollback: true}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Addons[0]; !r.Restored || r.NewImage != upProxy || r.OldImage != fx.pushed["kube-proxy"] || len(failed(r.Checks)) > 0 {
		t.Fatalf("rollback: %+v", r)
	}
	if s := fx.state(t, "kube-proxy"); s.Image() != upProxy || s.Annotations[addon.SwappedImageAnnotation] != upProxy {
		t.Fatalf("after --rollback %s names %s, annotations %v", s.Workload, s.Image(), s.Annotations)
	}
	if got := fx.node.runningPod("kube-proxy"); got != upProxy {
		t.Fatalf("after --rollback the node runs %q", got)
	}
	rep, err = fx.run(t, Options{Components: []string{"kube-proxy"}, Rollback: true}, phase.Options{})
	if err != nil || !rep.Addons[0].Unchanged {
		t.Fatalf("second rollback: %+v, %v", rep.Addons[0], err)
	}
}

func checkNames(r *AddonResult) []string {
	var out []string
	for _, c := range r.Checks {
		out = append(out, c.Name)
	}
	return out
}

func failed(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if !c.OK {
			out = append(out, c.Name+": got "+c.Got)
		}
	}
	return out
}

func TestAddonSwapUndoesAFailedRollout(t *testing.T) {
	fx := newAddonFixture(t)
	fx.node.mu.Lock()
	fx.node.broken[digest.Of(fx.pushed["kube-proxy"])] = true
	fx.node.mu.Unlock()
	rep, err := fx.run(t, Options{Components: []string{"kube-proxy"}}, phase.Options{})
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "CrashLoopBackOff") || !strings.Contains(err.Error(), "last terminated Error (exit 1)") {
		t.Fatalf("err = %v, want ErrRolledBack saying the container crash-loops", err)
	}
	r := rep.Addons[0]
	// The fake clientset answers every pods/log request with "fake logs".
	if !r.RolledBack || r.Pod == "" || strings.Join(r.Log, "\n") != "fake logs" {
		t.Fatalf("result %+v: want rolled back with the failing pod and its log", r)
	}
	s := fx.state(t, "kube-proxy")
	if s.Image() != upProxy {
		t.Fatalf("after the rollback %s names %s", s.Workload, s.Image())
	}
	// A failed swap costs no step of --rollback history.
	if len(s.Annotations) != 0 {
		t.Fatalf("a failed swap left annotations %v", s.Annotations)
	}
	if got := fx.node.runningPod("kube-proxy"); got != upProxy {
		t.Fatalf("after the rollback the node runs %q", got)
	}
}

func TestAddonSwapUndoesARolloutThatTimesOut(t *testing.T) {
	fx := newAddonFixture(t)
	fx.ctl.mu.Lock()
	fx.ctl.stuck[digest.Of(fx.pushed["coredns"])] = true
	fx.ctl.mu.Unlock()
	_, err := fx.run(t, Options{Components: []string{"coredns"}, Timeout: time.Second}, phase.Options{})
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "timed out after 1s") || !strings.Contains(err.Error(), "container coredns: waiting ContainerCreating") {
		t.Fatalf("err = %v, want ErrRolledBack saying what the rollout waited for", err)
	}
	if s := fx.state(t, "coredns"); s.Image() != upCoreDNS {
		t.Fatalf("after the rollback %s names %s", s.Workload, s.Image())
	}
}

func TestAddonSwapPlan(t *testing.T) {
	fx := newAddonFixture(t)
	var plan strings.Builder
	rep, err := fx.run(t, Options{Components: []string{"kube-proxy"}}, phase.Options{DryRun: true, PlanOut: &plan})
	if err != nil || len(rep.Addons) != 0 {
		t.Fatalf("dry run: %+v, %v", rep, err)
	}
	for _, want := range []string{
		"kube-proxy/set-image", "reads  " + fx.pushed["kube-proxy"], "writes DaemonSet kube-system/kube-proxy (container kube-proxy's image",
		"kube-proxy/rollout", "needs  kube-proxy/set-image", "kube-proxy/verify", "needs  kube-proxy/rollout",
	} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, plan.String())
		}
	}
	// The addon not selected is listed without what it would touch.
	if strings.Contains(plan.String(), "Deployment kube-system/coredns (") {
		t.Errorf("plan names coredns's writes:\n%s", plan.String())
	}
	if s := fx.state(t, "kube-proxy"); s.Image() != upProxy || len(s.Annotations) != 0 {
		t.Fatal("a dry run changed the workload")
	}
}

func TestAddonSwapRefusals(t *testing.T) {
	fx := newAddonFixture(t)
	_, err := fx.run(t, Options{Components: []string{"kube-proxy"}}, phase.Options{Skip: []string{"kube-proxy/set-image"}})
	if err == nil || !strings.Contains(err.Error(), "kube-proxy/rollout needs kube-proxy/set-image") {
		t.Fatalf("skip set-image: %v", err)
	}
	// Nothing swapped yet: nothing to roll back to.
	_, err = fx.run(t, Options{Components: []string{"coredns"}, Rollback: true}, phase.Options{})
	if err == nil || !strings.Contains(err.Error(), addon.PreviousImageAnnotation) {
		t.Fatalf("rollback before any swap: %v", err)
	}
	// An addon the cluster does not run.
	if err := fx.node.client.AppsV1().DaemonSets(metav1.NamespaceSystem).Delete(context.Background(), "kube-proxy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = fx.run(t, Options{Components: []string{"kube-proxy"}}, phase.Options{})
	if err == nil || !strings.Contains(err.Error(), "no DaemonSet kube-system/kube-proxy") || !strings.Contains(err.Error(), "devk up") {
		t.Fatalf("absent addon: %v", err)
	}
	if s := fx.state(t, "coredns"); s.Image() != upCoreDNS {
		t.Fatal("a refused run changed coredns")
	}
}

// runningPod is the image of a running container of the first pod named
// <prefix>-… on the fake runtime, "" if none.
func (f *fakeNode) runningPod(prefix string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.containers) - 1; i >= 0; i-- {
		if c := f.containers[i]; strings.HasPrefix(c.PodName, prefix+"-") && c.Running() {
			return c.ImageRef
		}
	}
	return ""
}

// TestAddonDebugSwap: a debug swap runs each addon's container under the
// debugger (its debug image, the command wrapped, CoreDNS at one replica
// with the port on its node), verified against the debug image; again,
// nothing changes; --stop puts the container and the replicas back as
// they were; a plain swap of a debugged addon puts the container back
// with the new image.
func TestAddonDebugSwap(t *testing.T) {
	fx := newAddonFixture(t)
	if _, err := fx.run(t, Options{}, phase.Options{}); err != nil {
		t.Fatal(err)
	}
	before := map[string]*addon.State{"kube-proxy": fx.state(t, "kube-proxy"), "coredns": fx.state(t, "coredns")}
	// The pushed images stand in for the debug images.
	if err := build.UpdateState(fx.tree, func(st *build.StateFile) error {
		for comp, ref := range fx.pushed {
			rec := *st.Components[comp].Pushed
			rec.Ref = strings.Replace(ref, "@", ":debug@", 1)
			st.Components[comp].DebugPushed = &rec
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wrap := func(own []string) ([]string, error) {
		return append([]string{"/usr/local/bin/dlv", "exec", "--listen=" + addon.DebugListenHost + ":2351", own[0], "--"}, own[1:]...), nil
	}
	debug := func() *Debugging { return &Debugging{Command: wrap, Port: 2351} }
	rep, err := fx.run(t, Options{Components: []string{"kube-proxy", "coredns"}, Debug: debug()}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for comp := range fx.pushed {
		s := fx.state(t, comp)
		c := s.Container()
		if !s.Debugging() || c.Command[0] != "/usr/local/bin/dlv" || !strings.Contains(c.Image, ":debug@") {
			t.Errorf("%s under the debugger: %+v", comp, c)
		}
		if r := addonResult(t, rep, comp); len(r.Checks) == 0 || len(failedAddonChecks(r)) > 0 {
			t.Errorf("%s: checks %v", comp, failedAddonChecks(r))
		}
	}
	if s := fx.state(t, "coredns"); s.Desired != 1 || s.Container().Ports[0].HostPort != 2351 {
		t.Errorf("coredns under the debugger: %d replicas, ports %+v", s.Desired, s.Container().Ports)
	}
	rep, err = fx.run(t, Options{Components: []string{"kube-proxy"}, Debug: debug()}, phase.Options{})
	if err != nil || !addonResult(t, rep, "kube-proxy").Unchanged {
		t.Fatalf("debugging again: %v, %+v", err, rep)
	}

	if _, err := fx.run(t, Options{Components: []string{"kube-proxy"}, Debug: &Debugging{Stop: true}}, phase.Options{}); err != nil {
		t.Fatal(err)
	}
	if s := fx.state(t, "kube-proxy"); s.Debugging() || !apiequality.Semantic.DeepEqual(s.Template, before["kube-proxy"].Template) {
		t.Errorf("after --stop kube-proxy's template is\n%+v\nwant\n%+v", s.Template, before["kube-proxy"].Template)
	}
	if _, err := fx.run(t, Options{Components: []string{"kube-proxy"}, Debug: &Debugging{Stop: true}}, phase.Options{}); !errors.Is(err, addon.ErrNotDebugged) {
		t.Errorf("--stop of an addon not debugged: %v", err)
	}

	// A plain swap of the debugged CoreDNS: its own container back, two
	// replicas, the pushed image.
	if _, err := fx.run(t, Options{Components: []string{"coredns"}}, phase.Options{}); err != nil {
		t.Fatal(err)
	}
	s := fx.state(t, "coredns")
	want := before["coredns"].Template.DeepCopy()
	if s.Debugging() || s.Desired != 2 || !apiequality.Semantic.DeepEqual(s.Template, *want) {
		t.Errorf("after a plain swap coredns is\n%+v (%d replicas)\nwant\n%+v (2)", s.Template, s.Desired, want)
	}
}

func failedAddonChecks(r *AddonResult) []string {
	var bad []string
	for _, c := range r.Checks {
		if !c.OK {
			bad = append(bad, c.Name+": got "+c.Got+", want "+c.Want)
		}
	}
	return bad
}
