package teardown

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/devk/devk/internal/layout"
)

func TestIsShimOf(t *testing.T) {
	sock := "/root/.devk/clusters/devk/run/containerd.sock"
	if !isShimOf([]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", sock}, sock) {
		t.Error("our shim not recognised")
	}
	if isShimOf([]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", "/run/containerd/containerd.sock"}, sock) {
		t.Error("the system containerd's shim taken for ours")
	}
	if isShimOf([]string{"/bin/sleep", "-address", sock}, sock) {
		t.Error("a non-shim taken for a shim")
	}
}

func TestFilesRefusesWhileMounted(t *testing.T) {
	home := t.TempDir()
	files := layout.HomeFiles(home).Cluster("devk")
	dir := files.Dir
	nodes := []NodeProcs{{Name: "devk", Procs: files.FirstNode().Procs()}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := SafeToRemove(dir, home, nodes); err != nil {
		t.Fatalf("an unmounted, stopped cluster dir: %v", err)
	}
	t.Run("tmpfs mounted beneath", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root for mount(2)")
		}
		mp := filepath.Join(dir, "kubelet", "pods", "x", "volumes")
		os.MkdirAll(mp, 0o755)
		if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		err := SafeToRemove(dir, home, nodes)
		unix.Unmount(mp, unix.MNT_DETACH)
		if err == nil || !strings.Contains(err.Error(), "mounts beneath") {
			t.Fatalf("with a tmpfs mounted beneath: %v", err)
		}
	})
	// A cluster dir replaced by a symlink is not followed.
	os.RemoveAll(dir)
	os.Symlink(t.TempDir(), dir)
	if err := SafeToRemove(dir, home, nodes); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("symlinked cluster dir: %v", err)
	}
}
