package build

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
)

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []string
		wantErr string
	}{
		{name: "short name", args: []string{"apiserver"}, want: []string{"apiserver"}},
		{name: "kube- name", args: []string{"kube-apiserver"}, want: []string{"apiserver"}},
		{name: "catalog order, no duplicates", args: []string{"kubectl", "apiserver", "kube-apiserver"}, want: []string{"apiserver", "kubectl"}},
		{name: "all but etcd", args: []string{"all"}, want: []string{"apiserver", "controller-manager", "scheduler", "kubelet", "kubectl", "kube-proxy", "kubeadm"}},
		{name: "etcd when named", args: []string{"all", "etcd"}, want: []string{"apiserver", "controller-manager", "scheduler", "kubelet", "kubectl", "kube-proxy", "kubeadm", "etcd"}},
		{name: "coredns when named", args: []string{"coredns", "kubectl"}, want: []string{"kubectl", "coredns"}},
		{name: "unknown lists the valid ones", args: []string{"apiservr"}, wantErr: "use one of apiserver, controller-manager, scheduler, kubelet, kubectl, kube-proxy, kubeadm, etcd, coredns, e2e, ginkgo, dlv, kwok, or all"},
		{name: "e2e brings ginkgo, all leaves both out", args: []string{"e2e", "all"}, want: []string{"apiserver", "controller-manager", "scheduler", "kubelet", "kubectl", "kube-proxy", "kubeadm", "e2e", "ginkgo"}},
		{name: "ginkgo alone", args: []string{"ginkgo"}, want: []string{"ginkgo"}},
		{name: "dlv when named, all leaves it out", args: []string{"all", "dlv"}, want: []string{"apiserver", "controller-manager", "scheduler", "kubelet", "kubectl", "kube-proxy", "kubeadm", "dlv"}},
		{name: "kwok when named, all leaves it out", args: []string{"kwok", "all"}, want: []string{"apiserver", "controller-manager", "scheduler", "kubelet", "kubectl", "kube-proxy", "kubeadm", "kwok"}},
		{name: "a package path is not a component here", args: []string{"./test/images/agnhost"}, wantErr: "only `devk build` and `devk push` take"},
		{name: "none", args: nil, wantErr: "name a component"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.args)
			if testutil.WantErr(t, err, tc.wantErr) {
				return
			}
			var names []string
			for _, c := range got {
				names = append(names, c.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", names, tc.want)
			}
		})
	}
}

