package nodelock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSecondHolderIsRefusedAndNamesTheFirst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	node := t.TempDir()
	l, err := AcquireIn(dir, node, "devk swap apiserver")
	if err != nil {
		t.Fatal(err)
	}
	// Another spelling of the same directory is the same node.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(node, link); err != nil {
		t.Fatal(err)
	}
	for _, spelling := range []string{node, node + "/", link, filepath.Join(node, "..", filepath.Base(node))} {
		_, err := AcquireIn(dir, spelling, "devk down")
		var be *BusyError
		if !errors.As(err, &be) || !errors.Is(err, ErrBusy) {
			t.Fatalf("%s: second acquire: %v, want a BusyError", spelling, err)
		}
		if be.Holder.PID != os.Getpid() || be.Holder.Command != "devk swap apiserver" {
			t.Errorf("%s: holder %+v", spelling, be.Holder)
		}
		if msg := err.Error(); !strings.Contains(msg, "devk swap apiserver (pid ") || !strings.Contains(msg, "since ") {
			t.Errorf("message does not name the holder: %s", msg)
		}
	}
	l.Release()
	l2, err := AcquireIn(dir, link, "devk down")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	defer l2.Release()
	if _, err := os.Stat(l.Path); err != nil {
		t.Errorf("the lock file went away: %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("lock dir mode %v, want 0700", fi.Mode().Perm())
	}
}

func TestDifferentNodesDoNotShareALock(t *testing.T) {
	dir := t.TempDir()
	a, err := AcquireIn(dir, filepath.Join(t.TempDir(), "a", "manifests"), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := AcquireIn(dir, filepath.Join(t.TempDir(), "b", "manifests"), "b")
	if err != nil {
		t.Fatalf("a different node: %v", err)
	}
	b.Release()
}

func TestUnsafeLockDirIsRefused(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	if _, err := AcquireIn(open, t.TempDir(), "x"); err == nil || !strings.Contains(err.Error(), "chmod 0700") {
		t.Errorf("world-writable lock dir: %v", err)
	}
	target := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(target, link)
	if _, err := AcquireIn(link, t.TempDir(), "x"); err == nil {
		t.Error("a symlinked lock dir was accepted")
	}
	// A symlink planted at the lock file's own path is not followed.
	dir := t.TempDir()
	node := t.TempDir()
	key, _ := Key(node)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, FileFor(dir, key))
	if _, err := AcquireIn(dir, node, "x"); err == nil {
		t.Error("a lock file symlink was followed")
	}
	if data, _ := os.ReadFile(victim); string(data) != "keep" {
		t.Errorf("victim changed: %q", data)
	}
}

// TestKilledHolderReleases runs a holder in a child process, kills it
// with SIGKILL and takes the lock at once: the kernel frees flock locks.
func TestKilledHolderReleases(t *testing.T) {
	if os.Getenv("NODELOCK_HOLD") != "" {
		l, err := AcquireIn(os.Getenv("NODELOCK_DIR"), os.Getenv("NODELOCK_HOLD"), "holder")
		if err != nil {
			os.Exit(3)
		}
		_ = l
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	dir, node := t.TempDir(), t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledHolderReleases$")
	cmd.Env = append(os.Environ(), "NODELOCK_HOLD="+node, "NODELOCK_DIR="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("child: %q %v", buf, err)
	}
	_, err := AcquireIn(dir, node, "me")
	var be *BusyError
	if !errors.As(err, &be) || be.Holder.PID != cmd.Process.Pid {
		t.Fatalf("while the child holds it: %v", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	l, err := AcquireIn(dir, node, "me")
	if err != nil {
		t.Fatalf("after kill -9 of the holder: %v", err)
	}
	l.Release()
}
