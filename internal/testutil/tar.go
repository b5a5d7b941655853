package testutil

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// EachTarEntry calls fn with each entry of the tar r, in order, and its
// contents (read them in fn, or not at all); a read error fails t.
func EachTarEntry(t testing.TB, r io.Reader, fn func(h *tar.Header, body io.Reader)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(h, tr)
	}
}

// Untar writes the tar r's directories (0755), symlinks and regular files
// (their modes' permission bits) into dir: the tests' own minimal tar -x.
// Any other type of entry fails t.
func Untar(t testing.TB, r io.Reader, dir string) {
	t.Helper()
	EachTarEntry(t, r, func(h *tar.Header, body io.Reader) {
		p := filepath.Join(dir, h.Name)
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&os.ModePerm); err == nil {
				_, err = io.Copy(f, body)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		default:
			t.Fatalf("%s: unexpected type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
}
