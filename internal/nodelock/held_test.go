package nodelock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestAcquireUnlessHeld is the rule devk's systemctl takes a node's lock
// by: a lock busy under a caller whose HeldEnv names that node (any
// spelling of its manifests dir) is the caller's, and is skipped; one it
// names but no one holds is taken; a busy lock the variable does not
// name (another node's, none, empty) is refused as Acquire refuses it.
func TestAcquireUnlessHeld(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	node, other := filepath.Join(t.TempDir(), "manifests"), filepath.Join(t.TempDir(), "manifests")
	for _, d := range []string{node, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(node, link); err != nil {
		t.Fatal(err)
	}
	names := func(d string) []string {
		kv, err := HeldEnvVar(d)
		if err != nil {
			t.Fatal(err)
		}
		return []string{"PATH=/bin", kv}
	}

	held, err := AcquireIn(dir, node, "devk up")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		environ []string
		busy    bool
	}{
		{"names the node", names(node), false},
		{"names it by a link", names(link), false},
		{"the last of two wins", append(names(other), names(node)...), false},
		{"names another node", names(other), true},
		{"names none", []string{"PATH=/bin"}, true},
		{"empty", []string{HeldEnv + "="}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := AcquireUnlessHeldIn(dir, tc.environ, node, "devk's systemctl restart kubelet")
			defer l.Release()
			if tc.busy {
				if !errors.Is(err, ErrBusy) {
					t.Errorf("AcquireUnlessHeld = %v, %v; want the busy lock refused", l, err)
				}
				return
			}
			if err != nil || l != nil {
				t.Errorf("AcquireUnlessHeld = %v, %v; want the caller's lock skipped (nil, nil)", l, err)
			}
		})
	}
	held.Release()

	// Named but free: taken, and busy for the next.
	l, err := AcquireUnlessHeldIn(dir, names(node), node, "devk's systemctl restart kubelet")
	if err != nil || l == nil {
		t.Fatalf("AcquireUnlessHeld of a free lock = %v, %v; want it taken", l, err)
	}
	defer l.Release()
	if _, err := AcquireIn(dir, node, "devk swap kubelet"); !errors.Is(err, ErrBusy) {
		t.Errorf("Acquire while systemctl holds it = %v; want busy", err)
	}
}
