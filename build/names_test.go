package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

// setEtcdVersion makes the tree's kubeadm constants name v.
func setEtcdVersion(t *testing.T, root, v string) {
	setConst(t, root, "DefaultEtcdVersion", "3.6.5-0", v)
}

// setConst changes the value of a string constant of the tree's kubeadm
// constants from was to v.
func setConst(t *testing.T, root, name, was, v string) {
	t.Helper()
	path := filepath.Join(root, "cmd", "kubeadm", "app", "constants", "constants.go")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(data), name+` = "`+was+`"`, name+` = "`+v+`"`, 1)
	if out == string(data) {
		t.Fatalf("the fixture's %s is no longer %s", name, was)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBuildRefusesEtcdVersionPaths: an etcd version from --etcd-version or
// from the tree's DefaultEtcdVersion used to become a directory under
// _output/devk/etcd-build, so "v1/../../../../victim" wrote a go.mod
// outside it. Such versions are refused before anything is written: the
// tree (its .git included) and a victim directory beside it hash the same
// before and after. CoreDNS's version (--coredns-version, CoreDNSVersion)
// becomes a directory the same way and is refused the same way.
func TestBuildRefusesEtcdVersionPaths(t *testing.T) {
	attacks := []struct {
		name    string
		version string
	}{
		{"the reported string", "v1/../../../../victim"},
		{"one more level, beside the tree", "v1/../../../../../victim"},
		{"absolute", "/tmp/victim"},
		{"after a valid version", "v3.6.5/../../../../../victim"},
		{"NUL", "v3.6.5\x00"},
	}
	components := []struct {
		name, constant, was, what, example string
		set                                func(*Options, string)
	}{
		{"etcd", "DefaultEtcdVersion", "3.6.5-0", "etcd version", "e.g. v3.6.5", func(o *Options, v string) { o.EtcdVersion = v }},
		{"coredns", "CoreDNSVersion", "v1.12.1", "CoreDNS version", "e.g. v1.12.1", func(o *Options, v string) { o.CoreDNSVersion = v }},
	}
	for _, comp := range components {
		for _, from := range []string{"flag", "tree"} {
			for _, a := range attacks {
				t.Run(comp.name+"/"+from+"/"+a.name, func(t *testing.T) {
					root := testtree.Copy(t)
					if from == "tree" {
						setConst(t, root, comp.constant, comp.was, strings.ReplaceAll(a.version, "\x00", `\x00`))
					}
					testtree.Git(t, root, "init", "-q")
					testtree.Git(t, root, "add", "-A")
					testtree.Git(t, root, "commit", "-q", "-m", "fixture")
					testtree.Git(t, root, "tag", testtree.Tag)
					victim := filepath.Join(filepath.Dir(root), "victim")
					if err := os.MkdirAll(victim, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(victim, "go.mod"), []byte("module victim\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					treeBefore, victimBefore := testtree.HashDir(t, root), testtree.HashDir(t, victim)

					o := Options{TreeDir: root, Components: []string{comp.name}}
					if from == "flag" {
						comp.set(&o, a.version)
					}
					_, err := Run(context.Background(), o, phase.Options{})
					if testtree.HashDir(t, root) != treeBefore {
						t.Error("the tree changed")
					}
					if testtree.HashDir(t, victim) != victimBefore {
						t.Error("the victim directory changed")
					}
					if _, err := os.Stat(filepath.Join(root, "victim")); err == nil {
						t.Error("a victim directory appeared inside the tree")
					}
					if err == nil || !strings.Contains(err.Error(), comp.what) || !strings.Contains(err.Error(), comp.example) {
						t.Fatalf("err = %v, want the %s refused", err, comp.what)
					}
				})
			}
		}
	}
}

// TestBuildRefusesPlatformPaths: --platform becomes bin/<os>_<arch>; one
// that is not a known os/arch pair is refused before the tree is touched.
func TestBuildRefusesPlatformPaths(t *testing.T) {
	root := testtree.New(t)
	before := testtree.HashDir(t, root)
	for _, p := range []string{"linux/../../x", "../../x/amd64", "linux/amd64/..", "/linux/amd64", "linux/amd64\x00"} {
		_, err := Run(context.Background(), Options{TreeDir: root, Components: []string{"kubectl"}, Platform: p}, phase.Options{})
		if err == nil || !strings.Contains(err.Error(), "use os/arch, one of linux/amd64") {
			t.Errorf("--platform %q: err = %v", p, err)
		}
	}
	if testtree.HashDir(t, root) != before {
		t.Error("the tree changed")
	}
}

func TestVersionFlags(t *testing.T) {
	tests := []struct {
		component, flag, want, wantErr string
	}{
		{component: "etcd", flag: "v3.6.5", want: "v3.6.5"},
		{component: "etcd", flag: "3.6.5", want: "v3.6.5"},
		{component: "etcd", flag: "v3.6.0-rc.5", want: "v3.6.0-rc.5"},
		{component: "etcd", flag: "3.6.5-0", want: "v3.6.5"}, // as kubeadm writes it
		{component: "etcd", flag: "v3.6.0-rc.5-0", want: "v3.6.0-rc.5"},
		{component: "etcd", flag: "vv3.6.5", wantErr: "--etcd-version: etcd version"},
		{component: "etcd", flag: "v1/../../../../victim", wantErr: "--etcd-version: etcd version"},
		{component: "etcd", flag: "3.6.5-", wantErr: "--etcd-version: etcd version"},
		{component: "etcd", flag: "v2.3.4", wantErr: "--etcd-version: etcd version"},
		{component: "coredns", flag: "v1.12.1", want: "v1.12.1"},
		{component: "coredns", flag: "1.11.3", want: "v1.11.3"},
		{component: "coredns", flag: "v1.12.1/../../victim", wantErr: "--coredns-version: CoreDNS version"},
		{component: "coredns", flag: "v3.6.5", wantErr: "--coredns-version: CoreDNS version"},
	}
	for _, tc := range tests {
		t.Run(tc.component+"/"+tc.flag, func(t *testing.T) {
			got, err := pinnedVersions[tc.component].flag(tc.flag)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s flag %q = %q, %v; want %q", tc.component, tc.flag, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%s flag %q = %q, %v; want %q", tc.component, tc.flag, got, err, tc.want)
			}
		})
	}
}

// TestBuildResolvesPinnedVersions: each external component gets the
// version the tree's kubeadm names, or its flag's; only the versions of
// the components asked for are read.
func TestBuildResolvesPinnedVersions(t *testing.T) {
	root := testtree.New(t)
	j, err := NewJob(Options{TreeDir: root, Components: []string{"etcd", "coredns"}})
	if err != nil {
		t.Fatal(err)
	}
	if j.EtcdVersion != "v3.6.5" || j.CoreDNSVersion != "v1.12.1" {
		t.Fatalf("versions = %q, %q; want the fixture's v3.6.5, v1.12.1", j.EtcdVersion, j.CoreDNSVersion)
	}
	j, err = NewJob(Options{TreeDir: root, Components: []string{"coredns"}, CoreDNSVersion: "1.11.3"})
	if err != nil || j.CoreDNSVersion != "v1.11.3" {
		t.Fatalf("--coredns-version 1.11.3: %v, %v", j, err)
	}
	if _, err := NewJob(Options{TreeDir: root, Components: []string{"coredns"}, CoreDNSPlugins: "hosts"}); err == nil || !strings.Contains(err.Error(), `--coredns-plugins "hosts": give all for CoreDNS's every plugin, or leave it out for devk's (errors, log,`) {
		t.Errorf("--coredns-plugins hosts: %v", err)
	}
	// A tree whose etcd version is broken still builds CoreDNS.
	setEtcdVersion(t, root, "not-a-version")
	if _, err := NewJob(Options{TreeDir: root, Components: []string{"coredns"}}); err != nil {
		t.Fatalf("coredns read the etcd version: %v", err)
	}
	dir, err := writeBuildModule(j.Tree, j.Components[0], j.CoreDNSVersion, nil)
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "_output", "devk", "coredns-build", "v1.11.3"); dir != want {
		t.Errorf("build module at %s, want %s", dir, want)
	}
	if !strings.Contains(string(gomod), "\nrequire github.com/coredns/coredns v1.11.3\n") {
		t.Errorf("go.mod:\n%s", gomod)
	}
}

