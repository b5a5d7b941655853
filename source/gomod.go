package source

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// stagingUsePrefix is how a Kubernetes tree's go.work names a staging
// module: ./staging/src/k8s.io/<name>.
const stagingUsePrefix = "./staging/src/k8s.io/"

// workUses lists the staging module names in a go.work's use directives,
// as written: the caller checks that each is one path element.
func workUses(path string, gowork []byte) ([]string, error) {
	wf, err := modfile.ParseWork(path, gowork, nil)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, u := range wf.Use {
		if name, ok := strings.CutPrefix(u.Path, stagingUsePrefix); ok {
			names = append(names, name)
		}
	}
	return names, nil
}

// dropUses removes the staging modules names from a go.work's use
// directives, keeping everything else (comments, go, godebug).
func dropUses(path string, gowork []byte, names []string) ([]byte, error) {
	wf, err := modfile.ParseWork(path, gowork, nil)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if err := wf.DropUse(stagingUsePrefix + name); err != nil {
			return nil, err
		}
	}
	wf.Cleanup()
	return modfile.Format(wf.Syntax), nil
}

// requires reports whether a go.mod requires module mod (directly or
// not).
func requires(path string, gomod []byte, mod string) (bool, error) {
	f, err := modfile.ParseLax(path, gomod, nil)
	if err != nil {
		return false, err
	}
	for _, r := range f.Require {
		if r.Mod.Path == mod {
			return true, nil
		}
	}
	return false, nil
}

// goDirective is the go version a go.work or go.mod (by its file name)
// asks for, or "" when it has no go directive.
func goDirective(path string, data []byte) (string, error) {
	var g *modfile.Go
	switch filepath.Base(path) {
	case "go.work":
		wf, err := modfile.ParseWork(path, data, nil)
		if err != nil {
			return "", err
		}
		g = wf.Go
	case "go.mod":
		f, err := modfile.ParseLax(path, data, nil)
		if err != nil {
			return "", err
		}
		g = f.Go
	default:
		return "", fmt.Errorf("%s is neither a go.work nor a go.mod", path)
	}
	if g == nil {
		return "", nil
	}
	return g.Version, nil
}

// Module is one module of a tree's workspace: its path and its directory
// relative to the tree's root ("." for k8s.io/kubernetes itself).
type Module struct {
	Path string
	Dir  string
}

// Modules are the modules the tree's go.work uses (k8s.io/kubernetes and
// every staging module), each with its path from its own go.mod.
func (t *Tree) Modules() ([]Module, error) {
	workPath := filepath.Join(t.Root, "go.work")
	data, err := os.ReadFile(workPath)
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork(workPath, data, nil)
	if err != nil {
		return nil, err
	}
	var mods []Module
	for _, u := range wf.Use {
		dir := filepath.Clean(filepath.FromSlash(u.Path))
		if filepath.IsAbs(dir) || !filepath.IsLocal(dir) {
			return nil, fmt.Errorf("%s uses %s, which is not inside the tree", workPath, u.Path)
		}
		modPath := filepath.Join(t.Root, dir, "go.mod")
		gomod, err := os.ReadFile(modPath)
		if err != nil {
			return nil, fmt.Errorf("%s uses %s: %w", workPath, u.Path, err)
		}
		path := modfile.ModulePath(gomod)
		if path == "" {
			return nil, fmt.Errorf("%s has no module line", modPath)
		}
		mods = append(mods, Module{Path: path, Dir: filepath.ToSlash(dir)})
	}
	return mods, nil
}
