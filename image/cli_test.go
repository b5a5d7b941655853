package image_test

import (
	"bytes"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/registry"
)

// buildDevk builds the devk binary under test.
func buildDevk(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devk")
	out, err := exec.Command("go", "build", "-o", path, "github.com/devk/devk/cmd/devk").CombinedOutput()
	if err != nil {
		t.Fatalf("go build devk: %v\n%s", err, out)
	}
	return path
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, devk string, env []string, args ...string) result {
	home := testHome(devk)
	t.Helper()
	cmd := exec.Command(devk, args...)
	// A devk home of its own: no cluster of this machine joins the
	// digest comparison, and no DEVK_REGISTRY from outside applies.
	cmd.Env = append(os.Environ(), "DEVK_HOME="+home, "DEVK_REGISTRY=")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// testHome is the DEVK_HOME of the devk binary run runs.
func testHome(devk string) string { return filepath.Join(filepath.Dir(devk), "devk-home") }

// startRegistry serves devk's registry with content in dir, its
// credential where the devk binary run by run finds it.
func startRegistry(t *testing.T, devk, dir string) (addr string, stop func()) {
	t.Helper()
	h, err := registry.New(dir, &registry.Options{CredentialFile: filepath.Join(testHome(devk), "registry-credential")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), srv.Close
}

var refLine = regexp.MustCompile(`^127\.0\.0\.1:\d+/kube-apiserver@sha256:[0-9a-f]{64}\n$`)

// TestCLI drives devk build --push, devk push and devk digest as a user
// does, against devk's registry.
func TestCLI(t *testing.T) {
	devk := buildDevk(t)
	root := testtree.New(t)
	addr, stop := startRegistry(t, devk, t.TempDir())
	tree := []string{"--tree", root, "--registry", addr}

	r := run(t, devk, nil, append([]string{"push", "apiserver"}, tree...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "apiserver is not built yet: run `devk build apiserver` first") {
		t.Fatalf("push before build: %+v", r)
	}

	r = run(t, devk, nil, append([]string{"build", "apiserver", "--push", "--dry-run"}, tree...)...)
	if r.code != 0 || !strings.Contains(r.stderr, ". image") || !strings.Contains(r.stderr, ". push") || r.stdout != "" {
		t.Fatalf("dry run: %+v", r)
	}

	r = run(t, devk, nil, append([]string{"build", "apiserver", "--push"}, tree...)...)
	if r.code != 0 || !refLine.MatchString(r.stdout) || !strings.HasPrefix(r.stdout, addr+"/") {
		t.Fatalf("build --push: %+v", r)
	}
	ref := r.stdout

	r = run(t, devk, nil, append([]string{"digest", "apiserver"}, tree...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "apiserver: match\n") {
		t.Fatalf("digest after push: %+v", r)
	}

	// The registry goes away: digest cannot look, which is not a mismatch.
	stop()
	addr2, _ := startRegistry(t, devk, t.TempDir())
	tree2 := []string{"--tree", root, "--registry", addr2}
	r = run(t, devk, nil, append([]string{"digest", "apiserver"}, tree...)...)
	if r.code != 1 || !strings.Contains(r.stderr, addr) || !strings.Contains(r.stderr, "devk registry serve") {
		t.Fatalf("digest with the registry down: %+v", r)
	}

	// Another process, the same image; DEVK_REGISTRY picks the registry.
	r = run(t, devk, []string{"DEVK_REGISTRY=" + addr2}, "push", "apiserver", "--tree", root)
	if r.code != 0 || strings.TrimPrefix(r.stdout, addr2) != strings.TrimPrefix(ref, addr) {
		t.Fatalf("push to the new registry: %+v (first push %s)", r, ref)
	}
	r = run(t, devk, nil, append([]string{"digest", "apiserver"}, tree2...)...)
	if r.code != 0 {
		t.Fatalf("digest after push: %+v", r)
	}

	// A tag moved by someone else is a mismatch: exit 2.
	r = run(t, devk, nil, append([]string{"build", "kubectl"}, tree2...)...)
	if r.code != 0 {
		t.Fatalf("build kubectl: %+v", r)
	}
	r = run(t, devk, nil, append([]string{"push", "kubectl"}, tree2...)...)
	if r.code != 0 {
		t.Fatalf("push kubectl: %+v", r)
	}
	r = run(t, devk, nil, append([]string{"digest", "apiserver", "kubectl", "-o", "json"}, tree2...)...)
	if r.code != 0 || !strings.Contains(r.stdout, `"match":true`) {
		t.Fatalf("digest of two: %+v", r)
	}
	r = run(t, devk, nil, "digest", "scheduler", "--tree", root, "--registry", addr2)
	if r.code != 2 || !strings.Contains(r.stdout, "devk build scheduler") || !strings.Contains(r.stderr, "digests do not match for scheduler") {
		t.Fatalf("digest of an unbuilt component: %+v", r)
	}

	// Registry down: the address and the command that starts one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	r = run(t, devk, nil, "push", "apiserver", "--tree", root, "--registry", down)
	if r.code != 1 || !strings.Contains(r.stderr, "no registry is listening on "+down) || !strings.Contains(r.stderr, "devk registry serve --addr "+down) {
		t.Fatalf("push to a registry that is down: %+v", r)
	}

	r = run(t, devk, nil, append([]string{"push", "apiservr"}, tree2...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "unknown component") {
		t.Fatalf("unknown component: %+v", r)
	}
}
