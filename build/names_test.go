package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

// setEtcdVersion makes the tree's kubeadm constants name v.
func setEtcdVersion(t *testing.T, root, v string) {
	t.Helper()
	path := filepath.Join(root, "cmd", "kubeadm", "app", "constants", "constants.go")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(data), `DefaultEtcdVersion = "3.6.5-0"`, `DefaultEtcdVersion = "`+v+`"`, 1)
	if out == string(data) {
		t.Fatal("the fixture's DefaultEtcdVersion is no longer 3.6.5-0")
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
// before and after.
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
	for _, from := range []string{"flag", "tree"} {
		for _, a := range attacks {
			t.Run(from+"/"+a.name, func(t *testing.T) {
				root := testtree.Copy(t)
				if from == "tree" {
					setEtcdVersion(t, root, strings.ReplaceAll(a.version, "\x00", `\x00`))
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

				o := Options{TreeDir: root, Components: []string{"etcd"}}
				if from == "flag" {
					o.EtcdVersion = a.version
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
				if err == nil || !strings.Contains(err.Error(), "etcd version") || !strings.Contains(err.Error(), "e.g. v3.6.5") {
					t.Fatalf("err = %v, want the etcd version refused", err)
				}
			})
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

func TestEtcdVersionFlag(t *testing.T) {
	tests := []struct {
		flag, want, wantErr string
	}{
		{flag: "v3.6.5", want: "v3.6.5"},
		{flag: "3.6.5", want: "v3.6.5"},
		{flag: "v3.6.0-rc.5", want: "v3.6.0-rc.5"},
		{flag: "3.6.5-0", want: "v3.6.5"}, // as kubeadm writes it
		{flag: "v3.6.0-rc.5-0", want: "v3.6.0-rc.5"},
		{flag: "vv3.6.5", wantErr: "etcd version"},
		{flag: "v1/../../../../victim", wantErr: "etcd version"},
		{flag: "3.6.5-", wantErr: "etcd version"},
		{flag: "v2.3.4", wantErr: "etcd version"},
	}
	for _, tc := range tests {
		t.Run(tc.flag, func(t *testing.T) {
			got, err := etcdVersionFlag(tc.flag)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--etcd-version") {
					t.Fatalf("etcdVersionFlag(%q) = %q, %v", tc.flag, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("etcdVersionFlag(%q) = %q, %v; want %q", tc.flag, got, err, tc.want)
			}
		})
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
