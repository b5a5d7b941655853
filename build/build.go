package build

import (
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
	// Debug builds for a debugger: no optimisation, no inlining, symbols kept.
	Debug bool
	// GoFlags are extra `go build` flags, passed through.
	GoFlags []string
	// LDFlags are appended to the version ldflags.
	LDFlags string
	// EtcdVersion and CoreDNSVersion override the versions the tree's
	// kubeadm names.
	EtcdVersion    string
	CoreDNSVersion string

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
	Version string        `json:"version"`
	Changed bool          `json:"changed"`
	Took    time.Duration `json:"took"`
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

	binDir string
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
	binDir, err := validname.PathIn(tree.OutputDir(), "bin", strings.ReplaceAll(platform, "/", "_"))
	if err != nil {
		return nil, err
	}
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	return &Job{Options: o, Tree: tree, Components: comps, Platform: platform, binDir: binDir,
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
// flag that overrides it (checked by parse; none for dlv) or fromTree,
// what the tree's kubeadm names or devk's pin; by says which, for help.
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
	Delve:   {"", nil, func(*source.Tree) (string, error) { return DelveVersion, nil }, "devk's pin (" + DelveVersion + ")"},
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

// BinDir is where binaries for the job's platform go.
func (j *Job) BinDir() string { return j.binDir }

// BinaryPath is where a component's binary goes.
func (j *Job) BinaryPath(c Component) string { return filepath.Join(j.BinDir(), c.File()) }

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
			Name:  "compile",
			Short: "go build the components in one invocation, CGO_ENABLED=0, -trimpath, version ldflags",
			If: func(j *Job) (bool, string) {
				return len(j.treeComponents()) > 0, "no tree component asked for"
			},
			IO: func(j *Job) ([]string, []string) {
				var reads, writes []string
				for _, c := range j.treeComponents() {
					reads = append(reads, filepath.Join(j.Tree.Root, c.Package))
					writes = append(writes, j.BinaryPath(c))
				}
				return reads, writes
			},
			Run: func(ctx context.Context, j *Job) (phase.Outcome, error) { return phase.Done, compile(ctx, j) },
		},
		{
			Name:  "test",
			Short: "go test -c the tree's test binaries (e2e.test), with the same flags and version ldflags",
			If: func(j *Job) (bool, string) {
				return len(j.testComponents()) > 0, "no test binary asked for"
			},
			IO: func(j *Job) ([]string, []string) {
				var reads, writes []string
				for _, c := range j.testComponents() {
					reads = append(reads, filepath.Join(j.Tree.Root, c.Package))
					writes = append(writes, j.BinaryPath(c))
				}
				return reads, writes
			},
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

// commonFlags are the go build flags every component gets.
func (j *Job) commonFlags(ldflags []string) []string {
	args := []string{"build", "-trimpath", "-buildvcs=false"}
	if j.Debug {
		args = append(args, "-gcflags=all=-N -l")
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
	if err := os.MkdirAll(j.BinDir(), 0o755); err != nil {
		return err
	}
	var pkgs []string
	for _, c := range j.treeComponents() {
		pkgs = append(pkgs, c.Package)
	}
	args := append(append(j.commonFlags(LDFlags(j.Version)), "-o", j.BinDir()+"/"), pkgs...)
	cmd := execx.Cmd{Name: "go", Args: args, Dir: j.Tree.Root, Env: j.env()}
	j.Reporter.Debugf("%s", cmd)
	t0 := time.Now()
	err := j.goBuild(ctx, cmd, pkgs)
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
	dir, err := writeBuildModule(j.Tree, c, v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(j.BinDir(), 0o755); err != nil {
		return err
	}
	args := j.commonFlags([]string{"-X " + c.StampVar + "=" + v})
	args = append(args, "-o", j.BinaryPath(c), c.Package)
	env := append(j.env(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd := execx.Cmd{Name: "go", Args: args, Dir: dir, Env: env}
	j.inputs[c.Name] = moduleInputs(j.goVersion, cmd)
	if reuse, err := j.unchangedModuleBuild(c); err != nil || reuse {
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

// compileTests builds each test component with go test -c: the flags
// and version stamp of compile, so e2e.test reports the version the
// components do (the e2e framework and devk e2e compare it with the
// cluster's).
func compileTests(ctx context.Context, j *Job) error {
	if err := os.MkdirAll(j.BinDir(), 0o755); err != nil {
		return err
	}
	for _, c := range j.testComponents() {
		args := j.commonFlags(LDFlags(j.Version))
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
func moduleInputs(goVersion string, cmd execx.Cmd) string {
	if goVersion == "" {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n%q\n%q\n", goVersion, cmd.Args, cmd.Env, goEnviron())
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

// unchangedModuleBuild says whether the external component c's binary is
// the one state.json records as made from the inputs j.inputs names,
// unchanged since (the same Go build ID and size): then go build would
// only rebuild it to the same bytes, which takes a second.
func (j *Job) unchangedModuleBuild(c Component) (bool, error) {
	in := j.inputs[c.Name]
	if in == "" {
		return false, nil
	}
	st, err := LoadState(j.Tree.Root)
	if err != nil {
		return false, err
	}
	rec := st.Component(c.Name).Binary
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
// version v, at _output/devk/<name>-build/<v>, and returns its directory.
// The directory is made through an os.Root at the tree, so neither ".."
// nor a symbolic link in the tree takes the write outside it. The go.sum
// beside it is go's: kept, it makes the next build need nothing new.
func writeBuildModule(t *source.Tree, c Component, v string) (string, error) {
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
			prev := st.Component(c.Name).Binary
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
			if c.External {
				version = j.pinned[c.Name]
			}
			b := Binary{Component: c, Name: c.Name, Path: path, SHA256: sum, Size: fi.Size(), Version: version, Took: j.took[c.Name],
				Changed: prev == nil || prev.SHA256 != sum || prev.Platform != j.Platform}
			j.Binaries = append(j.Binaries, b)
			st.Component(c.Name).Binary = &BinaryRecord{
				Path: path, SHA256: sum, Size: fi.Size(), ModTime: fi.ModTime(), BuildID: id, Inputs: j.inputs[c.Name], Platform: j.Platform,
				Version: version, BuiltAt: time.Now().UTC(),
			}
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
