package build

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/phase"
)

// maxListedDebugPackages bounds how many packages the debug-packages
// phase names in its line (state.json and -o json have them all).
const maxListedDebugPackages = 5

// chooseDebugPackages sets the patterns the tree's components compile
// with -N -l: Options.DebugPackages, and (without them, or with
// DebugChanged) the tree's packages changed since the components' last
// normal build.
func (j *Job) chooseDebugPackages(ctx context.Context) (phase.Outcome, error) {
	named := j.DebugPackages
	if len(named) > 0 && (!j.DebugChanged || slices.Contains(named, DebugAll)) {
		j.debugPkgs = named
		return phase.Unchanged("%s (named)", strings.Join(j.debugPkgs, " ")), nil
	}
	var roots []string
	for _, c := range append(j.treeComponents(), j.testComponents()...) {
		roots = append(roots, c.Package)
	}
	since, err := j.lastNormalCompile()
	if err != nil && len(named) > 0 {
		j.debugPkgs = named
		return phase.Unchanged("%s (named; no normal build to find changed packages by)", strings.Join(named, " ")), nil
	}
	if err != nil {
		return phase.Done, err
	}
	changed, err := changedPackages(ctx, execx.Cmd{Dir: j.Tree.Root, Env: j.env()}, j.GoFlags, roots, since)
	if err != nil {
		return phase.Done, err
	}
	pkgs := slices.Concat(named, changed)
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	j.debugPkgs = pkgs
	if len(pkgs) == 0 {
		return phase.Unchanged("none changed since the last normal build (%s): symbols kept, optimised everywhere; name packages with --debug-pkg",
			since.Local().Format(time.TimeOnly)), nil
	}
	shown := pkgs[:min(len(pkgs), maxListedDebugPackages)]
	more := ""
	if len(pkgs) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(pkgs)-len(shown))
	}
	return phase.Unchanged("%d named or changed since the last normal build: %s%s", len(pkgs), strings.Join(shown, " "), more), nil
}

// debugPackagesOf are the patterns c compiles with -N -l in a debug
// build: the tree's components those chooseDebugPackages set; one built
// from a module, which comes unchanged from its release, those named,
// else the module's own packages.
func (j *Job) debugPackagesOf(c Component) []string {
	switch {
	case !c.External:
		return j.debugPkgs
	case len(j.DebugPackages) > 0:
		return j.DebugPackages
	default:
		return []string{c.Module + "/..."}
	}
}

// lastNormalCompile is when the earliest of the last normal builds of
// the job's tree components began (a record of an older devk, without
// CompiledAt: when it ended); an error names the fix when one of them
// has none.
func (j *Job) lastNormalCompile() (time.Time, error) {
	st, err := LoadState(j.Tree.Root)
	if err != nil {
		return time.Time{}, err
	}
	var since time.Time
	for _, c := range append(j.treeComponents(), j.testComponents()...) {
		rec := st.Component(c.Name).Binary
		if rec == nil {
			return time.Time{}, fmt.Errorf("%s has no normal build to compare with, to choose the packages to debug: run `devk build %s` first, or name them (--debug-pkg PATTERN, --debug-pkg %s)",
				c.Name, c.BuildArg(), DebugAll)
		}
		t := rec.CompiledAt
		if t.IsZero() {
			t = rec.BuiltAt
		}
		if since.IsZero() || t.Before(since) {
			since = t
		}
	}
	return since, nil
}

// listedPackage is what changedPackages reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Dir        string
	Module     *struct{ Main bool }
	GoFiles    []string
	CgoFiles   []string
	SFiles     []string
	EmbedFiles []string
}

// changedPackages are the import paths, sorted, of the packages of the
// tree (the workspace's own modules, under list.Dir) that roots link
// and that have a source file (Go, assembly or embedded) modified after
// since. go list -deps names them (about 2 s for kube-apiserver); each
// file is a stat. A package whose file was only removed is not seen.
func changedPackages(ctx context.Context, list execx.Cmd, goflags, roots []string, since time.Time) ([]string, error) {
	list.Name = "go"
	list.Args = append(append([]string{"list", "-deps", "-json=ImportPath,Dir,Module,GoFiles,CgoFiles,SFiles,EmbedFiles"}, goflags...), roots...)
	out, err := execx.Output(ctx, list)
	if err != nil {
		return nil, fmt.Errorf("list the packages to debug: %w", err)
	}
	var changed []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("read go list's output: %w", err)
		}
		if p.Module == nil || !p.Module.Main || !within(list.Dir, p.Dir) {
			continue
		}
		for _, f := range slices.Concat(p.GoFiles, p.CgoFiles, p.SFiles, p.EmbedFiles) {
			if fi, err := os.Stat(filepath.Join(p.Dir, f)); err == nil && fi.ModTime().After(since) {
				changed = append(changed, p.ImportPath)
				break
			}
		}
	}
	slices.Sort(changed)
	return changed, nil
}
