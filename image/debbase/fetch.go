package debbase

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/execx"
)

// Fetch returns the path of each package's .deb in dir, downloading with
// `apt-get download` (which checks each file against the signed index)
// only those not there already. A cached file is used only if its SHA256
// is the one the index names, so a rebuild of the same versions
// downloads nothing and a damaged file is fetched again.
func Fetch(ctx context.Context, dir string, pkgs []Package) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("deb cache: %w", err)
	}
	paths := make([]string, len(pkgs))
	var missing []Package
	for i, p := range pkgs {
		name := path.Base(p.Filename)
		if name != filepath.Base(name) || name == "." || name == ".." || !debName.MatchString(p.Name) {
			return nil, fmt.Errorf("apt's index names the file %q for %s: refusing it as a cache file name", p.Filename, p.Name)
		}
		paths[i] = filepath.Join(dir, name)
		if sum, err := build.FileSHA256(paths[i]); err == nil && sum == p.SHA256 {
			continue
		}
		missing = append(missing, p)
	}
	if len(missing) == 0 {
		return paths, nil
	}
	// apt-get download names files itself (an epoch becomes %3a): fetch
	// into a fresh directory, then move each file to its pool name by
	// its SHA256.
	tmp, err := os.MkdirTemp(dir, ".download-")
	if err != nil {
		return nil, fmt.Errorf("deb cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	args := []string{"download", "-q"}
	for _, p := range missing {
		id := p.Name
		if p.Architecture != "all" {
			id += ":" + p.Architecture
		}
		args = append(args, id+"="+p.Version)
	}
	if err := execx.Run(ctx, execx.Cmd{Name: "apt-get", Args: args, Dir: tmp, Env: []string{"LC_ALL=C"}}); err != nil {
		return nil, fmt.Errorf("download Debian packages: %w\n(if apt cannot find a version or a file, its lists are out of date: run `apt-get update` as root, then again)", err)
	}
	got := map[string]string{} // sha256 -> downloaded file
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		f := filepath.Join(tmp, e.Name())
		if sum, err := build.FileSHA256(f); err == nil {
			got[sum] = f
		}
	}
	for i, p := range pkgs {
		if !containsPackage(missing, p) {
			continue
		}
		f, ok := got[p.SHA256]
		if !ok {
			return nil, fmt.Errorf("apt-get download gave no file with the SHA256 of %s (%s): run `apt-get update` as root, then again", p.ID(), p.SHA256)
		}
		if err := os.Rename(f, paths[i]); err != nil {
			return nil, fmt.Errorf("deb cache: %w", err)
		}
	}
	return paths, nil
}

func containsPackage(ps []Package, p Package) bool {
	for _, q := range ps {
		if q.Name == p.Name && q.Version == p.Version {
			return true
		}
	}
	return false
}
