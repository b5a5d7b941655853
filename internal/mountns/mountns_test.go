package mountns

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/execx"
)

// TestNamespace makes a real mount namespace (root only): the bound
// paths exist inside, as the node's directories, and nowhere on the
// host; a second Ensure does nothing; one whose making was cut short
// (no marker) is made again; a shared mount left private by a kill
// between its two steps is mended; Remove leaves no mount.
func TestNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a mount namespace")
	}
	ctx := context.Background()
	home := t.TempDir()
	tag := "devk-mountns-test-" + strconv.Itoa(os.Getpid())
	s := Spec{File: filepath.Join(home, "mntns", "mnt"), Covers: []string{"/var/lib", "/run"},
		Binds: []Bind{{Path: "/var/lib/" + tag + "/deep", Dir: filepath.Join(home, "fs", "lib")}, {Path: "/run/" + tag, Dir: filepath.Join(home, "fs", "run")}}}
	t.Cleanup(func() {
		if _, err := Remove(ctx, s, time.Second); err != nil {
			t.Error(err)
		}
	})
	changed, err := Ensure(ctx, s)
	if err != nil || !changed {
		t.Fatalf("Ensure = %v, %v; want a new namespace", changed, err)
	}
	// A file made inside is the node's, seen from the host.
	if err := Run(ctx, s.File, "touch", "/var/lib/"+tag+"/deep/sock", "/run/"+tag+"/s"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(home, "fs", "lib", "sock"), filepath.Join(home, "fs", "run", "s")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("made inside, not at %s on the host: %v", p, err)
		}
	}
	for _, p := range []string{"/var/lib/" + tag, "/run/" + tag} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists on the host: %v", p, err)
		}
	}
	if changed, err := Ensure(ctx, s); err != nil || changed {
		t.Errorf("Ensure again = %v, %v; want nothing to do", changed, err)
	}
	// Killed before the marker: made again.
	os.Remove(s.marker())
	if changed, err := Ensure(ctx, s); err != nil || !changed {
		t.Errorf("Ensure without a marker = %v, %v; want a new namespace", changed, err)
	}
	if _, err := os.Stat(filepath.Join(home, "fs", "lib", "sock")); err != nil {
		t.Errorf("the node's files are gone with its namespace: %v", err)
	}
	if changed, err := Ensure(ctx, s); err != nil || changed {
		t.Errorf("Ensure after making it again = %v, %v; want nothing to do", changed, err)
	}
	// Made for another Spec (a devk that binds one path more): made again,
	// with that path bound.
	more := s
	more.Binds = append(slices.Clip(s.Binds), Bind{Path: "/run/" + tag + "-more", Dir: filepath.Join(home, "fs", "more")})
	if changed, err := Ensure(ctx, more); err != nil || !changed {
		t.Errorf("Ensure for another Spec = %v, %v; want a new namespace", changed, err)
	}
	if err := Run(ctx, s.File, "touch", "/run/"+tag+"-more/m"); err != nil {
		t.Error(err)
	} else if _, err := os.Stat(filepath.Join(home, "fs", "more", "m")); err != nil {
		t.Errorf("the other Spec's bind is not in place: %v", err)
	}
	if changed, err := Ensure(ctx, s); err != nil || !changed {
		t.Errorf("Ensure for the first Spec again = %v, %v; want a new namespace", changed, err)
	}

	// A network namespace's file the host removed between the listing and
	// the unmount (another node going down): not an error.
	if err := s.dropNamespaceMount(ctx, "/run/netns/"+tag+"-gone"); err != nil {
		t.Errorf("dropping a namespace file already gone: %v", err)
	}

	// The kubelet's root: bound onto itself but left private, as a kill
	// between the bind and MS_SHARED leaves it.
	root := filepath.Join(home, "kubelet")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, s.File, "mount", "--bind", root, root); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, s.File, "mount", "--make-private", root); err != nil {
		t.Fatal(err)
	}
	if changed, err := EnsureShared(ctx, s.File, root); err != nil || !changed {
		t.Fatalf("EnsureShared on a private bind = %v, %v; want it mended", changed, err)
	}
	ms, err := Mounts(ctx, s.File)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := At(ms, root); !ok || !m.Shared() {
		t.Errorf("the kubelet's root is %+v after EnsureShared", m)
	}
	if changed, err := EnsureShared(ctx, s.File, root); err != nil || changed {
		t.Errorf("EnsureShared again = %v, %v; want nothing to do", changed, err)
	}
	host, err := Host()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := At(host, root); ok {
		t.Error("the bind made inside the namespace is on the host")
	}

	// A process inside; Remove stops it and leaves no mount on the host.
	a := Enter(s.File, "", "sleep", "600")
	sleeper := execx.Cmd{Name: a[0], Args: a[1:]}
	go func() { _ = execx.Run(ctx, sleeper) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(Processes(s.File)) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(Processes(s.File)) == 0 {
		t.Fatal("the process started inside is not seen in the namespace")
	}
	if had, err := Remove(ctx, s, time.Second); err != nil || !had {
		t.Fatalf("Remove = %v, %v", had, err)
	}
	host, _ = Host()
	if left := Under(host, home); len(left) > 0 {
		t.Errorf("mounts left under %s: %v", home, left)
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(data), tag) {
		t.Errorf("the host's mounts name %s", tag)
	}
}
