package build

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/source"
)

func TestIsPackagePath(t *testing.T) {
	for arg, want := range map[string]bool{
		"./test/images/agnhost": true,
		"test/images/agnhost":   true,
		"/abs/test/images/x":    true,
		".":                     true,
		"../kubernetes/cmd/x":   true,
		"apiserver":             false,
		"kube-apiserver":        false,
		"all":                   false,
		"coredns":               false,
	} {
		if got := IsPackagePath(arg); got != want {
			t.Errorf("IsPackagePath(%q) = %v, want %v", arg, got, want)
		}
	}
}

// writeMain writes a main package (or another package) at rel in root.
func writeMain(t *testing.T, root, rel, pkg string) {
	t.Helper()
	dir := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package "+pkg+"\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResolvePackage: package paths become components of the tree, named
// after their directory, or are refused saying what to name instead.
func TestResolvePackage(t *testing.T) {
	root := testtree.Copy(t)
	writeMain(t, root, "test/kubectl", "main")
	writeMain(t, root, "test/images/thing/v2", "main")
	writeMain(t, root, "test/images/Agn_Host", "main")
	writeMain(t, root, "_private/tool", "main")
	writeMain(t, root, "test/images/windows-only", "main")
	os.Rename(filepath.Join(root, "test/images/windows-only/main.go"), filepath.Join(root, "test/images/windows-only/main_windows.go"))
	outside := t.TempDir()
	writeMain(t, outside, "tool", "main")
	if err := os.Symlink(filepath.Join(outside, "tool"), filepath.Join(root, "test", "escape")); err != nil {
		t.Fatal(err)
	}
	agnhost := Component{Name: "agnhost", Binary: "agnhost", Package: "./test/images/agnhost",
		Layout: ImageLayout{Path: "/agnhost", Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}}
	kubectl, _ := Lookup("kubectl")

	tests := []struct {
		name, dir, arg string
		want           Component
		wantErr        string
	}{
		{name: "./ path from the root", arg: "./test/images/agnhost", want: agnhost},
		{name: "without ./", arg: "test/images/agnhost", want: agnhost},
		{name: "trailing slash", arg: "./test/images/agnhost/", want: agnhost},
		{name: "absolute", arg: filepath.Join(root, "test/images/agnhost"), want: agnhost},
		{name: "relative to a directory inside the tree", dir: "test", arg: "./images/agnhost", want: agnhost},
		{name: "up and back in", dir: "cmd", arg: "../test/images/agnhost", want: agnhost},
		{name: "a catalog component's package is that component", arg: "./cmd/kubectl", want: kubectl},
		{name: "a library", arg: "./test/utils", wantErr: "holds package utils, not a main package: name a directory holding a package main, e.g. ./test/images/agnhost"},
		{name: "missing", arg: "./test/images/nothing", wantErr: "does not exist: name a directory of the tree holding a main package"},
		{name: "no Go files", arg: "./test/images", wantErr: "has no Go files for linux/amd64"},
		{name: "no Go files for the platform", arg: "./test/images/windows-only", wantErr: "has no Go files for linux/amd64"},
		{name: "the tree's root", arg: ".", wantErr: "is not inside the tree"},
		{name: "outside the tree", arg: "..", wantErr: "is not inside the tree at " + root},
		{name: "outside, absolute", arg: filepath.Join(outside, "tool"), wantErr: "is not inside the tree"},
		{name: "a symbolic link out of the tree", arg: "./test/escape", wantErr: "is not inside the tree"},
		{name: "devk's own output and other ignored directories", arg: "./_private/tool", wantErr: `inside "_private", which Go ignores`},
		{name: "named like a catalog component", arg: "./test/kubectl", wantErr: "would be named kubectl, which is devk's component kubectl (./cmd/kubectl)"},
		{name: "a major-version directory", arg: "./test/images/thing/v2", wantErr: "major-version directory (v2)"},
		{name: "a name no image can have", arg: "./test/images/Agn_Host", wantErr: `component name "Agn_Host"`},
	}
	tree := &source.Tree{Root: root}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolvePackage(tree, filepath.Join(root, tc.dir), tc.arg, "linux", "amd64")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `package path "`) {
					t.Fatalf("resolvePackage(%q) = %+v, %v; want an error with %q", tc.arg, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("resolvePackage(%q) = %+v, want %+v", tc.arg, got, tc.want)
			}
		})
	}
}

