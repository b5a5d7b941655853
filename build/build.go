package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"go/version"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
)

// Options say what to build and how.
type Options struct {
	// TreeDir is the tree (or a directory inside it); empty means the
	// working directory's tree. Relative package paths are taken from it.
	TreeDir string
	// Components are names as users type them (apiserver, kube-apiserver,
	// all) or package paths of the tree (./test/images/agnhost).
	Components []string
	// Platform is os/arch; empty means linux/<host arch>.
	Platform string
	// Debug builds for a debugger: symbols and DWARF kept (no -s -w),
	// and DebugPackages compiled without optimisation or inlining (-N
	// -l). The binaries go to a directory of their own (the platform's
	// with DebugDirSuffix) and are recorded apart (ComponentState.Debug),
	// so the normal build stays as it was and going back to it builds
	// nothing. The debugger itself (Component.Debugger) is built as
	// released.
	Debug bool
	// DebugPackages are the go package patterns a Debug build compiles
	// with -N -l, as -gcflags takes them (DebugAll: every package).
	// Empty means: for the tree's components, the tree's packages they
	// link whose files changed since their last normal build (see
	// changedPackages); for one built from a module (etcd, CoreDNS), the
	// module's own packages.
	DebugPackages []string
	// DebugChanged adds to DebugPackages the tree's packages changed
	// since the last normal build (`devk debug`'s default; without
	// DebugPackages a debug build compiles those alone).
	DebugChanged bool
	// GoFlags are extra `go build` flags, passed through.
	GoFlags []string
	// LDFlags are appended to the version ldflags.
	LDFlags string
	// EtcdVersion and CoreDNSVersion override the versions the tree's
	// kubeadm names.
	EtcdVersion    string
	CoreDNSVersion string
	// CoreDNSPlugins is empty for a CoreDNS with the plugins devk's and
	// kubeadm's Corefiles use (coreDNSPlugins), CoreDNSPluginsAll for
	// CoreDNS's whole set.
	CoreDNSPlugins string

	Reporter progress.Reporter
	// Log, when set, receives go build's own output as it happens.
	Log io.Writer
}

// Binary is one built component.
type Binary struct {
	Component Component `json:"-"`
	Name      string    `json:"component"`
	Path      string    `json:"path"`
	SHA256    string    `json:"sha256"`
	Size      int64     `json:"size"`
	// Version is what the binary is stamped with: the tree's gitVersion,
	// or the pinned version of a component built from a module.
	Version string `json:"version"`
	// Debug says it is a debug build (Options.Debug); DebugPackages are
	// the patterns it compiled with -N -l.
	Debug         bool          `json:"debug,omitempty"`
	DebugPackages []string      `json:"debugPackages,omitempty"`
	Changed       bool          `json:"changed"`
	Took          time.Duration `json:"took"`
}

// Job is the state the build phases share. Other pipelines (image, push,
// swap) embed it and run these phases first.
type Job struct {
	Options
	Tree       *source.Tree
	Components []Component
	Platform   string // os/arch
	Version    source.Version
	Binaries   []Binary

	binDir, debugBinDir string
	// debugPkgs are the patterns the tree's components compile with -N
	// -l in a debug build (the debug-packages phase); compiledAt is when
	// their go build began.
	debugPkgs  []string
	compiledAt time.Time
	// pinned are the module versions of the external components asked
	// for, by component name; took is how long each go build took.
	pinned map[string]string
	took   map[string]time.Duration
	// goVersion is `go env GOVERSION` ("" when GOTOOLCHAIN picks
	// another); inputs are the external components' build inputs (see
	// moduleInputs), by name, and reused those not built again.
	goVersion string
	inputs    map[string]string
	reused    map[string]bool
}

