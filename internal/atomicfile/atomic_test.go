package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	tmp := t.TempDir()
	path := filepath.Join(dir, "kube-apiserver.yaml")
	if err := Write(path, []byte("old"), 0o600, tmp); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600, tmp); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != "new" {
		t.Fatalf("content = %q", data)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v", fi.Mode())
	}
	// A failed write leaves the old file and no temp file anywhere.
	err := WriteFrom(path, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return errors.New("disk on fire")
	}, 0o600, tmp)
	if err == nil {
		t.Fatal("a failed fill reported success")
	}
	if data, _ := os.ReadFile(path); string(data) != "new" {
		t.Fatalf("a failed write changed the file: %q", data)
	}
	for _, d := range []string{dir, tmp} {
		entries, _ := os.ReadDir(d)
		if d == dir && len(entries) != 1 || d == tmp && len(entries) != 0 {
			t.Fatalf("%s holds %d entries after a failed write", d, len(entries))
		}
	}
}
