package image

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

// FuzzTag: whatever the version (state.json's, a tree's git describe),
// the tag made of it is a valid image tag.
func FuzzTag(f *testing.F) {
	for _, s := range []string{"v1.34.4", "v1.34.4-3+0123456789abcd-dirty", "", "-x", ".x", "v1/../../x", "a\x00b", "\uff0f", strings.Repeat("9", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, version string) {
		if err := validname.ImageTag(Tag(version)); err != nil {
			t.Fatalf("Tag(%q) = %q: %v", version, Tag(version), err)
		}
	})
}

// TestStateFileDoesNotNamePaths: state.json is a file in the tree, so
// what it names is not trusted as a path. A recorded binary path is not
// read (the image holds the binary build wrote), and a recorded sha256
// that is not one never becomes a layer cache file name.
func TestStateFileDoesNotNamePaths(t *testing.T) {
	_, addr := newTestRegistry(t)
	root, _ := builtTree(t)
	push := func() (*Job, error) {
		return RunPush(context.Background(), buildOpts(root, "apiserver"), opts(addr), phase.Options{})
	}
	j, err := push()
	if err != nil {
		t.Fatal(err)
	}
	want := j.Images[0].Digest

	tamper := func(change func(*build.BinaryRecord)) {
		t.Helper()
		err := build.UpdateState(root, func(st *build.StateFile) error {
			change(st.Component("apiserver").Binary)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("not for a registry"), 0o600); err != nil {
		t.Fatal(err)
	}
	tamper(func(b *build.BinaryRecord) { b.Path = secret })
	j, err = push()
	if err != nil {
		t.Fatal(err)
	}
	if j.Images[0].Digest != want {
		t.Fatalf("with state.json naming %s the image is %s, want %s (the built binary)", secret, j.Images[0].Digest, want)
	}

	layers := filepath.Join(root, "_output", "devk", "layers")
	before, _ := os.ReadDir(layers)
	for _, sum := range []string{"../../../../escape", strings.Repeat("A", 64), ""} {
		tamper(func(b *build.BinaryRecord) { b.SHA256 = sum })
		if _, err := push(); err == nil || !strings.Contains(err.Error(), "not 64 lowercase hex digits") {
			t.Errorf("sha256 %q: err = %v", sum, err)
		}
	}
	after, _ := os.ReadDir(layers)
	if len(after) != len(before) {
		t.Errorf("the layer cache went from %d to %d files", len(before), len(after))
	}
	if _, err := os.Stat(filepath.Join(root, "_output", "escape")); err == nil {
		t.Error("a file escaped the layer cache")
	}
}