// NewJob checks the names it is given, finds the tree and resolves the
// components (package paths against the tree) and the versions of the
// external ones; nothing is built or written. Every name that later
// becomes a path (platform, versions, component) is checked here, before
// any phase runs.
func NewJob(o Options) (*Job, error) {
	var names, paths []string
	for _, a := range o.Components {
		if IsPackagePath(a) {
			paths = append(paths, a)
		} else {
			names = append(names, a)
		}
	}
	var comps []Component
	if len(names) > 0 || len(paths) == 0 {
		var err error
		if comps, err = Resolve(names); err != nil {
			return nil, err
		}
	}
	platform := o.Platform
	if platform == "" {
		platform = "linux/" + runtime.GOARCH
	} else if err := validname.Platform(platform); err != nil {
		return nil, err
	}
	if o.CoreDNSPlugins != "" && o.CoreDNSPlugins != CoreDNSPluginsAll {
		return nil, fmt.Errorf("--coredns-plugins %q: give %s for CoreDNS's every plugin, or leave it out for devk's (%s)", o.CoreDNSPlugins, CoreDNSPluginsAll, strings.Join(CoreDNSDirectives(), ", "))
	}
	flagVersions := map[string]string{}
	for _, f := range [][2]string{{"etcd", o.EtcdVersion}, {CoreDNS, o.CoreDNSVersion}} {
		v, err := pinnedVersions[f[0]].flag(f[1])
		if err != nil {
			return nil, err
		}
		flagVersions[f[0]] = v
	}
	tree, err := source.Open(o.TreeDir)
	if err != nil {
		return nil, err
	}
	if comps, err = addPackages(comps, tree, o.TreeDir, paths, platform); err != nil {
		return nil, err
	}
	pinned := map[string]string{}
	for _, c := range comps {
		if !c.External {
			continue
		}
		if pinned[c.Name] = flagVersions[c.Name]; pinned[c.Name] == "" {
			if pinned[c.Name], err = pinnedVersions[c.Name].fromTree(tree); err != nil {
				return nil, err
			}
		}
	}
	o.EtcdVersion, o.CoreDNSVersion = pinned["etcd"], pinned[CoreDNS]
	for _, p := range o.DebugPackages {
		if err := checkDebugPackage(p); err != nil {
			return nil, err
		}
	}
	binDir, err := BinDirFor(tree, platform, false)
	if err != nil {
		return nil, err
	}
	debugBinDir, err := BinDirFor(tree, platform, true)
	if err != nil {
		return nil, err
	}
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	return &Job{Options: o, Tree: tree, Components: comps, Platform: platform, binDir: binDir, debugBinDir: debugBinDir,
		pinned: pinned, took: map[string]time.Duration{}, inputs: map[string]string{}, reused: map[string]bool{}}, nil
}

// addPackages resolves package paths (relative to treeDir, else the
// working directory) and adds them after the named components, in
// argument order; a package given twice is built once, and two packages
// may not share a name.
func addPackages(comps []Component, tree *source.Tree, treeDir string, paths []string, platform string) ([]Component, error) {
	if len(paths) == 0 {
		return comps, nil
	}
	dir := treeDir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		dir = wd
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	goos, goarch, _ := strings.Cut(platform, "/")
	for _, p := range paths {
		c, err := resolvePackage(tree, dir, p, goos, goarch)
		if err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(comps, func(o Component) bool { return o.Name == c.Name }); i >= 0 {
			if comps[i].Package != c.Package {
				return nil, fmt.Errorf("%s and %s would both be built as %s: build them one at a time", comps[i].Package, c.Package, c.Name)
			}
			continue
		}
		comps = append(comps, c)
	}
	return comps, nil
}

// pinnedVersion is how an external component's version is chosen: the
// flag that overrides it (checked by parse; none for dlv and kwok) or
// fromTree, what the tree's kubeadm names or devk's pin; by says which,
// for help.
type pinnedVersion struct {
	name     string
	parse    func(string) (string, error)
	fromTree func(*source.Tree) (string, error)
	by       string
}

