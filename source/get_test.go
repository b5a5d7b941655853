package source

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/testtree"
)

// fileProxy serves the fixture as k8s.io/kubernetes@v1.34.0 and its
// staging modules at v0.34.0 from a file:// GOPROXY, with a private module
// cache, so `get` runs the real go command without the network. The
// release's go.work also names k8s.io/sample-controller, which the proxy
// does not serve, as on the real proxy.
func fileProxy(t *testing.T) {
	t.Helper()
	proxy := t.TempDir()
	src := testtree.Copy(t)
	work := filepath.Join(src, "go.work")
	data, _ := os.ReadFile(work)
	data = []byte(strings.Replace(string(data), "./staging/src/k8s.io/component-base\n", "./staging/src/k8s.io/component-base\n\t./staging/src/k8s.io/sample-controller\n", 1))
	must(t, os.WriteFile(work, data, 0o644))
	must(t, os.MkdirAll(filepath.Join(src, "build", "root"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "build", "root", "Makefile"), []byte("all:\n"), 0o644))

	publish := func(path, version, dir string) {
		t.Helper()
		at := filepath.Join(proxy, path, "@v")
		must(t, os.MkdirAll(at, 0o755))
		f, err := os.Create(filepath.Join(at, version+".zip"))
		must(t, err)
		must(t, modzip.CreateFromDir(f, module.Version{Path: path, Version: version}, dir))
		must(t, f.Close())
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(at, version+".mod"), gomod, 0o644))
		must(t, os.WriteFile(filepath.Join(at, version+".info"), []byte(`{"Version":"`+version+`","Time":"2026-02-10T12:53:36Z"}`), 0o644))
		must(t, os.WriteFile(filepath.Join(at, "list"), []byte(version+"\n"), 0o644))
	}
	publish("k8s.io/kubernetes", "v1.34.0", src)
	for _, name := range []string{"client-go", "component-base"} {
		publish("k8s.io/"+name, "v0.34.0", filepath.Join(src, "staging", "src", "k8s.io", name))
	}

	cache := t.TempDir()
	t.Setenv("GOPROXY", "file://"+proxy)
	t.Setenv("GOSUMDB", "off")
	t.Setenv("GOMODCACHE", cache)
	t.Setenv("GOTOOLCHAIN", "local")
	t.Cleanup(func() {
		// The module cache is read-only; go clean knows how to remove it.
		exec.Command("go", "clean", "-modcache").Run()
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func get(dir, version string) (*GetResult, error) {
	return Get(context.Background(), GetOptions{Version: version, Dir: dir, Reporter: progress.Discard()})
}

func TestGet(t *testing.T) {
	fileProxy(t)
	dir := filepath.Join(t.TempDir(), "kubernetes")

	res, err := get(dir, "v1.34.0")
	if err != nil {
		t.Fatal(err)
	}
	if res.Already || !slices.Equal(res.Dropped, []string{"sample-controller"}) || res.Files == 0 {
		t.Fatalf("result = %+v", res)
	}
	if !IsTree(dir) {
		t.Fatal("not a tree")
	}
	for _, f := range []string{"staging/src/k8s.io/client-go/pkg/version/version.go", "staging/src/k8s.io/component-base/go.mod"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("staging file missing: %v", err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "hack", "print.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("hack/print.sh mode: %v %v, want 0755", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "cmd", "kubectl", "main.go")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("main.go mode: %v %v, want 0644", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "Makefile")); err != nil || target != "build/root/Makefile" {
		t.Errorf("Makefile symlink = %q, %v", target, err)
	}
	if work, _ := os.ReadFile(filepath.Join(dir, "go.work")); strings.Contains(string(work), "sample-controller") {
		t.Errorf("go.work still names sample-controller:\n%s", work)
	}
	v, err := (&Tree{Root: dir}).Version(context.Background())
	if err != nil || v.GitVersion != "v1.34.0" || v.GitTreeState != "clean" || v.BuildDate != "2026-02-10T12:53:36Z" {
		t.Fatalf("version of the new tree = %+v, %v", v, err)
	}

	// Idempotent.
	res, err = get(dir, "v1.34.0")
	if err != nil || !res.Already {
		t.Fatalf("second get = %+v, %v", res, err)
	}
	// Another version into the same dir is refused.
	if _, err := get(dir, "v1.34.1"); err == nil || !strings.Contains(err.Error(), "already holds Kubernetes v1.34.0") {
		t.Fatalf("other version: %v", err)
	}
}

func TestGetNotServed(t *testing.T) {
	fileProxy(t)
	dir := filepath.Join(t.TempDir(), "k")
	_, err := get(dir, "v1.34.9")
	if !errors.Is(err, ErrNotServed) || !strings.Contains(err.Error(), "check the release tag") {
		t.Fatalf("err = %v, want ErrNotServed", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed download created %s", dir)
	}
}

func TestGetRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "notes.txt")
	must(t, os.WriteFile(mine, []byte("mine"), 0o644))
	_, err := get(dir, "v1.34.0")
	if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("err = %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if data, _ := os.ReadFile(mine); len(entries) != 1 || string(data) != "mine" {
		t.Fatalf("the directory was touched: %v", entries)
	}
}

func TestGetResumes(t *testing.T) {
	fileProxy(t)
	dir := filepath.Join(t.TempDir(), "kubernetes")
	must(t, os.MkdirAll(filepath.Join(dir, "cmd"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, incompleteMarker), []byte("v1.34.0\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "go.work"), []byte("half written"), 0o644))
	if _, err := get(dir, "v1.34.0"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, incompleteMarker)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the incomplete marker is still there")
	}
	if !IsTree(dir) {
		t.Fatal("resumed get did not make a tree")
	}
}

func TestGetBadVersion(t *testing.T) {
	for _, v := range []string{"1.34.4", "v1.34", "latest", "v2.0.0"} {
		if _, err := get(t.TempDir(), v); err == nil || !strings.Contains(err.Error(), "not a Kubernetes release tag") {
			t.Errorf("%q: err = %v", v, err)
		}
	}
}