// TestCatalogNames: every name the catalog has passes the component
// validator (Binary becomes a file and an image repository), and Lookup
// refuses names of the wrong shape with the list of valid ones.
func TestCatalogNames(t *testing.T) {
	for _, c := range Catalog {
		for _, n := range []string{c.Name, c.Binary} {
			if err := validname.Component(n); err != nil {
				t.Errorf("catalog name %q: %v", n, err)
			}
		}
	}
	for _, n := range []string{"../kubectl", "kubectl/..", "/usr/bin/kubectl", "kubectl\x00", "kubect\u04cf", ""} {
		_, err := Lookup(n)
		if !errors.Is(err, ErrUnknownComponent) || !strings.Contains(err.Error(), "use one of apiserver") {
			t.Errorf("Lookup(%q) = %v", n, err)
		}
	}
}

// TestModuleBuildStamps: each component built from a module is built
// outside the tree's workspace, at its pinned version, stamped where its
// project's release build stamps the release (kwok's hack/releases.sh:
// consts.Version, which `kwok --version` prints).
func TestModuleBuildStamps(t *testing.T) {
	root := testtree.New(t)
	tests := []struct{ component, stamp string }{
		{"etcd", "-X go.etcd.io/etcd/api/v3/version.GitSHA=v3.6.5"},
		{CoreDNS, "-X github.com/coredns/coredns/coremain.GitCommit=v1.12.1"},
		{Delve, "-X main.Build=" + DelveVersion},
		{Kwok, "-X sigs.k8s.io/kwok/pkg/consts.Version=" + KwokVersion},
	}
	for _, tc := range tests {
		t.Run(tc.component, func(t *testing.T) {
			j, err := NewJob(Options{TreeDir: root, Components: []string{tc.component}})
			if err != nil {
				t.Fatal(err)
			}
			c := j.Components[0]
			cmd := j.moduleBuildCmd(c, "/build-module")
			if want := "-ldflags=" + tc.stamp + " -s -w"; !slices.Contains(cmd.Args, want) {
				t.Errorf("args %q lack %q", cmd.Args, want)
			}
			pkg := c.Package
			if c.Name == CoreDNS {
				pkg = "." // devk's main, with devk's plugins
			}
			if n := len(cmd.Args); n < 3 || cmd.Args[n-3] != "-o" || cmd.Args[n-2] != j.BinaryPath(c) || cmd.Args[n-1] != pkg {
				t.Errorf("args %q do not end with -o %s %s", cmd.Args, j.BinaryPath(c), pkg)
			}
			if cmd.Dir != "/build-module" || !slices.Contains(cmd.Env, "GOWORK=off") || !slices.Contains(cmd.Env, "CGO_ENABLED=0") {
				t.Errorf("go build in %s with %q: want the build module, outside the workspace, CGO_ENABLED=0", cmd.Dir, cmd.Env)
			}
		})
	}
}