// pinnedVersions are the external components' versions, by component.
var pinnedVersions = map[string]pinnedVersion{
	"etcd":  {"--etcd-version", source.ParseEtcdVersion, (*source.Tree).EtcdVersion, "the version kubeadm names (" + source.EtcdVersionConst + ")"},
	CoreDNS: {"--coredns-version", source.ParseCoreDNSVersion, (*source.Tree).CoreDNSVersion, "the version kubeadm names (" + source.CoreDNSVersionConst + ")"},
	Delve:   devkPin(DelveVersion),
	Kwok:    devkPin(KwokVersion),
}

// devkPin is the version of a component kubeadm does not name: devk's
// pin, v, which no flag overrides.
func devkPin(v string) pinnedVersion {
	return pinnedVersion{fromTree: func(*source.Tree) (string, error) { return v, nil }, by: "devk's pin (" + v + ")"}
}

// remedy is what to do when the pinned version fails to build.
func (p pinnedVersion) remedy() string {
	if p.name == "" {
		return "is the Go module proxy reachable? see `go env GOPROXY`"
	}
	return "is that version served by the Go module proxy? pass " + p.name
}

// flag checks the flag's value; empty means the tree's version.
func (p pinnedVersion) flag(value string) (string, error) {
	if value == "" {
		return "", nil
	}
	v, err := p.parse(value)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.name, err)
	}
	return v, nil
}

// DebugDirSuffix ends the name of the directory debug builds go to,
// beside the platform's (_output/devk/bin/linux_amd64-debug).
const DebugDirSuffix = "-debug"

// DebugAll is the DebugPackages pattern for every package of a build.
const DebugAll = "all"

// debugGCFlags are the compiler flags of a debug build's packages: no
// optimisation, no inlining.
const debugGCFlags = "-N -l"

// BinDirFor is where build puts binaries for platform (os/arch), a
// debug build's apart; an error when the platform is not a name.
func BinDirFor(t *source.Tree, platform string, debug bool) (string, error) {
	dir := strings.ReplaceAll(platform, "/", "_")
	if debug {
		dir += DebugDirSuffix
	}
	return validname.PathIn(t.OutputDir(), "bin", dir)
}

// BinDir is where binaries for the job's platform go (a debug job's
// tree components: DebugBinDir).
func (j *Job) BinDir() string { return j.binDir }

// DebugBinDir is where a debug job's binaries go.
func (j *Job) DebugBinDir() string { return j.debugBinDir }

// DebugBuild says whether c is built for a debugger in this job.
func (j *Job) DebugBuild(c Component) bool { return j.Debug && !c.Debugger }

// BinaryPath is where a component's binary goes.
func (j *Job) BinaryPath(c Component) string {
	return filepath.Join(j.binDirOf(j.DebugBuild(c)), c.File())
}

func (j *Job) binDirOf(debug bool) string {
	if debug {
		return j.debugBinDir
	}
	return j.binDir
}

// checkDebugPackage refuses a --debug-pkg pattern go would read as
// something else: empty, a flag, or holding the = or space of -gcflags'
// pattern=flags syntax.
func checkDebugPackage(p string) error {
	if p == "" || strings.HasPrefix(p, "-") || strings.ContainsAny(p, "= \t\n") {
		return fmt.Errorf("--debug-pkg %q: want a go package pattern such as k8s.io/apiserver/pkg/server/... or ./pkg/kubelet, or %s", p, DebugAll)
	}
	return nil
}

// treeComponents are the programs one go build makes from the tree.
func (j *Job) treeComponents() []Component {
	var out []Component
	for _, c := range j.Components {
		if !c.External && !c.Test {
			out = append(out, c)
		}
	}
	return out
}

// testComponents are the tree's test binaries, one go test -c each.
func (j *Job) testComponents() []Component {
	var out []Component
	for _, c := range j.Components {
		if c.Test {
			out = append(out, c)
		}
	}
	return out
}

