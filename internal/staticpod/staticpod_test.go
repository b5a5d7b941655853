package staticpod

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestImage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, manifest string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	one := write("one.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\nspec:\n  containers:\n  - name: etcd\n    image: etcd@sha256:1\n")
	two := write("two.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: two\nspec:\n  containers:\n  - name: a\n    image: a:1\n  - name: b\n    image: b:1\n")
	bad := write("bad.yaml", "{")
	for _, tt := range []struct {
		path, container, want string
		is                    error
	}{
		{one, "etcd", "etcd@sha256:1", nil},
		{one, "other", "etcd@sha256:1", nil}, // the only container
		{two, "b", "b:1", nil},
		{two, "c", "", ErrNoContainer},
		{filepath.Join(dir, "none.yaml"), "etcd", "", fs.ErrNotExist},
	} {
		got, err := Image(tt.path, tt.container)
		if got != tt.want || !errors.Is(err, tt.is) {
			t.Errorf("Image(%s, %q) = %q, %v; want %q, %v", filepath.Base(tt.path), tt.container, got, err, tt.want, tt.is)
		}
	}
	if _, err := Image(two, "c"); err == nil || !strings.Contains(err.Error(), "it has a, b") {
		t.Errorf("a missing container's error does not list the pod's: %v", err)
	}
	if _, err := Image(bad, "x"); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a manifest that does not parse: %v, want an error naming it", err)
	}
}

// TestFlagList: flags on a command line are sorted, and Flags reads them
// back as they were.
func TestFlagList(t *testing.T) {
	flags := map[string]string{"v": "2", "bind-address": "10.250.0.2", "feature-gates": "A=true,B=false"}
	got := FlagList(flags)
	want := []string{"--bind-address=10.250.0.2", "--feature-gates=A=true,B=false", "--v=2"}
	if !slices.Equal(got, want) {
		t.Fatalf("FlagList = %v, want %v", got, want)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Command: append([]string{"/bin/c"}, got...)}}}}
	if back := Flags(pod, "c"); !maps.Equal(back, flags) {
		t.Errorf("Flags read back %v, want %v", back, flags)
	}
}
