package cgroups

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemoveEmptyTree: a tree with a process in it is left alone; an
// empty one is removed, deepest first.
func TestRemoveEmptyTree(t *testing.T) {
	root := filepath.Join(t.TempDir(), "k8s.io")
	leaf := filepath.Join(root, "pod", "ctr")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(leaf, "cgroup.procs")
	if err := os.WriteFile(procs, []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveEmptyTree(root); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a tree with a process in it: %v, want it refused as in use", err)
	}
	if _, err := os.Stat(leaf); err != nil {
		t.Fatalf("a tree in use was touched: %v", err)
	}
	if err := os.Remove(procs); err != nil {
		t.Fatal(err)
	}
	if err := RemoveEmptyTree(root); err != nil {
		t.Fatalf("an empty tree: %v", err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("an empty tree is still there: %v", err)
	}
}

func TestNoRootIsNoCgroup(t *testing.T) {
	for _, root := range []string{"", "/"} {
		if Exists(root) {
			t.Errorf("Exists(%q): the machine's own root is no node's", root)
		}
		if removed, killed, err := RemoveRoot(t.Context(), root, 0); removed+killed != 0 || err != nil {
			t.Errorf("RemoveRoot(%q) = %d, %d, %v: the machine's own root must never be removed", root, removed, killed, err)
		}
	}
}