// compileIO is what compiling comps reads (their packages in the tree)
// and writes (their binaries).
func (j *Job) compileIO(comps []Component) (reads, writes []string) {
	for _, c := range comps {
		reads = append(reads, filepath.Join(j.Tree.Root, c.Package))
		writes = append(writes, j.BinaryPath(c))
	}
	return reads, writes
}

func (j *Job) wants(name string) bool {
	for _, c := range j.Components {
		if c.Name == name {
			return true
		}
	}
	return false
}

// Phases are the build pipeline: resolve, compile, one phase per external
// component (etcd, coredns), record.
func Phases() []*phase.Phase[*Job] {
	ps := []*phase.Phase[*Job]{
		{
			Name:  "resolve",
			Short: "read the tree's version (git describe, as hack/lib/version.sh) and check the Go toolchain",
			IO: func(j *Job) ([]string, []string) {
				return []string{j.Tree.Root + "/.git", j.Tree.Root + "/go.work"}, nil
			},
			Run: func(ctx context.Context, j *Job) (phase.Outcome, error) {
				if err := resolve(ctx, j); err != nil {
					return phase.Done, err
				}
				return phase.Unchanged("%s", j.Version.GitVersion), nil
			},
		},
		{
			Name:  "debug-packages",
			Short: "choose what a --debug build compiles with -N -l: the packages named, else the tree's packages changed since the last normal build",
			If: func(j *Job) (bool, string) {
				return j.Debug && len(j.treeComponents())+len(j.testComponents()) > 0, "not a debug build of the tree"
			},
			IO: func(j *Job) ([]string, []string) {
				return []string{StatePath(j.Tree.Root), j.Tree.Root}, nil
			},
			Run: phase.Method((*Job).chooseDebugPackages),
		},
		{
			Name:  "compile",
			Short: "go build the components in one invocation, CGO_ENABLED=0, -trimpath, version ldflags; skipped when no file of the tree changed since their recorded build with the same go and flags",
			If: func(j *Job) (bool, string) {
				return len(j.treeComponents()) > 0, "no tree component asked for"
			},
			IO: func(j *Job) ([]string, []string) { return j.compileIO(j.treeComponents()) },
			Run: func(ctx context.Context, j *Job) (phase.Outcome, error) {
				if err := compile(ctx, j); err != nil {
					return phase.Done, err
				}
				if cs := j.treeComponents(); j.reused[cs[0].Name] {
					return phase.Unchanged("%d already built from the same inputs (no file of the tree changed since)", len(cs)), nil
				}
				return phase.Done, nil
			},
		},
		{
			Name:  "test",
			Short: "go test -c the tree's test binaries (e2e.test), with the same flags and version ldflags",
			If: func(j *Job) (bool, string) {
				return len(j.testComponents()) > 0, "no test binary asked for"
			},
			IO:  func(j *Job) ([]string, []string) { return j.compileIO(j.testComponents()) },
			Run: func(ctx context.Context, j *Job) (phase.Outcome, error) { return phase.Done, compileTests(ctx, j) },
		},
	}
	for _, c := range Catalog {
		if c.External {
			ps = append(ps, modulePhase(c))
		}
	}
	return append(ps, &phase.Phase[*Job]{
		Name:  "record",
		Short: "hash the binaries, compare with the last build, record them in _output/devk/state.json",
		IO: func(j *Job) ([]string, []string) {
			return []string{j.BinDir()}, []string{StatePath(j.Tree.Root)}
		},
		Run: func(ctx context.Context, j *Job) (phase.Outcome, error) {
			if err := record(ctx, j); err != nil {
				return phase.Done, err
			}
			changed := 0
			for _, b := range j.Binaries {
				if b.Changed {
					changed++
				}
			}
			return phase.ChangedIf(changed > 0, "%d changed, %d unchanged", changed, len(j.Binaries)-changed), nil
		},
	})
}

