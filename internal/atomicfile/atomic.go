// Package atomicfile writes files that others read (manifests, binaries,
// kubeconfigs, state) atomically: a temp file beside the target, fsync,
// rename, and the directory synced; and tells whether two files already
// hold the same bytes, so that an unchanged file is not rewritten.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data. The temp file lives in tmpDir (the
// target's directory when empty): callers writing into a directory that
// another program scans (a kubelet's manifests dir) pass a directory
// outside it on the same filesystem.
func Write(path string, data []byte, perm os.FileMode, tmpDir string) error {
	return WriteFrom(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, perm, tmpDir)
}

// WriteFrom is Write with the content produced by fill.
func WriteFrom(path string, fill func(io.Writer) error, perm os.FileMode, tmpDir string) error {
	dir := filepath.Dir(path)
	if tmpDir == "" {
		tmpDir = dir
	}
	f, err := os.CreateTemp(tmpDir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after a successful rename
	if err := fill(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so a rename in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
