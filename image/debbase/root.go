package debbase

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/devk/devk/internal/atomicfile"
)

// tarFormat versions what WriteTar makes of the same packages; bump it
// when that changes, so tars cached under the old layout are not reused.
const tarFormat = "debbase-v2" // v2: scratchDirs

// Key names the tar WriteRoot makes of pkgs with spec: the same key
// always gives the same bytes, so a tar (or its compressed layer) can be
// cached under it. It is 64 lowercase hex digits.
func Key(pkgs []Package, spec Spec) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", tarFormat)
	for _, p := range pkgs {
		fmt.Fprintf(h, "package %s %s %s %s\n", p.Name, p.Version, p.Architecture, p.SHA256)
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Symlinks)) {
		fmt.Fprintf(h, "symlink %q %q\n", k, spec.Symlinks[k])
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Scripts)) {
		fmt.Fprintf(h, "script %q %q\n", k, spec.Scripts[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// WriteRoot fetches the packages into debDir (see Fetch) and writes their
// root filesystem with spec's symlinks (see WriteTar); it returns the
// tar's mtime.
func WriteRoot(ctx context.Context, w io.Writer, debDir string, pkgs []Package, spec Spec) (time.Time, error) {
	paths, err := Fetch(ctx, debDir, pkgs)
	if err != nil {
		return time.Time{}, err
	}
	debs := make([]Deb, len(pkgs))
	for i, p := range pkgs {
		if debs[i], err = ReadDeb(ctx, p.Name, paths[i]); err != nil {
			return time.Time{}, err
		}
	}
	return WriteTar(w, debs, spec.Symlinks, spec.Scripts)
}

// resolveFormat versions the remembered resolutions.
const resolveFormat = "resolve-v1"

// aptStateDirs are what apt's choice of candidates depends on: its
// lists (apt-get update), its configuration and sources, and the
// architectures dpkg knows.
var aptStateDirs = []string{"/var/lib/apt/lists", "/etc/apt", "/var/lib/dpkg/arch"}

// ResolveCached is Resolve remembered in dir for as long as apt's lists
// and configuration are unchanged (their names, sizes and mtimes): two
// apt-cache calls take seconds where apt's binary cache is off, as in
// Docker-style images.
func ResolveCached(ctx context.Context, spec Spec, dir string) ([]Package, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n%q\n%q\n", resolveFormat, spec.Packages, spec.Exclude, spec.Arch)
	for _, root := range aptStateDirs {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() && d.Name() == "partial" {
				return filepath.SkipDir
			}
			if fi, err := d.Info(); err == nil && !d.IsDir() && d.Name() != "lock" {
				fmt.Fprintf(h, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
			}
			return nil
		})
	}
	file := filepath.Join(dir, "resolved-"+hex.EncodeToString(h.Sum(nil))+".json")
	if data, err := os.ReadFile(file); err == nil {
		var pkgs []Package
		if json.Unmarshal(data, &pkgs) == nil && len(pkgs) > 0 {
			return pkgs, nil
		}
	}
	pkgs, err := Resolve(ctx, spec)
	if err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(pkgs, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("resolution cache: %w", err)
	}
	if err := atomicfile.Write(file, append(data, '\n'), 0o644, ""); err != nil {
		return nil, fmt.Errorf("resolution cache: %w", err)
	}
	return pkgs, nil
}
