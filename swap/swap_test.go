package swap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/internal/staticpod"
)

const apiserverManifest = `apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-apiserver
    tier: control-plane
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-apiserver
    - --advertise-address=127.0.0.1
    image: localhost:5000/kube-apiserver@sha256:1111111111111111111111111111111111111111111111111111111111111111
    name: kube-apiserver
  hostNetwork: true
`

func writeManifest(t *testing.T) Manifest {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := ManifestFor(dir, "kube-apiserver")
	if err := os.WriteFile(m.Path, []byte(apiserverManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return m
}

const newImage = "localhost:5000/kube-apiserver@sha256:2222222222222222222222222222222222222222222222222222222222222222"

func TestSetImageAndRestore(t *testing.T) {
	m := writeManifest(t)
	old, err := setImage(context.Background(), m, "kube-apiserver", newImage, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(old, "@sha256:1111111111111111111111111111111111111111111111111111111111111111") {
		t.Fatalf("old = %s", old)
	}
	pod, _, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != newImage || len(c.Command) != 2 || !pod.Spec.HostNetwork || pod.Labels["tier"] != "control-plane" {
		t.Fatalf("the new manifest lost or missed something:\n%+v", pod)
	}
	first := pod.Annotations[staticpod.WrittenAnnotation]
	if first == "" {
		t.Fatal("no written stamp: swapping back would reuse a terminated pod UID")
	}
	// Nothing but the manifest is ever in the manifests dir.
	entries, _ := os.ReadDir(filepath.Dir(m.Path))
	if len(entries) != 1 {
		t.Fatalf("manifests dir holds %d files", len(entries))
	}
	if filepath.Dir(m.WorkDir) == filepath.Dir(m.Path) || strings.HasPrefix(m.WorkDir, filepath.Dir(m.Path)+"/") {
		t.Fatalf("work dir %s is inside the manifests dir", m.WorkDir)
	}
	j, err := m.InProgress()
	if err != nil || j == nil || j.OldImage != old || j.NewImage != newImage {
		t.Fatalf("journal = %+v, %v", j, err)
	}
	if fi, _ := os.Stat(m.Path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("manifest mode %v", fi.Mode())
	}

	img, err := m.Restore("kube-apiserver", nil)
	if err != nil || img != old {
		t.Fatalf("restore = %s, %v", img, err)
	}
	pod, _, err = m.Read()
	if err != nil || pod.Spec.Containers[0].Image != old || len(pod.Spec.Containers[0].Command) != 2 {
		t.Fatalf("restore did not bring the old manifest back: %+v, %v", pod, err)
	}
	// The same image as before, yet a new pod UID for the kubelet.
	if stamp := pod.Annotations[staticpod.WrittenAnnotation]; stamp == "" || stamp == first {
		t.Fatalf("restored manifest stamp %q (swap wrote %q): want a new one", stamp, first)
	}
	// The journal stays until the caller has seen the old pod run again.
	if j, _ := m.InProgress(); j == nil {
		t.Fatal("restore removed the journal before the old pod was back")
	}
	if err := m.Discard(); err != nil {
		t.Fatal(err)
	}
	if j, _ := m.InProgress(); j != nil {
		t.Fatal("journal left after discard")
	}
}

const thirdImage = "localhost:5000/kube-apiserver@sha256:3333333333333333333333333333333333333333333333333333333333333333"

func imageOf(t *testing.T, path string) string {
	t.Helper()
	pod, _, err := Manifest{Path: path}.Read()
	if err != nil {
		t.Fatal(err)
	}
	return pod.Spec.Containers[0].Image
}

// TestInterruptedSwapKeepsHistory: a swap that never finishes (killed at
// any step after its backup) must not cost the backup of the last
// finished swap, and undoing it restores exactly what it replaced.
func TestInterruptedSwapKeepsHistory(t *testing.T) {
	ctx := context.Background()
	m := writeManifest(t)
	first := imageOf(t, m.Path)
	if _, err := setImage(ctx, m, "kube-apiserver", newImage, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	if got := imageOf(t, m.BackupPath()); got != first {
		t.Fatalf("after a finished swap .prev names %s, want %s", got, first)
	}
	if _, err := os.Stat(m.PendingPath()); !os.IsNotExist(err) {
		t.Fatalf("pending backup left after Finish: %v", err)
	}
	// A second swap, "killed" after its new manifest was written.
	if _, err := setImage(ctx, m, "kube-apiserver", thirdImage, nil); err != nil {
		t.Fatal(err)
	}
	if got := imageOf(t, m.BackupPath()); got != first {
		t.Fatalf("a swap in progress changed .prev to %s", got)
	}
	j, err := m.InProgress()
	if err != nil || j == nil || j.OldImage != newImage || j.NewImage != thirdImage || j.Backup != m.PendingPath() {
		t.Fatalf("journal %+v %v", j, err)
	}
	// Undoing it restores what it replaced, not the older .prev.
	if img, err := m.Restore("kube-apiserver", nil); err != nil || img != newImage {
		t.Fatalf("restore of the interrupted swap = %s, %v; want %s", img, err, newImage)
	}
	if err := m.Discard(); err != nil {
		t.Fatal(err)
	}
	if got := imageOf(t, m.BackupPath()); got != first {
		t.Fatalf("after undoing an interrupted swap .prev names %s, want %s", got, first)
	}
	// A kill between Finish's two steps: .prev is new, the journal still
	// there; a restore then uses .prev.
	if _, err := setImage(ctx, m, "kube-apiserver", thirdImage, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.PendingPath(), m.BackupPath()); err != nil {
		t.Fatal(err)
	}
	if img, err := m.Restore("kube-apiserver", nil); err != nil || img != newImage {
		t.Fatalf("restore between Finish's steps = %s, %v", img, err)
	}
}

// TestCanceledHandoverPutsTheOldManifestBack: Ctrl-C during the hand-over
// (the manifest moved out, the kubelet letting go of the pod) restores the
// old manifest at once instead of writing the new one.
func TestCanceledHandoverPutsTheOldManifestBack(t *testing.T) {
	m := writeManifest(t)
	old := imageOf(t, m.Path)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := setImage(ctx, m, "kube-apiserver", newImage, func() {
		if err := m.Vacate(); err != nil {
			t.Fatal(err)
		}
		cancel()
	})
	if !errors.Is(err, ErrPutBack) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrPutBack wrapping the cancel", err)
	}
	if got := imageOf(t, m.Path); got != old {
		t.Fatalf("manifest names %s after a canceled hand-over, want %s", got, old)
	}
	if j, _ := m.InProgress(); j == nil {
		t.Fatal("the journal went before the old pod was seen running again")
	}
}

func TestSetImageErrors(t *testing.T) {
	m := writeManifest(t)
	if _, err := setImage(context.Background(), m, "etcd", newImage, nil); err != nil {
		t.Fatalf("the only container should be chosen: %v", err)
	}
	missing := ManifestFor(t.TempDir(), "kube-scheduler")
	if _, err := setImage(context.Background(), missing, "kube-scheduler", newImage, nil); err == nil || !strings.Contains(err.Error(), "devk up") {
		t.Fatalf("missing manifest: %v", err)
	}
	bad := writeManifest(t)
	os.WriteFile(bad.Path, []byte("kind: ConfigMap\n"), 0o600)
	if _, err := setImage(context.Background(), bad, "x", newImage, nil); err == nil || !strings.Contains(err.Error(), "not a static Pod") {
		t.Fatalf("configmap: %v", err)
	}
	if data, _ := os.ReadFile(bad.Path); string(data) != "kind: ConfigMap\n" {
		t.Fatal("a refused swap changed the file")
	}
	if _, err := writeManifest(t).Restore("kube-apiserver", nil); !errors.Is(err, ErrNoBackup) {
		t.Fatalf("restore without backup: %v", err)
	}
}

// setImage is a swap's manifest steps on m in one call, for the tests of
// the manifest steps: Begin, then handover (when not nil; see Vacate),
// then WriteImage. If ctx is canceled during the hand-over, or the new
// manifest cannot be written, the old one is put back at once and the
// error wraps ErrPutBack. It returns the image it replaced.
func setImage(ctx context.Context, m Manifest, container, image string, handover func()) (string, error) {
	old, err := m.Begin(container, image)
	if err != nil {
		return "", err
	}
	if ctx.Err() != nil {
		// Interrupted before the node was touched: nothing to undo.
		return old, errors.Join(context.Cause(ctx), m.Discard())
	}
	if handover != nil {
		handover()
	}
	if ctx.Err() != nil {
		return old, m.putBack(container, fmt.Errorf("interrupted during the hand-over: %w", context.Cause(ctx)))
	}
	if err := m.WriteImage(container, image); err != nil {
		return old, m.putBack(container, err)
	}
	return old, nil
}