// modulePhase builds external component c from its module.
func modulePhase(c Component) *phase.Phase[*Job] {
	return &phase.Phase[*Job]{
		Name:  c.Name,
		Short: fmt.Sprintf("go build %s from %s at %s", c.Binary, c.Package, pinnedVersions[c.Name].by),
		If: func(j *Job) (bool, string) {
			return j.wants(c.Name), c.Name + " not asked for"
		},
		IO: func(j *Job) ([]string, []string) {
			return []string{filepath.Join(j.Tree.Root, filepath.FromSlash(source.KubeadmConstantsFile)), c.Module + " (GOPROXY)"},
				[]string{j.BinaryPath(c)}
		},
		Run: func(ctx context.Context, j *Job) (phase.Outcome, error) {
			if err := compileModule(ctx, j, c); err != nil {
				return phase.Done, err
			}
			if j.reused[c.Name] {
				return phase.Unchanged("%s %s already built from the same inputs", c.Binary, j.pinned[c.Name]), nil
			}
			return phase.Done, nil
		},
	}
}

// Run builds the components of o and returns the job with its binaries.
func Run(ctx context.Context, o Options, popts phase.Options) (*Job, error) {
	j, err := NewJob(o)
	if err != nil {
		return nil, err
	}
	popts.Reporter = j.Reporter
	_, err = phase.Run(ctx, Phases(), j, popts)
	return j, err
}

func resolve(ctx context.Context, j *Job) error {
	v, err := j.Tree.Version(ctx)
	if err != nil {
		return err
	}
	j.Version = v
	j.goVersion, err = checkGo(ctx, j.Tree)
	return err
}

// checkGo refuses a toolchain older than the tree asks for, before go
// itself would try to download another; it returns the local go's
// version, "" when GOTOOLCHAIN names another.
func checkGo(ctx context.Context, t *source.Tree) (string, error) {
	minimum, release, err := t.GoVersions()
	if err != nil {
		return "", err
	}
	if tc := os.Getenv("GOTOOLCHAIN"); tc != "" && tc != "local" && tc != "auto" {
		return "", nil // the user chose a toolchain; go will use it
	}
	out, err := execx.Output(ctx, source.SelfGo("env", "GOVERSION"))
	if err != nil {
		return "", fmt.Errorf("no usable go command: %w (install Go %s or newer)", err, minimum)
	}
	have := strings.TrimSpace(string(out))
	if version.Compare(have, "go"+minimum) < 0 {
		want := minimum
		if release != "" {
			want = release
		}
		return "", fmt.Errorf("the tree needs Go %s or newer (go.work) and `go` here is %s: install Go %s, or export GOTOOLCHAIN=go%s",
			minimum, strings.TrimPrefix(have, "go"), want, want)
	}
	return have, nil
}

// LDFlags are the version flags hack/lib/version.sh gives, for both
// k8s.io/component-base/version and k8s.io/client-go/pkg/version.
func LDFlags(v source.Version) []string {
	var out []string
	for _, kv := range [][2]string{
		{"buildDate", v.BuildDate},
		{"gitCommit", v.GitCommit},
		{"gitTreeState", v.GitTreeState},
		{"gitVersion", v.GitVersion},
		{"gitMajor", v.GitMajor},
		{"gitMinor", v.GitMinor},
	} {
		for _, pkg := range []string{"k8s.io/client-go/pkg/version", "k8s.io/component-base/version"} {
			out = append(out, fmt.Sprintf("-X '%s.%s=%s'", pkg, kv[0], kv[1]))
		}
	}
	return out
}

func (j *Job) env() []string { return append([]string{"CGO_ENABLED=0"}, GoEnv(j.Platform)...) }

// GoEnv is the go command's environment for a (validated) os/arch
// platform: GOOS and GOARCH.
func GoEnv(platform string) []string {
	goos, goarch, _ := strings.Cut(platform, "/")
	return []string{"GOOS=" + goos, "GOARCH=" + goarch}
}