func build(t *testing.T, root string, comps ...string) *Job {
	t.Helper()
	j, err := Run(context.Background(), Options{TreeDir: root, Components: comps}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

type stamped struct {
	GitVersion, Major, Minor, GitCommit, GitTreeState, BuildDate string
}

func runBinary(t *testing.T, path string) stamped {
	t.Helper()
	out, err := exec.Command(path).Output()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var v struct {
		stamped
		ClientVersion *stamped `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s printed %q: %v", path, out, err)
	}
	if v.ClientVersion != nil {
		return *v.ClientVersion
	}
	return v.stamped
}

func changed(j *Job) map[string]bool {
	m := map[string]bool{}
	for _, b := range j.Binaries {
		m[b.Name] = b.Changed
	}
	return m
}

// TestBuildStampsAndDetectsChanges runs real go builds of the fixture tree:
// version stamping in both version packages, byte-identical rebuilds, and
// change detection that follows the import graph.
func TestBuildStampsAndDetectsChanges(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	root := testtree.New(t)
	j := build(t, root, "kube-apiserver", "kubectl")
	want, err := (&source.Tree{Root: root}).Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := changed(j); !c["apiserver"] || !c["kubectl"] || len(c) != 2 {
		t.Fatalf("first build: changed = %v", c)
	}
	for _, b := range j.Binaries {
		if filepath.Dir(b.Path) != filepath.Join(root, "_output", "devk", "bin", "linux_amd64") && !strings.HasSuffix(filepath.Dir(b.Path), "linux_arm64") {
			t.Errorf("%s is not in _output/devk/bin/<os>_<arch>", b.Path)
		}
		got := runBinary(t, b.Path)
		if got.GitVersion != "v1.34.0" || got.Major != "1" || got.Minor != "34" || got.GitCommit != want.GitCommit ||
			got.GitTreeState != "clean" || got.BuildDate != want.BuildDate {
			t.Errorf("%s stamped %+v, want %+v", b.Name, got, want)
		}
	}

	// No change: same bytes, reported unchanged.
	j2 := build(t, root, "apiserver", "kubectl")
	if c := changed(j2); c["apiserver"] || c["kubectl"] {
		t.Fatalf("no-op rebuild: changed = %v", c)
	}
	if j.Binaries[0].SHA256 != j2.Binaries[0].SHA256 {
		t.Fatal("no-op rebuild changed the apiserver's bytes")
	}
	// record knows an unchanged binary by its Go build ID (go build
	// touches it): a sha256 planted in state.json is carried over by a
	// no-op build, so the binary was not hashed again.
	out, err := exec.Command("go", "tool", "buildid", j2.Binaries[0].Path).Output()
	if err != nil {
		t.Fatal(err)
	}
	planted := strings.Repeat("0", 64)
	if err := UpdateState(root, func(st *StateFile) error {
		rec := st.Component("apiserver").Binary
		if got := strings.TrimSpace(string(out)); rec.BuildID != got {
			t.Errorf("state.json build ID %q, go tool buildid says %q", rec.BuildID, got)
		}
		rec.SHA256 = planted
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if j := build(t, root, "apiserver"); j.Binaries[0].SHA256 != planted {
		t.Fatalf("a no-op build hashed the binary again (sha256 %s)", j.Binaries[0].SHA256)
	}

	// An edit in component-base reaches the apiserver only; kubectl
	// imports client-go. The tree is now dirty, which is stamped too.
	editComponentBase(t, root)
	t.Setenv("SOURCE_DATE_EPOCH", "0") // keep buildDate fixed; only gitVersion/treeState change
	j3 := build(t, root, "apiserver")
	if c := changed(j3); !c["apiserver"] {
		t.Fatalf("after an edit: changed = %v", c)
	}
	if sum, err := FileSHA256(j3.Binaries[0].Path); err != nil || sum != j3.Binaries[0].SHA256 {
		t.Fatalf("after an edit: recorded sha256 %s, the file's %s (%v)", j3.Binaries[0].SHA256, sum, err)
	}
	if got := runBinary(t, j3.Binaries[0].Path); got.GitVersion != "v1.34.0-dirty" || got.GitTreeState != "dirty" || got.Minor != "34+" {
		t.Fatalf("dirty build stamped %+v", got)
	}

	st, err := LoadState(root)
	if err != nil {
		t.Fatal(err)
	}
	if rec := st.Components["apiserver"].Binary; rec == nil || rec.SHA256 != j3.Binaries[0].SHA256 || rec.Version != "v1.34.0-dirty" {
		t.Fatalf("state.json apiserver = %+v", rec)
	}
}

// editComponentBase adds a function to the fixture's
// k8s.io/component-base/version, which the apiserver links and kubectl
// does not.
func editComponentBase(t *testing.T, root string) {
	t.Helper()
	vfile := filepath.Join(root, "staging", "src", "k8s.io", "component-base", "version", "version.go")
	f, err := os.OpenFile(vfile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\nfunc Extra() string { return \"extra\" }\n"); err != nil {
		t.Fatal(err)
	}
}

func TestBuildCompileErrorIsVerbatim(t *testing.T) {
	root := testtree.New(t)
	main := filepath.Join(root, "cmd", "kube-apiserver", "main.go")
	data, _ := os.ReadFile(main)
	os.WriteFile(main, append(data, []byte("\nfunc broken() { undefinedThing() }\n")...), 0o644)
	_, err := Run(context.Background(), Options{TreeDir: root, Components: []string{"apiserver"}}, phase.Options{})
	if err == nil {
		t.Fatal("a broken tree built")
	}
	for _, want := range []string{"phase compile", "go build -trimpath", "./cmd/kube-apiserver", "undefined: undefinedThing", "main.go"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// go build runs with -v -json for progress: the error still carries
	// the text go build prints without them, not events or package names.
	for _, notWant := range []string{"ImportPath", "\nk8s.io/component-base/version\n"} {
		if strings.Contains(err.Error(), notWant) {
			t.Errorf("error has %q:\n%v", notWant, err)
		}
	}
}

func TestBuildOutsideTree(t *testing.T) {
	_, err := Run(context.Background(), Options{TreeDir: t.TempDir(), Components: []string{"apiserver"}}, phase.Options{})
	if !errors.Is(err, source.ErrNoTree) || !strings.Contains(err.Error(), "devk source get") {
		t.Fatalf("err = %v", err)
	}
}

func TestBuildRefusesOldGo(t *testing.T) {
	root := testtree.Copy(t)
	work := filepath.Join(root, "go.work")
	data, _ := os.ReadFile(work)
	os.WriteFile(work, []byte(strings.Replace(string(data), "go 1.24.0", "go 1.99.0", 1)), 0o644)
	t.Setenv("GOTOOLCHAIN", "")
	_, err := checkGo(context.Background(), &source.Tree{Root: root})
	if err == nil || !strings.Contains(err.Error(), "needs Go 1.99.0 or newer") || !strings.Contains(err.Error(), "GOTOOLCHAIN=go1.24.12") {
		t.Fatalf("err = %v", err)
	}
}

func TestBuildCrossPlatformAndDebug(t *testing.T) {
	root := testtree.New(t)
	j, err := Run(context.Background(), Options{TreeDir: root, Components: []string{"kubectl"}, Platform: "linux/arm64", Debug: true, DebugPackages: []string{DebugAll}}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := j.Binaries[0]
	if !strings.HasSuffix(b.Path, "bin/linux_arm64-debug/kubectl") {
		t.Fatalf("path = %s", b.Path)
	}
	data, err := os.ReadFile(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	// ELF e_machine 0xB7 is AArch64.
	if len(data) < 20 || string(data[1:4]) != "ELF" || data[18] != 0xB7 {
		t.Fatalf("%s is not a linux/arm64 ELF", b.Path)
	}
	// --debug keeps DWARF; the default strips it (-s -w), as make does.
	if !hasDWARF(t, b.Path) {
		t.Error("--debug binary has no DWARF")
	}
	j = build(t, root, "kubectl")
	if hasDWARF(t, j.Binaries[0].Path) {
		t.Error("default binary kept DWARF")
	}
	if _, err := NewJob(Options{TreeDir: root, Components: []string{"kubectl"}, Platform: "arm64"}); err == nil {
		t.Fatal("--platform arm64 accepted")
	}
}

func hasDWARF(t *testing.T, path string) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Section(".debug_info") != nil
}

func TestGoBuildIDOfNonELF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if id, err := GoBuildID(path); id != "" || err != nil {
		t.Fatalf("GoBuildID of a script = %q, %v; want none", id, err)
	}
	if _, err := GoBuildID(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("GoBuildID of a missing file: no error")
	}
}

// TestModuleBuildReuse: an external component is not built again while
// its binary is the one state.json records for the same inputs; a
// different toolchain, flag or environment, or a changed binary, builds
// it again.
func TestModuleBuildReuse(t *testing.T) {
	root := testtree.New(t)
	j, err := NewJob(Options{TreeDir: root, Components: []string{"etcd"}})
	if err != nil {
		t.Fatal(err)
	}
	etcd := j.Components[0]
	// Any Go binary stands in for etcd: this test's own.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	path := j.BinaryPath(etcd)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := execx.Cmd{Name: "go", Args: []string{"build", "-o", path, etcd.Package}, Env: j.env()}
	j.goVersion = "go1.26.0"
	j.inputs[etcd.Name] = moduleInputs(j.goVersion, cmd, nil)
	if reuse, err := j.unchangedBuild(etcd); reuse || err != nil {
		t.Fatalf("nothing recorded yet: reuse = %v, %v", reuse, err)
	}
	j.Version = source.Version{GitVersion: "v1.34.0"}
	if err := record(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if reuse, err := j.unchangedBuild(etcd); !reuse || err != nil {
		t.Fatalf("recorded, unchanged: reuse = %v, %v", reuse, err)
	}

	t.Setenv("GOCACHE", t.TempDir()) // where go caches: the same build
	if moduleInputs(j.goVersion, cmd, nil) != j.inputs[etcd.Name] {
		t.Error("GOCACHE changed the inputs")
	}
	for name, in := range map[string]func() string{
		"another toolchain": func() string { return moduleInputs("go1.26.1", cmd, nil) },
		"GOEXPERIMENT":      func() string { t.Setenv("GOEXPERIMENT", "loopvar"); return moduleInputs(j.goVersion, cmd, nil) },
		"another flag": func() string {
			c := cmd
			c.Args = append([]string{"-race"}, cmd.Args...)
			return moduleInputs(j.goVersion, c, nil)
		},
		"a main package of devk's": func() string { return moduleInputs(j.goVersion, cmd, coreDNSMain()) },
	} {
		if in() == j.inputs[etcd.Name] {
			t.Errorf("%s: the same inputs", name)
		}
	}
	if moduleInputs("", cmd, nil) != "" {
		t.Error("an unknown toolchain has inputs: it must always build")
	}

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	if reuse, _ := j.unchangedBuild(etcd); reuse {
		t.Fatal("a changed binary is reused")
	}
}

// TestBuildTestBinary compiles the fixture's test/e2e with go test -c, as
// `devk build e2e` compiles the tree's suite: <name>.test in the bin
// directory, stamped like the components, recorded, unchanged on a no-op
// rebuild. (ginkgo, which e2e brings, needs the real tree's module graph;
// the e2e suite builds it.)
func TestBuildTestBinary(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	root := testtree.New(t)
	suite := Component{Name: E2E, Binary: "e2e", Package: "./test/e2e", Tool: true, Test: true}
	run := func() *Job {
		j, err := NewJob(Options{TreeDir: root, Components: []string{"kubectl"}})
		if err != nil {
			t.Fatal(err)
		}
		j.Components = append(j.Components, suite)
		if _, err := phase.Run(context.Background(), Phases(), j, phase.Options{}); err != nil {
			t.Fatal(err)
		}
		return j
	}
	j := run()
	want, err := j.Tree.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(j.BinDir(), "e2e.test")
	if got := changed(j); !got[E2E] || !got["kubectl"] {
		t.Fatalf("first build: changed = %v", got)
	}
	if j.Binaries[1].Path != path {
		t.Fatalf("e2e built at %s, want %s", j.Binaries[1].Path, path)
	}
	if got := runBinary(t, path); got.GitVersion != want.GitVersion || got.GitCommit != want.GitCommit || got.BuildDate != want.BuildDate {
		t.Errorf("e2e.test stamped %+v, want %+v", got, want)
	}
	if got := changed(run()); got[E2E] {
		t.Fatalf("no-op rebuild: changed = %v", got)
	}
}

// TestTreeBuildReuse: go build of the tree's components is skipped while
// no file of the tree changed since the recorded build from the same
// inputs (a second build reports them reused, same bytes); a file
// touched, added or removed, or another GOFLAGS, runs go build again; a
// go.mod that replaces a module with a directory outside the tree turns
// the check off (its files are not walked).
func TestTreeBuildReuse(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "0")
	root := testtree.New(t)
	first := build(t, root, "apiserver")
	if first.reused["apiserver"] {
		t.Fatal("the first build reused a binary")
	}
	again := build(t, root, "apiserver")
	if !again.reused["apiserver"] || again.Binaries[0].Changed || again.Binaries[0].SHA256 != first.Binaries[0].SHA256 {
		t.Fatalf("an unchanged tree: reused %v, changed %v", again.reused["apiserver"], again.Binaries[0].Changed)
	}
	vfile := filepath.Join(root, "staging", "src", "k8s.io", "component-base", "version", "version.go")
	later := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name   string
		change func(t *testing.T)
	}{
		{"a file touched", func(t *testing.T) {
			if err := os.Chtimes(vfile, later, later); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file added", func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(root, "staging", "src", "k8s.io", "component-base", "version", "NOTES"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file removed", func(t *testing.T) {
			if err := os.Remove(filepath.Join(root, "staging", "src", "k8s.io", "component-base", "version", "NOTES")); err != nil {
				t.Fatal(err)
			}
		}},
		{"GOFLAGS", func(t *testing.T) { t.Setenv("GOFLAGS", "-tags=devkreuse") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.change(t)
			if j := build(t, root, "apiserver"); j.reused["apiserver"] {
				t.Fatalf("%s: go build skipped", tc.name)
			}
			if j := build(t, root, "apiserver"); !j.reused["apiserver"] {
				t.Fatalf("%s, then nothing: go build ran again", tc.name)
			}
		})
	}

	outside := t.TempDir()
	gomod := filepath.Join(root, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gomod, append(data, "\nreplace example.com/dep => "+outside+"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := localModulesOutside(root); err != nil || !out {
		t.Fatalf("a replace with %s: outside %v (%v), want true", outside, out, err)
	}
	if in, err := treeInputs("go1.26.0", &source.Tree{Root: root}, execx.Cmd{}); err != nil || in != "" {
		t.Fatalf("treeInputs with a module outside the tree: %q (%v), want none", in, err)
	}
	if err := os.WriteFile(gomod, append(data, "\nreplace example.com/dep => ./staging/src/k8s.io/api\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := localModulesOutside(root); err != nil || out {
		t.Fatalf("a replace inside the tree: outside %v (%v), want false", out, err)
	}
}
