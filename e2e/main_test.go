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
	if err := holdRunLock(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: run lock:", err)
		os.Exit(2)
	}
	sweepStaleClusters()
	code := m.Run()
	stopSharedCluster()
	os.Exit(code)
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
	return MustDevkEnv(t, dir, nil, args...)
}

// MustDevkEnv is MustDevk with extra environment.
func MustDevkEnv(t testing.TB, dir string, env []string, args ...string) Result {
	t.Helper()
	r := Devk(t, dir, env, args...)
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

// ownHome is a DEVK_HOME of the test's own with the user's kubeconfig in
// it, and the environment that names both, for a test that makes its own
// cluster.
func ownHome(t testing.TB) (home, kubeconfig string, env []string) {
	home = newHome(t)
	kubeconfig = filepath.Join(home, "user-kubeconfig")
	return home, kubeconfig, []string{"DEVK_HOME=" + home, "KUBECONFIG=" + kubeconfig}
}

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

// SharedCluster is one `devk up` cluster, in its own DEVK_HOME, that the
// tests after TestClusterUpDown (which makes and checks its own) share.
type SharedCluster struct {
	Tree, Home, Kubeconfig string
	Env                    []string
}

var (
	clusterOnce sync.Once
	shared      *SharedCluster
	sharedErr   error
)

// Cluster brings the shared cluster up on first use.
func Cluster(t testing.TB) *SharedCluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd and a kubelet (run `make e2e` as root)")
	}
	tree := Tree(t)
	clusterOnce.Do(func() {
		home, err := os.MkdirTemp("", homePrefix)
		if err != nil {
			sharedErr = err
			return
		}
		c := &SharedCluster{Tree: tree, Home: home, Kubeconfig: filepath.Join(home, "clusters", "devk", "admin.conf"),
			Env: []string{"DEVK_HOME=" + home, "KUBECONFIG=" + filepath.Join(home, "user-kubeconfig")}}
		shared = c // down it at the end even if up fails half way
		if r := Devk(t, tree, c.Env, "up"); r.Err != nil {
			sharedErr = fmt.Errorf("devk up: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func stopSharedCluster() {
	if shared == nil {
		return
	}
	cmd := exec.Command(devkBin, "down")
	cmd.Dir, cmd.Env = shared.Tree, append(os.Environ(), shared.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: devk down of the shared cluster: %v\n%s", err, out)
	}
	os.RemoveAll(shared.Home)
}

// Kubectl runs the kubectl devk up installed (built from the tree)
// against the shared cluster.
func (c *SharedCluster) Kubectl(t testing.TB, args ...string) Result {
	t.Helper()
	return run(t, c.Tree, nil, c.KubectlPath(), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
}

// KubectlPath is the kubectl devk up installs: $DEVK_HOME/bin/kubectl.
func (c *SharedCluster) KubectlPath() string {
	return filepath.Join(c.Home, "bin", "kubectl")
}

// step runs f as t's subtest name. The steps of a scenario share its
// cluster, each building on the ones before: a failed step stops t.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}