// commonFlags are the go build flags every component gets; a debug
// build's (debug) compiles the packages debugPkgs match with -N -l (a
// package several match takes the last match's flags, as go does).
func (j *Job) commonFlags(ldflags []string, debug bool, debugPkgs []string) []string {
	args := []string{"build", "-trimpath", "-buildvcs=false"}
	if debug {
		for _, p := range debugPkgs {
			args = append(args, "-gcflags="+p+"="+debugGCFlags)
		}
	} else {
		ldflags = append(ldflags, "-s", "-w") // as `make` does unless DBG=1
	}
	if j.LDFlags != "" {
		ldflags = append(ldflags, j.LDFlags)
	}
	args = append(args, "-ldflags="+strings.Join(ldflags, " "))
	return append(args, j.GoFlags...)
}

func compile(ctx context.Context, j *Job) error {
	dir := j.binDirOf(j.Debug)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var pkgs []string
	for _, c := range j.treeComponents() {
		pkgs = append(pkgs, c.Package)
	}
	args := append(append(j.commonFlags(LDFlags(j.Version), j.Debug, j.debugPkgs), "-o", dir+"/"), pkgs...)
	cmd := execx.Cmd{Name: "go", Args: args, Dir: j.Tree.Root, Env: j.env()}
	t0 := time.Now()
	in, err := treeInputs(j.goVersion, j.Tree, cmd)
	if err != nil {
		return err
	}
	reuse := in != ""
	for _, c := range j.treeComponents() {
		j.inputs[c.Name] = in
		if reuse {
			if reuse, err = j.unchangedBuild(c); err != nil {
				return err
			}
		}
	}
	if reuse {
		for _, c := range j.treeComponents() {
			j.reused[c.Name] = true
		}
		j.Reporter.Debugf("go build skipped: no file of the tree changed since the build of %d components (inputs %.12s)", len(pkgs), in)
		return nil
	}
	j.Reporter.Debugf("%s", cmd)
	j.compiledAt = t0
	err = j.goBuild(ctx, cmd, pkgs)
	for _, c := range j.treeComponents() {
		j.took[c.Name] = time.Since(t0) // one go build for them all
	}
	if err != nil {
		return fmt.Errorf("compile failed:\n%w", err)
	}
	return nil
}

// compileModule builds external component c in a small module of its
// own, outside the tree's workspace, that requires c's module at the
// pinned version: go's build list is then the one c's own go.mod gives,
// and every module comes from the Go module proxy. The binary is stamped
// as c's project stamps its releases.
func compileModule(ctx context.Context, j *Job, c Component) error {
	v := j.pinned[c.Name] // checked by NewJob
	_, main := j.modulePackage(c)
	dir, err := writeBuildModule(j.Tree, c, v, main)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(j.BinaryPath(c)), 0o755); err != nil {
		return err
	}
	cmd := j.moduleBuildCmd(c, dir)
	j.inputs[c.Name] = moduleInputs(j.goVersion, cmd, main)
	if reuse, err := j.unchangedBuild(c); err != nil || reuse {
		j.reused[c.Name] = reuse
		return err
	}
	j.Reporter.Debugf("%s", cmd)
	t0 := time.Now()
	err = j.goBuild(ctx, cmd, []string{c.Package})
	j.took[c.Name] = time.Since(t0)
	if err != nil {
		return fmt.Errorf("%s %s failed to build (%s):\n%w", c.Name, v, pinnedVersions[c.Name].remedy(), err)
	}
	return nil
}

// moduleBuildCmd is the go build of external component c, at its pinned
// version, in the build module at dir: outside any workspace, stamped
// with the version at c.StampVar.
func (j *Job) moduleBuildCmd(c Component, dir string) execx.Cmd {
	pkg, _ := j.modulePackage(c)
	args := j.commonFlags([]string{"-X " + c.StampVar + "=" + j.pinned[c.Name]}, j.DebugBuild(c), j.debugPackagesOf(c))
	args = append(args, "-o", j.BinaryPath(c), pkg)
	env := append(j.env(), "GOWORK=off", "GOFLAGS=-mod=mod")
	return execx.Cmd{Name: "go", Args: args, Dir: dir, Env: env}
}