func TestDockerfileLayout(t *testing.T) {
	tests := []struct {
		name, binary, dockerfile string // dockerfile "" means none
		want                     ImageLayout
	}{
		{name: "no Dockerfile", binary: "agnhost"},
		{name: "agnhost's", binary: "agnhost", dockerfile: "FROM $BASEIMAGE\nADD agnhost agnhost\nENTRYPOINT [\"/agnhost\"]\nCMD [\"pause\"]\n",
			want: ImageLayout{Path: "/agnhost", Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}},
		{name: "arguments, a deeper path, lowercase, continued", binary: "loader",
			dockerfile: "from x\n# a comment\nentrypoint [\"/usr/bin/loader\", \\\n  \"-v=2\"]\nCMD [\"/profiles\"]\n",
			want:       ImageLayout{Path: "/usr/bin/loader", Entrypoint: []string{"/usr/bin/loader", "-v=2"}, Cmd: []string{"/profiles"}}},
		{name: "the last ENTRYPOINT counts", binary: "a", dockerfile: "FROM x\nENTRYPOINT [\"/b\"]\nENTRYPOINT [\"/a\"]\n",
			want: ImageLayout{Path: "/a", Entrypoint: []string{"/a"}}},
		{name: "an earlier stage's ENTRYPOINT is not the image's", binary: "a", dockerfile: "FROM x AS build\nENTRYPOINT [\"/a\"]\nFROM y\nCOPY --from=build /a /a\n"},
		{name: "shell form", binary: "a", dockerfile: "FROM x\nENTRYPOINT /a --flag\n"},
		{name: "another binary", binary: "sample-device-plugin", dockerfile: "FROM x\nENTRYPOINT [\"/sampledeviceplugin\"]\n"},
		{name: "CMD alone", binary: "nnp", dockerfile: "FROM x\nCOPY nnp /usr/local/bin/nnp\nCMD [\"nnp\"]\n"},
		{name: "relative", binary: "a", dockerfile: "FROM x\nENTRYPOINT [\"a\"]\n"},
		{name: "climbing", binary: "a", dockerfile: "FROM x\nENTRYPOINT [\"/x/../a\"]\n"},
		{name: "not JSON", binary: "a", dockerfile: "FROM x\nENTRYPOINT [\"/a\"\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.dockerfile != "" {
				if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(tc.dockerfile), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := dockerfileLayout(dir, tc.binary)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("layout = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestBuildPackagePath builds a package path of the fixture in the same
// go build as a catalog component, stamped the same way, recorded in
// state.json under its name, and unchanged the second time.
func TestBuildPackagePath(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	root := testtree.New(t)
	j := build(t, root, "./test/images/agnhost", "kubectl", "test/images/agnhost")
	if c := changed(j); !c["agnhost"] || !c["kubectl"] || len(c) != 2 {
		t.Fatalf("first build: changed = %v", c)
	}
	if j.Binaries[1].Name != "agnhost" || j.Binaries[1].Path != filepath.Join(root, "_output", "devk", "bin", "linux_amd64", "agnhost") {
		t.Fatalf("binaries = %+v; want kubectl, then agnhost in _output/devk/bin/linux_amd64", j.Binaries)
	}
	want, err := (&source.Tree{Root: root}).Version(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := runBinary(t, j.Binaries[1].Path); got.GitVersion != want.GitVersion || got.GitCommit != want.GitCommit || got.BuildDate != want.BuildDate {
		t.Errorf("agnhost stamped %+v, want %+v", got, want)
	}
	st, err := LoadState(root)
	if err != nil {
		t.Fatal(err)
	}
	if rec := st.Components["agnhost"].Binary; rec == nil || rec.SHA256 != j.Binaries[1].SHA256 || rec.Version != want.GitVersion {
		t.Fatalf("state.json agnhost = %+v", rec)
	}
	if c := changed(build(t, root, "./test/images/agnhost")); c["agnhost"] {
		t.Fatal("no-op rebuild reported agnhost changed")
	}

	writeMain(t, root, "test/e2e/agnhost", "main")
	_, err = NewJob(Options{TreeDir: root, Components: []string{"./test/images/agnhost", "./test/e2e/agnhost"}})
	if err == nil || !strings.Contains(err.Error(), "./test/images/agnhost and ./test/e2e/agnhost would both be built as agnhost") {
		t.Fatalf("two packages of one name: %v", err)
	}
}
