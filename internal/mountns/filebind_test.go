package mountns

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/execx"
)

// TestFileBinds binds files over the host's in a real mount namespace
// (root only): inside, the host's file is the source (through a link, as
// a node's systemctl is devk through its bin dir's link); the host's file
// is unchanged; a path the host lacks is made nowhere; two names of one
// file are bound once; the link pointed at a new file is followed by the
// next Ensure, the earlier bind unmounted rather than piled up.
func TestFileBinds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a mount namespace")
	}
	ctx := context.Background()
	home := t.TempDir()
	tag := "devk-filebind-test-" + strconv.Itoa(os.Getpid())
	hostDir := filepath.Join(t.TempDir(), "usr-bin")
	target := filepath.Join(hostDir, "systemctl")
	write(t, target, "host's\n")
	// /bin -> usr/bin, as a merged /usr has it.
	linkDir := filepath.Join(filepath.Dir(hostDir), "bin")
	if err := os.Symlink("usr-bin", linkDir); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(hostDir, "absent")
	one, two := filepath.Join(home, "bin", "one"), filepath.Join(home, "bin", "two")
	write(t, one, "one\n")
	write(t, two, "two\n")
	link := filepath.Join(home, "bin", "systemctl")
	if err := os.Symlink(one, link); err != nil {
		t.Fatal(err)
	}
	s := Spec{File: filepath.Join(home, "mntns", "mnt"), Covers: []string{"/run"},
		Binds: []Bind{{Path: "/run/" + tag, Dir: filepath.Join(home, "fs", "run")}},
		Files: []FileBind{{Path: target, Source: link}, {Path: filepath.Join(linkDir, "systemctl"), Source: link}, {Path: absent, Source: link}}}
	t.Cleanup(func() {
		if _, err := Remove(ctx, s, time.Second); err != nil {
			t.Error(err)
		}
	})
	if changed, err := Ensure(ctx, s); err != nil || !changed {
		t.Fatalf("Ensure = %v, %v; want a new namespace", changed, err)
	}
	inside := func(path string) string {
		t.Helper()
		a := Enter(s.File, "", "cat", path)
		out, err := execx.Output(ctx, execx.Cmd{Name: a[0], Args: a[1:]})
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	binds := func() int {
		t.Helper()
		ms, err := Mounts(ctx, s.File)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range ms {
			if m.Point == target {
				n++
			}
		}
		return n
	}
	if got := inside(target); got != "one\n" {
		t.Errorf("inside, %s is %q; want the source's", target, got)
	}
	if got := inside(filepath.Join(linkDir, "systemctl")); got != "one\n" {
		t.Errorf("inside, the other name of %s is %q; want the source's", target, got)
	}
	if n := binds(); n != 1 {
		t.Errorf("%d mounts at %s; want one for its two names", n, target)
	}
	if data, _ := os.ReadFile(target); string(data) != "host's\n" {
		t.Errorf("the host's %s is %q now", target, data)
	}
	if host, _ := Host(); len(Under(host, hostDir)) > 0 {
		t.Errorf("the bind is on the host: %v", Under(host, hostDir))
	}
	if _, err := os.Lstat(absent); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s, which the host lacks, exists: %v", absent, err)
	}
	a := Enter(s.File, "", "test", "-e", absent)
	if err := execx.Run(ctx, execx.Cmd{Name: a[0], Args: a[1:]}); err == nil {
		t.Errorf("%s, which the host lacks, exists inside", absent)
	}
	if changed, err := Ensure(ctx, s); err != nil || changed {
		t.Errorf("Ensure again = %v, %v; want nothing to do", changed, err)
	}

	// The link now names another file (devk rebuilt elsewhere): bound
	// instead of the first, not on top of it.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(two, link); err != nil {
		t.Fatal(err)
	}
	if changed, err := Ensure(ctx, s); err != nil || !changed {
		t.Fatalf("Ensure after the link changed = %v, %v; want the new file bound", changed, err)
	}
	if got := inside(target); got != "two\n" {
		t.Errorf("inside, %s is %q after the link changed; want %q", target, got, "two\n")
	}
	if n := binds(); n != 1 {
		t.Errorf("%d mounts at %s after the link changed; want 1 (the earlier one unmounted)", n, target)
	}

	// A source that is gone is an error naming it.
	if err := os.Remove(two); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureFiles(ctx, s); err == nil || !strings.Contains(err.Error(), link) {
		t.Errorf("EnsureFiles with the source gone = %v; want an error naming %s", err, link)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}