// modulePackage is the package an external component's build names, and
// the main.go devk writes for it, if any: CoreDNS's own main, or with
// devk's plugins (the default) devk's main in the build module (".").
func (j *Job) modulePackage(c Component) (pkg string, main []byte) {
	if c.Name == CoreDNS && j.CoreDNSPlugins != CoreDNSPluginsAll {
		return ".", coreDNSMain()
	}
	return c.Package, nil
}

// compileTests builds each test component with go test -c: the flags
// and version stamp of compile, so e2e.test reports the version the
// components do (the e2e framework and devk e2e compare it with the
// cluster's).
func compileTests(ctx context.Context, j *Job) error {
	if err := os.MkdirAll(j.binDirOf(j.Debug), 0o755); err != nil {
		return err
	}
	if j.compiledAt.IsZero() {
		j.compiledAt = time.Now()
	}
	for _, c := range j.testComponents() {
		args := j.commonFlags(LDFlags(j.Version), j.Debug, j.debugPkgs)
		args = append([]string{"test", "-c"}, args[1:]...) // commonFlags start with "build"
		args = append(args, "-o", j.BinaryPath(c), c.Package)
		cmd := execx.Cmd{Name: "go", Args: args, Dir: j.Tree.Root, Env: j.env(), Stdout: j.Log, Stderr: j.Log}
		j.Reporter.Debugf("%s", cmd)
		t0 := time.Now()
		err := execx.Run(ctx, cmd)
		j.took[c.Name] = time.Since(t0)
		if err != nil {
			return fmt.Errorf("compile %s failed:\n%w", c.File(), err)
		}
	}
	return nil
}

