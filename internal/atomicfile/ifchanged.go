package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteIfChanged writes data to path with Write unless it already holds
// exactly that with mode perm, making path's directory (and tmpDir) if
// missing; it reports whether it wrote.
func WriteIfChanged(path string, data []byte, perm os.FileMode, tmpDir string) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() == perm {
			return false, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	if tmpDir != "" {
		if err := os.MkdirAll(tmpDir, 0o755); err != nil {
			return false, err
		}
	}
	return true, Write(path, data, perm, tmpDir)
}
