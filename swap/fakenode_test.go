package swap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
)

// fakeNode is a kubelet and its container runtime in miniature, as far
// as a swap sees them: it runs the static pods of a manifests dir (a pod
// per manifest content, named <pod>-<node>, with a sandbox and a
// container), stops a pod whose manifest goes or changes before it
// starts the next, and writes each pod's mirror pod. It stands in for
// containerd and a kubelet, which need root and a cluster: the e2e suite
// (e2e/swap_test.go, e2e/killpoints_test.go) runs the swap against the
// real ones.
type fakeNode struct {
	t        *testing.T
	dir      string
	node     string
	pods     []string // the static pods it runs
	client   *fake.Clientset
	logDir   string
	interval time.Duration

	mu         sync.Mutex
	sandboxes  []cri.Sandbox
	containers []*cri.Status
	nextID     int
	pulled     []string
	stopped    []string
	// broken digests make containers that exit at once with code 1.
	broken map[string]bool
	// crashOnce digests make one container that exits at once with code
	// 1 (a port the stopping container still holds), which the fake
	// kubelet restarts, as the real one does after its back-off.
	crashOnce map[string]bool
	// onStop, when set, runs (unlocked) after each StopContainer.
	onStop func(id string)
	// restartOnce restarts the first stopped container in its sandbox,
	// as a sync the kubelet had queued would. The fake kubelet leaves
	// that container running (lingering): the real one kills it only
	// after the pod's grace period (30 s for the apiserver), so the swap
	// must stop it itself.
	restartOnce bool
	lingering   map[string]bool
	// grace is the stop grace the swap must give (Options.StopGrace).
	grace time.Duration
	// cgroupDelay, when set, gives each pod a cgroup (a directory under
	// cgroupDir, PodCgroup's answer) that the fake kubelet removes that
	// long after the pod's sandbox stopped, as the real one does after a
	// relist; like the real one it starts no pod of the same name before.
	cgroupDelay time.Duration
	cgroupDir   string
	terminated  map[string]cgroupEnd // pod UID → its end, while its cgroup stays
	// reporter, when set, is the Target's.
	reporter progress.Reporter
	// early are the pods whose manifest came while an old pod of the
	// name still had its cgroup: the real kubelet backs off 10-15 s.
	early []string
}

// cgroupEnd is a terminated pod's: its full name and when its sandbox
// stopped.
type cgroupEnd struct {
	full string
	at   time.Time
}