// moduleInputs names what an external component's binary is made from:
// the go command (the module at its version, which the checksum database
// pins, the flags and the stamp) with its environment, and the Go
// toolchain's version; "" when the toolchain is not known. A module
// build's output depends on nothing else.
func moduleInputs(goVersion string, cmd execx.Cmd, main []byte) string {
	if goVersion == "" {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n%q\n%q\n", goVersion, cmd.Args, cmd.Env, goEnviron())
	if main != nil {
		fmt.Fprintf(h, "main.go\n%s", main)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// goEnviron is the process's GO* and CGO_* variables that change what go
// build makes (GOFLAGS, GOEXPERIMENT, GOAMD64, …): not those that only say
// where go keeps its caches or how it downloads.
func goEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "GO") || strings.HasPrefix(k, "CGO_")) && !goCacheOnlyEnv[k] {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}

var goCacheOnlyEnv = map[string]bool{
	"GOCACHE": true, "GOMODCACHE": true, "GOPATH": true, "GOTMPDIR": true, "GOMAXPROCS": true, "GOTELEMETRY": true,
	"GOPROXY": true, "GONOPROXY": true, "GOPRIVATE": true, "GONOSUMDB": true, "GOSUMDB": true, "GOINSECURE": true, "GOAUTH": true,
}

// unchangedBuild says whether component c's binary is the one
// state.json records as made from the inputs j.inputs names (an external
// component's moduleInputs, the tree's treeInputs), unchanged since (the
// same Go build ID and size): then go build would only rebuild it to the
// same bytes, which takes seconds.
func (j *Job) unchangedBuild(c Component) (bool, error) {
	in := j.inputs[c.Name]
	if in == "" {
		return false, nil
	}
	st, err := LoadState(j.Tree.Root)
	if err != nil {
		return false, err
	}
	rec := st.Component(c.Name).BinaryOf(j.DebugBuild(c))
	path := j.BinaryPath(c)
	if rec == nil || rec.Inputs != in || rec.Path != path || rec.Platform != j.Platform || rec.BuildID == "" {
		return false, nil
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != rec.Size {
		return false, nil
	}
	id, err := GoBuildID(path)
	return err == nil && id == rec.BuildID, nil
}

// writeBuildModule writes the go.mod of the module that builds c at
// version v, at _output/devk/<name>-build/<v>, and its main.go when main
// is not nil (a main package of devk's making, as CoreDNS's with devk's
// plugins), and returns its directory.
// The directory is made through an os.Root at the tree, so neither ".."
// nor a symbolic link in the tree takes the write outside it. The go.sum
// beside it is go's: kept, it makes the next build need nothing new.
func writeBuildModule(t *source.Tree, c Component, v string, main []byte) (string, error) {
	dir, err := validname.PathIn(t.OutputDir(), c.Name+"-build", v)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(t.Root, dir)
	if err != nil {
		return "", err
	}
	root, err := os.OpenRoot(t.Root)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return "", fmt.Errorf("%s build module: %w", c.Name, err)
	}
	gomod := fmt.Sprintf("module devk.local/%s-build\n\ngo 1.24\n\nrequire %s %s\n", c.Name, c.Module, v)
	path := filepath.Join(rel, "go.mod")
	if old, err := root.ReadFile(path); err != nil || !strings.HasPrefix(string(old), gomod) {
		if err := root.WriteFile(path, []byte(gomod), 0o644); err != nil {
			return "", fmt.Errorf("%s build module: %w", c.Name, err)
		}
	}
	if main != nil {
		path := filepath.Join(rel, "main.go")
		if old, err := root.ReadFile(path); err != nil || !bytes.Equal(old, main) {
			if err := root.WriteFile(path, main, 0o644); err != nil {
				return "", fmt.Errorf("%s build module: %w", c.Name, err)
			}
		}
	}
	return dir, nil
}

func record(ctx context.Context, j *Job) error {
	return UpdateState(j.Tree.Root, func(st *StateFile) error {
		j.Binaries = j.Binaries[:0]
		for _, c := range j.Components {
			if err := ctx.Err(); err != nil {
				return err
			}
			path := j.BinaryPath(c)
			fi, err := os.Stat(path)
			if err != nil {
				return fmt.Errorf("%s was not produced: %w", path, err)
			}
			debug := j.DebugBuild(c)
			prev := st.Component(c.Name).BinaryOf(debug)
			id, err := GoBuildID(path)
			if err != nil {
				return fmt.Errorf("read the build ID of %s: %w", path, err)
			}
			var sum string
			// The same Go build ID and size mean the same bytes: skip
			// hashing (go build rewrites an up-to-date binary's mtime, so
			// that cannot tell).
			if prev != nil && id != "" && prev.BuildID == id && prev.Path == path && prev.Size == fi.Size() && prev.Platform == j.Platform {
				sum = prev.SHA256
			} else if sum, err = FileSHA256(path); err != nil {
				return err
			}
			version := j.Version.GitVersion
			compiledAt := j.compiledAt
			if c.External {
				version, compiledAt = j.pinned[c.Name], time.Time{}
			} else if compiledAt.IsZero() && prev != nil {
				compiledAt = prev.CompiledAt // compile skipped: the binary is the last one's
			}
			var debugPkgs []string
			if debug {
				debugPkgs = j.debugPackagesOf(c)
			}
			b := Binary{Component: c, Name: c.Name, Path: path, SHA256: sum, Size: fi.Size(), Version: version,
				Debug: debug, DebugPackages: debugPkgs, Took: j.took[c.Name],
				Changed: prev == nil || prev.SHA256 != sum || prev.Platform != j.Platform}
			j.Binaries = append(j.Binaries, b)
			st.Component(c.Name).setBinary(debug, &BinaryRecord{
				Path: path, SHA256: sum, Size: fi.Size(), ModTime: fi.ModTime(), BuildID: id, Inputs: j.inputs[c.Name], Platform: j.Platform,
				Version: version, BuiltAt: time.Now().UTC(), CompiledAt: compiledAt.UTC(), DebugPackages: debugPkgs,
			})
		}
		return nil
	})
}

// FileSHA256 is the hex sha256 of a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
