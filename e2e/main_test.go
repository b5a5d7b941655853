//go:build e2e

// Package e2e runs devk the way a user does: the real Kubernetes v1.34.4
// tree from the Go module proxy, real go builds (reusing the Go build
// cache), real registries, containerd and a kubelet. `make e2e` runs it.
//
// DEVK_BIN is the devk binary under test (make e2e builds it).
// DEVK_E2E_DIR keeps the tree between runs (default /var/tmp/devk-e2e), so
// a second run is incremental like a contributor's day.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// KubeVersion is the release the suite builds.
const KubeVersion = "v1.34.4"

var (
	devkBin string
	workDir string
)

func TestMain(m *testing.M) {
	devkBin = os.Getenv("DEVK_BIN")
	if devkBin == "" {
		fmt.Fprintln(os.Stderr, "e2e: set DEVK_BIN to the devk binary (make e2e does)")
		os.Exit(2)
	}
	workDir = os.Getenv("DEVK_E2E_DIR")
	if workDir == "" {
		workDir = "/var/tmp/devk-e2e"
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// Result is one devk invocation's outcome.
type Result struct {
	Stdout, Stderr string
	Err            error
	Took           time.Duration
}

// Devk runs devk with args in dir, with extra environment.
func Devk(t testing.TB, dir string, env []string, args ...string) Result {
	t.Helper()
	return run(t, dir, env, devkBin, args...)
}

// MustDevk is Devk that fails the test on a non-zero exit.
func MustDevk(t testing.TB, dir string, args ...string) Result {
	t.Helper()
	r := Devk(t, dir, nil, args...)
	if r.Err != nil {
		t.Fatalf("devk %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
	}
	return r
}

func run(t testing.TB, dir string, env []string, name string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	r := Result{Stdout: stdout.String(), Stderr: stderr.String(), Err: err, Took: time.Since(t0)}
	t.Logf("%s %s (%s, exit %v)", filepath.Base(name), strings.Join(args, " "), r.Took.Round(time.Millisecond), err)
	return r
}

var (
	treeOnce sync.Once
	treeDir  string
	treeErr  error
)

// Tree returns the shared v1.34.4 tree, getting it on first use.
func Tree(t testing.TB) string {
	t.Helper()
	treeOnce.Do(func() {
		dir := filepath.Join(workDir, "kubernetes-"+KubeVersion)
		r := Devk(t, workDir, nil, "source", "get", KubeVersion, dir)
		if r.Err != nil {
			treeErr = fmt.Errorf("devk source get: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
			return
		}
		treeDir = dir
	})
	if treeErr != nil {
		t.Fatal(treeErr)
	}
	return treeDir
}
