package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteIfChanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "manifests", "x.yaml")
	tmp := filepath.Join(dir, "tmp")
	if w, err := WriteIfChanged(path, []byte("a"), 0o600, tmp); err != nil || !w {
		t.Fatalf("first write = %v, %v", w, err)
	}
	if w, err := WriteIfChanged(path, []byte("a"), 0o600, tmp); err != nil || w {
		t.Errorf("same bytes written again: %v, %v", w, err)
	}
	if w, err := WriteIfChanged(path, []byte("a"), 0o644, tmp); err != nil || !w {
		t.Errorf("same bytes with another mode not written: %v, %v", w, err)
	}
	if w, err := WriteIfChanged(path, []byte("b"), 0o600, tmp); err != nil || !w {
		t.Errorf("changed bytes not written: %v, %v", w, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("the manifests dir holds %d entries; temp files must live outside it", len(ents))
	}
}
