package swap

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/syncbuf"
	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/phase"
)

const oldImage = "localhost:5000/kube-apiserver@sha256:1111111111111111111111111111111111111111111111111111111111111111"

// swapFixture is a node (the fake kubelet and runtime, running the
// apiserver from oldImage, with a readiness probe that answers), a real
// in-process registry holding the pushed image, and a tree whose
// state.json records that push.
type swapFixture struct {
	node   *fakeNode
	m      Manifest
	tree   string
	pushed string // the pushed image, repo@sha256:…
}

func newSwapFixture(t *testing.T) *swapFixture {
	t.Helper()
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(health.Close)
	port := health.URL[strings.LastIndex(health.URL, ":")+1:]
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := ManifestFor(dir, "kube-apiserver")
	manifest := strings.Replace(apiserverManifest, "    name: kube-apiserver\n", `    name: kube-apiserver
    readinessProbe:
      httpGet:
        host: 127.0.0.1
        path: /readyz
        port: `+port+`
        scheme: HTTP
`, 1)
	if err := os.WriteFile(m.Path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	// Written long ago, as the pod it names started (see handover).
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(m.Path, long, long); err != nil {
		t.Fatal(err)
	}
	f := newFakeNode(t, dir, "node1", "kube-apiserver")
	// Another control-plane node's mirror pod, named with the same
	// prefix and listed first: the swap must not read it.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-node0", Namespace: metav1.NamespaceSystem,
		Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x", "kubernetes.io/config.hash": "x"}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "kube-apiserver", ImageID: oldImage,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	if _, err := f.client.CoreV1().Pods(metav1.NamespaceSystem).Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.34.4-dirty"}

	reg := httptest.NewServer(ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host + "/kube-apiserver:v1.34.4-dirty")
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	pushed := host + "/kube-apiserver@" + d.String()
	tree := testtree.Copy(t)
	if err := build.UpdateState(tree, func(st *build.StateFile) error {
		st.Components["apiserver"] = &build.ComponentState{
			Binary: &build.BinaryRecord{SHA256: "abc", Version: "v1.34.4-dirty"},
			Pushed: &build.PushRecord{Ref: pushed, Repository: host + "/kube-apiserver", Tag: "v1.34.4-dirty", Digest: d.String(), BinarySHA256: "abc", PushedAt: time.Now()},
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return &swapFixture{node: f, m: m, tree: tree, pushed: pushed}
}

// run runs the swap's phases on the fake node, as swap.Run does.
func (fx *swapFixture) run(t *testing.T, ctx context.Context, o Options, popts phase.Options) (*Report, error) {
	t.Helper()
	o.TreeDir = fx.tree
	o.Node = layout.Node{ManifestsDir: fx.node.dir, Kubeconfig: "unused", CRISocket: "unused"}
	o.Timeout = 10 * time.Second
	j, err := NewJob(o)
	if err != nil {
		t.Fatal(err)
	}
	j.target = fx.node.Target()
	_, err = phase.Run(ctx, Phases(), j, popts)
	return j.Report, j.Close(ctx, err)
}

func failedChecks(r *Result) []string {
	var bad []string
	for _, c := range r.Checks {
		if !c.OK {
			bad = append(bad, c.Name+": got "+c.Got+", want "+c.Want)
		}
	}
	return bad
}

func TestSwapRunsAndVerifiesThePushedImage(t *testing.T) {
	fx := newSwapFixture(t)
	rep, err := fx.run(t, context.Background(), Options{Components: []string{"apiserver"}}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.StaticPods) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	r := rep.StaticPods[0]
	if r.RolledBack || r.Unchanged || r.OldImage != oldImage || r.NewImage != fx.pushed || r.Ready <= 0 || r.Took < r.Ready {
		t.Fatalf("result: %+v", r)
	}
	if bad := failedChecks(r); len(bad) > 0 || len(r.Checks) != 6 {
		t.Fatalf("checks %d, failed: %v", len(r.Checks), bad)
	}
	if got := fx.node.running("kube-apiserver"); got != fx.pushed {
		t.Fatalf("the node runs %q, want %s", got, fx.pushed)
	}
	if !strings.Contains(fx.node.pulledRefs(), fx.pushed) {
		t.Fatalf("pulled %q, not the pushed image", fx.node.pulledRefs())
	}
	// The old container was stopped by the swap (without grace: the fake
	// fails the test otherwise), not left to the kubelet's grace period.
	if len(fx.node.stoppedIDs()) == 0 {
		t.Fatal("the old container was not stopped through CRI")
	}
	if img := imageOf(t, fx.m.Path); img != fx.pushed {
		t.Fatalf("manifest names %s", img)
	}
	if img := imageOf(t, fx.m.BackupPath()); img != oldImage {
		t.Fatalf(".prev names %s, want the replaced %s", img, oldImage)
	}
	if j, _ := fx.m.InProgress(); j != nil {
		t.Fatalf("journal left: %+v", j)
	}

	// Again: nothing to change, every check passes, nothing is written.
	before, _ := os.ReadFile(fx.m.Path)
	rep, err = fx.run(t, context.Background(), Options{Components: []string{"apiserver"}}, phase.Options{})
	if err != nil || len(rep.StaticPods) != 1 || !rep.StaticPods[0].Unchanged {
		t.Fatalf("second swap: %+v, %v", rep.StaticPods, err)
	}
	if after, _ := os.ReadFile(fx.m.Path); !bytes.Equal(before, after) {
		t.Fatal("a swap to the running image rewrote the manifest")
	}

	// --rollback: back to the replaced image, verified.
	rep, err = fx.run(t, context.Background(), Options{Components: []string{"apiserver"}, Rollback: true}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r = rep.StaticPods[0]
	if !r.Restored || r.NewImage != oldImage || r.OldImage != fx.pushed {
		t.Fatalf("rollback result: %+v", r)
	}
	if bad := failedChecks(r); len(bad) > 0 {
		t.Fatalf("rollback checks failed: %v", bad)
	}
	if got := fx.node.running("kube-apiserver"); got != oldImage {
		t.Fatalf("after --rollback the node runs %q", got)
	}
}

func TestSwapRollsBackAContainerThatExits(t *testing.T) {
	fx := newSwapFixture(t)
	fx.node.mu.Lock()
	fx.node.broken[fx.pushed[strings.Index(fx.pushed, "@")+1:]] = true
	fx.node.mu.Unlock()
	rep, err := fx.run(t, context.Background(), Options{Components: []string{"apiserver"}}, phase.Options{})
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "exited with code 1") {
		t.Fatalf("err = %v, want ErrRolledBack naming the exit", err)
	}
	r := rep.StaticPods[0]
	if !r.RolledBack || len(r.Log) == 0 || !strings.Contains(strings.Join(r.Log, "\n"), "refuses to start") {
		t.Fatalf("result %+v: want rolled back with the container's log", r)
	}
	if img := imageOf(t, fx.m.Path); img != oldImage {
		t.Fatalf("after the rollback the manifest names %s", img)
	}
	if got := fx.node.running("kube-apiserver"); got != oldImage {
		t.Fatalf("after the rollback the node runs %q", got)
	}
	if j, _ := fx.m.InProgress(); j != nil {
		t.Fatal("journal left after the rollback")
	}
	if _, err := os.Stat(fx.m.BackupPath()); !os.IsNotExist(err) {
		t.Fatalf("a failed swap made a .prev (%v): it costs a step of --rollback history", err)
	}
}

// TestInterruptedHandOverPutsTheOldManifestBack: Ctrl-C during the
// hand-over (the manifest moved out, the old container stopped) puts the
// old manifest back, waits for the old pod, and drops the journal.
func TestInterruptedHandOverPutsTheOldManifestBack(t *testing.T) {
	fx := newSwapFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx.node.onStop = func(string) { cancel() }
	rep, err := fx.run(t, ctx, Options{Components: []string{"apiserver"}}, phase.Options{})
	if !errors.Is(err, ErrPutBack) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrPutBack wrapping the cancel", err)
	}
	if !rep.StaticPods[0].RolledBack {
		t.Fatalf("result %+v", rep.StaticPods[0])
	}
	if img := imageOf(t, fx.m.Path); img != oldImage {
		t.Fatalf("manifest names %s after an interrupted hand-over", img)
	}
	if j, _ := fx.m.InProgress(); j != nil {
		t.Fatalf("journal left although the old pod runs again: %v", err)
	}
	if got := fx.node.running("kube-apiserver"); got != oldImage {
		t.Fatalf("the node runs %q", got)
	}
}

// TestPutBackWaitsOutACrash: the old image put back after an
// interrupted hand-over crashes once (the stopping container still held
// its port) and the kubelet restarts it: the put-back waits for it rather
// than failing, and the journal goes.
func TestPutBackWaitsOutACrash(t *testing.T) {
	fx := newSwapFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx.node.onStop = func(string) {
		fx.node.mu.Lock()
		fx.node.crashOnce[digest.Of(oldImage)] = true
		fx.node.mu.Unlock()
		cancel()
	}
	_, err := fx.run(t, ctx, Options{Components: []string{"apiserver"}}, phase.Options{})
	if !errors.Is(err, ErrPutBack) || strings.Contains(err.Error(), "exited with code") {
		t.Fatalf("err = %v, want ErrPutBack and the old pod back", err)
	}
	if fx.node.crashOnce[digest.Of(oldImage)] {
		t.Fatal("the put-back container never crashed: the test checked nothing")
	}
	if j, _ := fx.m.InProgress(); j != nil {
		t.Fatal("journal left although the old pod runs again")
	}
	if got := fx.node.running("kube-apiserver"); got != oldImage {
		t.Fatalf("the node runs %q", got)
	}
}

// TestHandOverStopsARestartedContainer: a container the kubelet restarts
// after the swap stopped the old one is stopped too, and the hand-over
// ends once the kubelet has let go of the pod: after a relist, well
// before the kubelet's back-off.
func TestHandOverStopsARestartedContainer(t *testing.T) {
	fx := newSwapFixture(t)
	n := fx.node.Target()
	if _, err := fx.m.Begin("kube-apiserver", fx.pushed); err != nil {
		t.Fatal(err)
	}
	fx.node.mu.Lock()
	fx.node.restartOnce = true
	fx.node.mu.Unlock()
	before, err := n.observe(context.Background(), "kube-apiserver", "kube-apiserver", "", true)
	if err != nil || before.containerID == "" {
		t.Fatalf("observe: %+v, %v", before, err)
	}
	t0 := time.Now()
	n.handover(context.Background(), fx.m, "kube-apiserver", before)()
	took := time.Since(t0)
	if _, err := os.Stat(fx.m.Path); !os.IsNotExist(err) {
		t.Fatalf("the manifest is still in the manifests dir (%v)", err)
	}
	if stopped := fx.node.stoppedIDs(); len(stopped) != 2 || stopped[0] != before.containerID {
		t.Fatalf("stopped %v, want the old container %s and the restarted one", stopped, before.containerID)
	}
	if took < relistWait || took >= KubeletBackoff {
		t.Fatalf("the hand-over took %s: want the release after a relist (%s), before the back-off (%s)", took, relistWait, KubeletBackoff)
	}
}

// TestHandOverReleasesOnThePodCgroup: with the old pod's cgroup known,
// the hand-over ends once the kubelet removed it (before a whole relist
// would have passed), and the kubelet never sees the new manifest while
// the old pod still had it (the real one would back off 10-15 s).
func TestHandOverReleasesOnThePodCgroup(t *testing.T) {
	fx := newSwapFixture(t)
	const delay = 200 * time.Millisecond
	fx.node.mu.Lock()
	fx.node.cgroupDelay = delay
	fx.node.mu.Unlock()
	// The running pod gets its cgroup: restart it under the new rule.
	fx.node.mu.Lock()
	for _, sb := range fx.node.sandboxes {
		if sb.Ready {
			if err := os.MkdirAll(fx.node.cgroupPath(sb.PodUID), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	fx.node.mu.Unlock()
	var log syncbuf.Buffer
	fx.node.reporter = progress.New(&log, progress.Options{Mode: progress.Plain, Verbose: true})
	rep, err := fx.run(t, context.Background(), Options{Components: []string{"apiserver"}}, phase.Options{})
	if err != nil {
		t.Fatalf("swap: %v\n%s", err, log.String())
	}
	fx.node.mu.Lock()
	early := fx.node.early
	fx.node.mu.Unlock()
	if len(early) != 0 {
		t.Errorf("the new manifest came while the old pod still had its cgroup (pods %v)", early)
	}
	if !strings.Contains(log.String(), "released the old pod in") || !strings.Contains(log.String(), "(its cgroup removed)") {
		t.Errorf("the release was not the cgroup's:\n%s", log.String())
	}
	if got := fx.node.running("kube-apiserver"); got != fx.pushed {
		t.Errorf("the node runs %q, want %q", got, fx.pushed)
	}
	r := rep.StaticPods[0]
	if r.Started <= 0 || r.Started > r.Ready {
		t.Errorf("started %s, ready %s: want the new container's start, before ready", r.Started, r.Ready)
	}
}

func TestSwapPhasesRefuseToSkipWhatOthersNeed(t *testing.T) {
	fx := newSwapFixture(t)
	_, err := fx.run(t, context.Background(), Options{Components: []string{"apiserver"}}, phase.Options{Skip: []string{"apiserver/backup"}})
	if err == nil || !strings.Contains(err.Error(), "apiserver/write needs apiserver/backup") {
		t.Fatalf("err = %v", err)
	}
	if img := imageOf(t, fx.m.Path); img != oldImage {
		t.Fatal("a refused run changed the manifest")
	}
}

func TestSwapPlan(t *testing.T) {
	fx := newSwapFixture(t)
	var plan strings.Builder
	before, _ := os.ReadFile(fx.m.Path)
	o := Options{Components: []string{"apiserver"}, TreeDir: fx.tree, Node: layout.Node{ManifestsDir: fx.node.dir, Kubeconfig: "k", CRISocket: "s"}}
	if _, err := Run(context.Background(), o, phase.Options{DryRun: true, PlanOut: &plan}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"apiserver/hand-over", "writes " + fx.m.Path + " -> " + filepath.Join(fx.m.WorkDir, "kube-apiserver.yaml.vacated"),
		"writes " + fx.m.JournalPath(), "reads  " + fx.pushed, "needs  apiserver/backup",
	} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, plan.String())
		}
	}
	// The pods not selected are listed without what they would touch.
	if strings.Contains(plan.String(), "kube-scheduler.yaml") {
		t.Errorf("plan names the scheduler's files:\n%s", plan.String())
	}
	if after, _ := os.ReadFile(fx.m.Path); !bytes.Equal(before, after) || len(fx.node.pulledRefs()) > 0 {
		t.Fatal("a dry run changed something")
	}
}

// TestLockScope: on a devk cluster a kubelet swap (it restarts the
// kubelet of each node it lists) takes the cluster's lock and every
// node's; a static pod's swap takes its node's only, so a swap on
// another node still runs. Real flock.
func TestLockScope(t *testing.T) {
	cluster := t.TempDir()
	n0, n1 := filepath.Join(cluster, "manifests"), filepath.Join(cluster, "nodes", "w", "manifests")
	for _, tc := range []struct {
		comp      string
		otherFree bool
	}{{"kubelet", false}, {"scheduler", true}} {
		comps, _, err := selectComponents([]string{tc.comp})
		if err != nil {
			t.Fatal(err)
		}
		j := &Job{Options: Options{Node: layout.Node{ManifestsDir: n0}, ClusterDir: cluster, ClusterNodes: []string{n0, n1},
			Kubelets: []KubeletNode{{Node: "c-control-plane"}, {Node: "w"}}}, comps: comps}
		if err := j.lockNode(); err != nil {
			t.Fatal(err)
		}
		if _, err := nodelock.Acquire(n0, "devk swap"); !errors.Is(err, nodelock.ErrBusy) {
			t.Errorf("swap %s: node 0 not locked: %v", tc.comp, err)
		}
		l, err := nodelock.Acquire(n1, "devk swap kubelet --node w")
		if tc.otherFree != (err == nil) {
			t.Errorf("swap %s: the other node's lock: %v, want free %v", tc.comp, err, tc.otherFree)
		}
		l.Release()
		j.Close(context.Background(), nil)
		if s, err := nodelock.AcquireCluster(cluster, []string{n0, n1}, "devk up"); err != nil {
			t.Errorf("swap %s: after Close: %v", tc.comp, err)
		} else {
			s.Release()
		}
	}
}

// TestSwapWithStateSent: a swap given the tree's state (as devk's node
// agent is, by its client) reads no tree, and one whose registry the
// client checked skips that phase, saying so; it swaps and verifies as
// any other.
func TestSwapWithStateSent(t *testing.T) {
	fx := newSwapFixture(t)
	st, err := build.LoadState(fx.tree)
	if err != nil {
		t.Fatal(err)
	}
	var skipped string
	rep := &skipRecorder{Reporter: progress.Discard(), skip: map[string]string{}}
	o := Options{Components: []string{"apiserver"}, State: st, RegistryChecked: true,
		Node: layout.Node{ManifestsDir: fx.node.dir, InCluster: true, CRISocket: "unused"}, Timeout: 10 * time.Second, TreeDir: filepath.Join(t.TempDir(), "no-tree")}
	j, err := NewJob(o)
	if err != nil {
		t.Fatalf("a job with its state sent read the tree: %v", err)
	}
	j.target = fx.node.Target()
	_, err = phase.Run(context.Background(), Phases(), j, phase.Options{Reporter: rep})
	if err = j.Close(context.Background(), err); err != nil {
		t.Fatal(err)
	}
	skipped = rep.skip["registry"]
	if skipped != "checked by devk's client before any node changed" {
		t.Errorf("registry phase: skipped %q", skipped)
	}
	if r := j.Report.StaticPods; len(r) != 1 || r[0].NewImage != fx.pushed || len(failedChecks(r[0])) > 0 {
		t.Fatalf("report %+v", r)
	}
	if j.statePath() != "the tree's state.json, sent by the client" {
		t.Errorf("state path %q", j.statePath())
	}
}

// skipRecorder keeps the reasons of skipped steps.
type skipRecorder struct {
	progress.Reporter
	skip map[string]string
}

func (s *skipRecorder) Skip(step, reason string) { s.skip[step] = reason }

// TestEtcdHandOverStopsTheAPIServer: handing etcd over stops the node's
// API server too (without it the kubelet's housekeeping hangs on the
// orphaned mirror pod's deletion, see stopAPIServer); handing the API
// server over stops nothing else.
func TestEtcdHandOverStopsTheAPIServer(t *testing.T) {
	fx := newSwapFixture(t)
	n := fx.node.Target()
	etcd := ManifestFor(fx.node.dir, "etcd")
	data := strings.ReplaceAll(apiserverManifest, "kube-apiserver", "etcd")
	if err := os.WriteFile(etcd.Path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(etcd.Path, long, long); err != nil {
		t.Fatal(err)
	}
	fx.node.mu.Lock()
	fx.node.pods = append(fx.node.pods, "etcd")
	fx.node.mu.Unlock()
	fx.node.sync()
	api, err := n.observe(context.Background(), "kube-apiserver", "kube-apiserver", "", true)
	if err != nil || api.containerID == "" {
		t.Fatalf("observe kube-apiserver: %+v, %v", api, err)
	}
	before, err := n.observe(context.Background(), "etcd", "etcd", "", true)
	if err != nil || before.containerID == "" {
		t.Fatalf("observe etcd: %+v, %v", before, err)
	}
	if _, err := etcd.Begin("etcd", fx.pushed); err != nil {
		t.Fatal(err)
	}
	n.handover(context.Background(), etcd, "etcd", before)()
	stopped := fx.node.stoppedIDs()
	if !slices.Contains(stopped, before.containerID) || !slices.Contains(stopped, api.containerID) {
		t.Fatalf("stopped %v, want etcd's container %s and the API server's %s", stopped, before.containerID, api.containerID)
	}
}