func newFakeNode(t *testing.T, dir, node string, pods ...string) *fakeNode {
	f := &fakeNode{t: t, dir: dir, node: node, pods: pods, client: fake.NewClientset(), logDir: t.TempDir(),
		interval: 10 * time.Millisecond, broken: map[string]bool{}, crashOnce: map[string]bool{}, lingering: map[string]bool{},
		cgroupDir: t.TempDir(), terminated: map[string]cgroupEnd{}}
	f.sync()
	// The pods it found ran long before the test.
	for _, c := range f.containers {
		c.CreatedAt = c.CreatedAt.Add(-time.Hour)
	}
	for i := range f.sandboxes {
		f.sandboxes[i].CreatedAt = f.sandboxes[i].CreatedAt.Add(-time.Hour)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			time.Sleep(f.interval)
			f.sync()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// Target is a swap Target on the fake.
func (f *fakeNode) Target() *Target {
	r := f.reporter
	if r == nil {
		r = progress.Discard()
	}
	return &Target{ManifestsDir: f.dir, NodeName: f.node, Client: f.client, Runtime: f, Reporter: r, Timeout: 10 * time.Second, LogLines: DefaultLogLines}
}

// sync is one pass of the fake kubelet over the manifests dir.
func (f *fakeNode) sync() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for uid, end := range f.terminated {
		if time.Since(end.at) >= f.cgroupDelay {
			if err := os.Remove(f.cgroupPath(uid)); err != nil && !os.IsNotExist(err) {
				f.t.Errorf("fake kubelet: %v", err)
			}
			delete(f.terminated, uid)
		}
	}
	for _, name := range f.pods {
		full := name + "-" + f.node
		data, err := os.ReadFile(filepath.Join(f.dir, name+".yaml"))
		running := f.readySandbox(full)
		if err != nil {
			if running != nil {
				f.terminate(running)
				_ = f.client.CoreV1().Pods(metav1.NamespaceSystem).Delete(context.Background(), full, metav1.DeleteOptions{})
			}
			continue
		}
		sum := sha256.Sum256(data)
		uid := hex.EncodeToString(sum[:8])
		switch {
		case running != nil && running.PodUID == uid:
			if c := f.newest(uid); c != nil && c.ExitCode != 0 && !f.broken[digest.Of(c.ImageRef)] {
				f.newContainer(full, uid, name, c.ImageRef)
			}
			continue
		case running != nil:
			f.terminate(running) // the old pod goes first; the new one starts on the next pass
			continue
		}
		if f.stillEnding(full) {
			if !slices.Contains(f.early, uid) {
				f.early = append(f.early, uid)
			}
			continue
		}
		img, err := staticpod.Image(filepath.Join(f.dir, name+".yaml"), name)
		if err != nil {
			f.t.Errorf("fake kubelet: %v", err)
			continue
		}
		f.start(full, uid, name, img)
	}
}

func (f *fakeNode) readySandbox(full string) *cri.Sandbox {
	for i := range f.sandboxes {
		if f.sandboxes[i].PodName == full && f.sandboxes[i].Ready {
			return &f.sandboxes[i]
		}
	}
	return nil
}

func (f *fakeNode) terminate(sb *cri.Sandbox) {
	for _, c := range f.containers {
		if c.PodUID == sb.PodUID && c.Running() && !f.lingering[c.ID] {
			c.State, c.ExitCode = runtimeapi.ContainerState_CONTAINER_EXITED, 0
		}
	}
	sb.Ready = false
	if f.cgroupDelay > 0 {
		f.terminated[sb.PodUID] = cgroupEnd{full: sb.PodName, at: time.Now()}
	}
}

// stillEnding says an old pod of the full name still has its cgroup.
func (f *fakeNode) stillEnding(full string) bool {
	for _, end := range f.terminated {
		if end.full == full {
			return true
		}
	}
	return false
}

func (f *fakeNode) cgroupPath(uid string) string { return filepath.Join(f.cgroupDir, "pod"+uid) }

func (f *fakeNode) newContainer(full, uid, name, img string) *cri.Status {
	f.nextID++
	c := &cri.Status{Container: cri.Container{ID: fmt.Sprintf("c%063d", f.nextID), Name: name, PodName: full, PodNamespace: metav1.NamespaceSystem,
		PodUID: uid, State: runtimeapi.ContainerState_CONTAINER_RUNNING, ImageRef: img, CreatedAt: time.Now()}, StartedAt: time.Now()}
	if f.broken[digest.Of(img)] || f.crashOnce[digest.Of(img)] {
		delete(f.crashOnce, digest.Of(img))
		c.State, c.ExitCode, c.Reason = runtimeapi.ContainerState_CONTAINER_EXITED, 1, "Error"
		c.LogPath = filepath.Join(f.logDir, c.ID+".log")
		line := time.Now().Format(time.RFC3339Nano) + " stderr F devk test: this apiserver refuses to start\n"
		if err := os.WriteFile(c.LogPath, []byte(line), 0o600); err != nil {
			f.t.Error(err)
		}
	}
	f.containers = append(f.containers, c)
	return c
}

// newest is the pod's newest container.
func (f *fakeNode) newest(uid string) *cri.Status {
	for i := len(f.containers) - 1; i >= 0; i-- {
		if f.containers[i].PodUID == uid {
			return f.containers[i]
		}
	}
	return nil
}

func (f *fakeNode) start(full, uid, name, img string) {
	f.sandboxes = append(f.sandboxes, cri.Sandbox{ID: "sb-" + uid, PodName: full, PodUID: uid, Ready: true, Static: true, CreatedAt: time.Now()})
	if f.cgroupDelay > 0 {
		if err := os.MkdirAll(f.cgroupPath(uid), 0o755); err != nil {
			f.t.Errorf("fake kubelet: %v", err)
		}
	}
	c := f.newContainer(full, uid, name, img)
	mp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: full, Namespace: metav1.NamespaceSystem,
		Annotations: map[string]string{corev1.MirrorPodAnnotationKey: uid, digest.ConfigHashAnnotation: uid}}}
	if c.Running() {
		mp.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: name, ImageID: img, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	pods := f.client.CoreV1().Pods(metav1.NamespaceSystem)
	_ = pods.Delete(context.Background(), full, metav1.DeleteOptions{})
	if _, err := pods.Create(context.Background(), mp, metav1.CreateOptions{}); err != nil {
		f.t.Errorf("fake kubelet: mirror pod: %v", err)
	}
}

