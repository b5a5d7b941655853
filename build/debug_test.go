package build

import (
	"context"
	"debug/buildinfo"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/phase"
)

// gcflagsOf is the -gcflags go build recorded in the binary (the last
// one given), "" when none.
func gcflagsOf(t *testing.T, path string) string {
	t.Helper()
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range bi.Settings {
		if s.Key == "-gcflags" {
			return s.Value
		}
	}
	return ""
}

func debugBuild(t *testing.T, root string, pkgs ...string) *Job {
	t.Helper()
	j, err := Run(context.Background(), Options{TreeDir: root, Components: []string{"apiserver"}, Debug: true, DebugPackages: pkgs}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Binaries) != 1 || !j.Binaries[0].Debug {
		t.Fatalf("debug build: binaries %+v", j.Binaries)
	}
	return j
}

// TestDebugBuild runs real go builds of the fixture tree: a debug build
// compiles with -N -l the packages changed since the last normal build
// (or those named, or all), keeps DWARF, goes to a directory of its own
// and is recorded apart, and the normal build's binary, record and
// layout stay as they were.
func TestDebugBuild(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "0")
	root := testtree.New(t)

	// Nothing to compare with yet: say what to do, build nothing.
	_, err := Run(context.Background(), Options{TreeDir: root, Components: []string{"apiserver"}, Debug: true}, phase.Options{})
	if err == nil || !strings.Contains(err.Error(), "devk build apiserver") || !strings.Contains(err.Error(), "--debug-pkg") {
		t.Fatalf("debug build before a normal one: err = %v", err)
	}

	normal := build(t, root, "apiserver").Binaries[0]
	normalDir := filepath.Dir(normal.Path)
	if filepath.Base(normalDir) != "linux_amd64" && filepath.Base(normalDir) != "linux_arm64" {
		t.Fatalf("normal build at %s", normal.Path)
	}
	if normal.Debug || hasDWARF(t, normal.Path) || gcflagsOf(t, normal.Path) != "" {
		t.Fatalf("normal build: debug %v, DWARF %v, gcflags %q", normal.Debug, hasDWARF(t, normal.Path), gcflagsOf(t, normal.Path))
	}

	// No edit since: nothing compiled with -N -l, symbols kept.
	j := debugBuild(t, root)
	if b := j.Binaries[0]; len(b.DebugPackages) != 0 || gcflagsOf(t, b.Path) != "" || !hasDWARF(t, b.Path) {
		t.Fatalf("debug build of an unchanged tree: packages %q, gcflags %q, DWARF %v", b.DebugPackages, gcflagsOf(t, b.Path), hasDWARF(t, b.Path))
	}

	// An edit in component-base: that package alone, and only in the
	// debug binary.
	editComponentBase(t, root)
	j = debugBuild(t, root)
	b := j.Binaries[0]
	const edited = "k8s.io/component-base/version"
	if !slices.Equal(b.DebugPackages, []string{edited}) || !b.Changed {
		t.Fatalf("after an edit: debug packages %q, changed %v", b.DebugPackages, b.Changed)
	}
	if got := gcflagsOf(t, b.Path); got != edited+"=-N -l" {
		t.Errorf("after an edit: gcflags %q", got)
	}
	if want := normalDir + DebugDirSuffix; filepath.Dir(b.Path) != want || !hasDWARF(t, b.Path) {
		t.Errorf("debug binary %s (DWARF %v), want it in %s with DWARF", b.Path, hasDWARF(t, b.Path), want)
	}
	if sum, err := FileSHA256(normal.Path); err != nil || sum != normal.SHA256 {
		t.Errorf("the debug build changed the normal binary (%s, %v)", sum, err)
	}
	st, err := LoadState(root)
	if err != nil {
		t.Fatal(err)
	}
	cs := st.Components["apiserver"]
	if cs.Binary.SHA256 != normal.SHA256 || cs.Binary.Path != normal.Path || cs.Debug == nil || cs.Debug.SHA256 != b.SHA256 ||
		!slices.Equal(cs.Debug.DebugPackages, b.DebugPackages) {
		t.Fatalf("state.json: binary %+v, debug %+v", cs.Binary, cs.Debug)
	}

	// Named packages, then all.
	for _, tc := range []struct{ pkgs, want string }{
		{"k8s.io/apiserver/...", "k8s.io/apiserver/...=-N -l"},
		{DebugAll, "all=-N -l"},
	} {
		b := debugBuild(t, root, tc.pkgs).Binaries[0]
		if got := gcflagsOf(t, b.Path); got != tc.want || !slices.Equal(b.DebugPackages, []string{tc.pkgs}) {
			t.Errorf("--debug-pkg %s: gcflags %q, recorded %q", tc.pkgs, got, b.DebugPackages)
		}
	}

	// The normal build is where it was: the edit compiles into it and
	// leaves the debug binary alone; since then nothing has changed.
	j = build(t, root, "apiserver")
	if b := j.Binaries[0]; b.Path != normal.Path || !b.Changed || b.Debug || hasDWARF(t, b.Path) {
		t.Fatalf("normal build after debug builds: %+v, DWARF %v", b, hasDWARF(t, b.Path))
	}
	if b := debugBuild(t, root).Binaries[0]; len(b.DebugPackages) != 0 {
		t.Fatalf("debug packages after a normal build of the edit: %q", b.DebugPackages)
	}
}