// The CRI side (swap.Runtime).

func (f *fakeNode) Version(context.Context) (string, error) { return "fake 0", nil }

func (f *fakeNode) Containers(ctx context.Context, fl cri.Filter) ([]cri.Container, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cri.Container
	for _, c := range f.containers {
		if (fl.PodName == "" || c.PodName == fl.PodName) && (fl.Container == "" || c.Name == fl.Container) && (!fl.RunningOnly || c.Running()) {
			out = append(out, c.Container)
		}
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].CreatedAt.After(out[k].CreatedAt) })
	return out, nil
}

func (f *fakeNode) ContainerStatus(ctx context.Context, id string) (*cri.Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.ID == id {
			cp := *c
			return &cp, nil
		}
	}
	return nil, fmt.Errorf("no container %s", id)
}

func (f *fakeNode) Sandboxes(ctx context.Context, namespace string) ([]cri.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]cri.Sandbox(nil), f.sandboxes...)
	sort.SliceStable(out, func(i, k int) bool { return out[i].CreatedAt.After(out[k].CreatedAt) })
	return out, nil
}

func (f *fakeNode) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if grace != f.grace {
		f.t.Errorf("container %s stopped with a grace period of %s, want %s (a swap stops without grace unless told)", id, grace, f.grace)
	}
	f.mu.Lock()
	for _, c := range f.containers {
		if c.ID == id && c.Running() {
			c.State, c.ExitCode = runtimeapi.ContainerState_CONTAINER_EXITED, 137
			f.stopped = append(f.stopped, id)
			if f.restartOnce {
				f.restartOnce = false
				f.lingering[f.newContainer(c.PodName, c.PodUID, c.Name, c.ImageRef).ID] = true
			}
		}
	}
	onStop := f.onStop
	f.mu.Unlock()
	if onStop != nil {
		onStop(id)
	}
	return nil
}

// PodCgroup is the pod's cgroup when the fake gives pods one.
func (f *fakeNode) PodCgroup(_ context.Context, id, podUID string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cgroupDelay == 0 {
		return "", fmt.Errorf("no process of container %s is visible", id)
	}
	p := f.cgroupPath(podUID)
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// ImageDigest: the fake's images are all named by digest.
func (f *fakeNode) ImageDigest(_ context.Context, ref string) (string, error) {
	return digest.Of(ref), nil
}

func (f *fakeNode) PullImage(ctx context.Context, ref string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulled = append(f.pulled, ref)
	return digest.Of(ref), nil
}

// running is the image of the pod's running container, "" if none.
func (f *fakeNode) running(pod string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.containers) - 1; i >= 0; i-- {
		if c := f.containers[i]; c.PodName == pod+"-"+f.node && c.Running() {
			return c.ImageRef
		}
	}
	return ""
}

func (f *fakeNode) stoppedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.stopped...)
}

func (f *fakeNode) pulledRefs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.pulled, " ")
}