// TestDebugFlags: the go build flags of each kind of component in a
// debug job; dlv is built as released in every job, to the normal
// directory; kwok, a tool from a module, is debug-built as etcd is; a
// pattern go would misread is refused.
func TestDebugFlags(t *testing.T) {
	root := testtree.New(t)
	j, err := NewJob(Options{TreeDir: root, Components: []string{"apiserver", "etcd", Delve, Kwok}, Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Component{}
	for _, c := range j.Components {
		byName[c.Name] = c
	}
	etcd, dlv, kwok := byName["etcd"], byName[Delve], byName[Kwok]
	j.debugPkgs = []string{"k8s.io/apiserver/pkg/server", "k8s.io/component-base/version"}
	tests := []struct {
		name     string
		args     []string
		want     []string
		wantNot  []string
		wantPath string
	}{
		{"tree components: the chosen packages", j.commonFlags(nil, j.DebugBuild(byName["apiserver"]), j.debugPackagesOf(byName["apiserver"])),
			[]string{"-trimpath", "-gcflags=k8s.io/apiserver/pkg/server=-N -l", "-gcflags=k8s.io/component-base/version=-N -l"}, []string{"-s -w"},
			j.DebugBinDir()},
		{"etcd: its module's packages", j.commonFlags(nil, j.DebugBuild(etcd), j.debugPackagesOf(etcd)),
			[]string{"-gcflags=go.etcd.io/etcd/server/v3/...=-N -l"}, nil, j.DebugBinDir()},
		{"dlv: as released", j.commonFlags(nil, j.DebugBuild(dlv), j.debugPackagesOf(dlv)),
			[]string{"-trimpath", "-ldflags=-s -w"}, []string{"-gcflags"}, j.BinDir()},
		{"kwok: its module's packages", j.commonFlags(nil, j.DebugBuild(kwok), j.debugPackagesOf(kwok)),
			[]string{"-gcflags=sigs.k8s.io/kwok/...=-N -l"}, []string{"-s -w"}, j.DebugBinDir()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			line := strings.Join(tc.args, "\x00")
			for _, w := range tc.want {
				if !slices.Contains(tc.args, w) {
					t.Errorf("args %q lack %q", tc.args, w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(line, w) {
					t.Errorf("args %q have %q", tc.args, w)
				}
			}
		})
	}
	if filepath.Dir(j.BinaryPath(dlv)) != j.BinDir() || filepath.Dir(j.BinaryPath(etcd)) != j.DebugBinDir() || filepath.Dir(j.BinaryPath(kwok)) != j.DebugBinDir() {
		t.Errorf("dlv at %s, etcd at %s, kwok at %s", j.BinaryPath(dlv), j.BinaryPath(etcd), j.BinaryPath(kwok))
	}
	if j.pinned[Delve] != DelveVersion || j.pinned[Kwok] != KwokVersion {
		t.Errorf("dlv pinned at %q, kwok at %q; want %s, %s", j.pinned[Delve], j.pinned[Kwok], DelveVersion, KwokVersion)
	}
	for _, bad := range []string{"", "-N", "all=-N", "k8s.io/a k8s.io/b"} {
		if _, err := NewJob(Options{TreeDir: root, Components: []string{"apiserver"}, Debug: true, DebugPackages: []string{bad}}); err == nil ||
			!strings.Contains(err.Error(), "--debug-pkg") {
			t.Errorf("--debug-pkg %q: err = %v", bad, err)
		}
	}
}
