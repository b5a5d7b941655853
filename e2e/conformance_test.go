//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/internal/syncbuf"
)

// conformanceSubset are the [Conformance] specs make e2e runs: a spread
// across sig-api-machinery, sig-apps (Deployments, ReplicaSets, Jobs),
// sig-network (Services, DNS), sig-node (Pods, ConfigMaps, Secrets,
// probes, lifecycle hooks) and sig-cli (kubectl), each runnable on one
// node with the images `devk e2e images` makes; a few chosen for what
// the images must have (dig and jessie-dnsutils, a sh that passes on
// env names like data-1, busybox's sysctl, nonewprivs' setuid nnp,
// agnhost's /agnhost-2). 1 m 42 s with
// --parallel 2 (the whole test, cluster included, 2 m 43 s).
var conformanceSubset = []string{
	"[sig-api-machinery] Discovery should validate PreferredVersion for each APIGroup",
	"Simple CustomResourceDefinition creating/deleting custom resource definition objects works",
	"[sig-api-machinery] ResourceQuota should create a ResourceQuota and ensure its status is promptly calculated",
	"[sig-api-machinery] Watchers should be able to restart watching from the last resource version observed by the previous watch",
	"[sig-node] ConfigMap should be consumable via environment variable",
	"[sig-node] Secrets should be consumable from pods in env vars",
	"[sig-node] Pods should get a host IP",
	"[sig-node] Pods should be submitted and removed",
	"[sig-node] Pods should contain environment variables for services",
	"[sig-node] Downward API should provide pod name, namespace and IP address as env vars",
	"[sig-node] Probing container with readiness probe should not be ready before initial delay and never restart",
	"Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook properly",
	"Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop exec hook properly",
	"[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones",
	"[sig-apps] Deployment deployment should delete old replica sets",
	"[sig-apps] Deployment should run the lifecycle of a Deployment",
	"[sig-apps] ReplicaSet should serve a basic image on each replica with a public image",
	"[sig-apps] ReplicaSet should adopt matching pods on creation and release no longer matching pods",
	"[sig-apps] Job should delete a job",
	"[sig-apps] Job should adopt matching orphans and release non-matching pods",
	"[sig-apps] Job should run a job to completion when tasks sometimes fail and are locally restarted",
	"[sig-network] Services should serve a basic endpoint from pods",
	"[sig-network] Services should provide secure master service",
	"[sig-network] Services should find a service from listing all namespaces",
	"[sig-network] Services should test the lifecycle of an Endpoint",
	"[sig-network] DNS should support configurable pod DNS nameservers",
	"[sig-network] DNS should provide DNS for the cluster",
	"[sig-node] ConfigMap should be consumable as environment variable names with various prefixes",
	"[sig-node] Kubelet when scheduling a read only busybox container should not write to root filesystem",
	"[sig-node] Sysctls [LinuxOnly] [NodeConformance] should support sysctls",
	"[sig-node] Containers should be able to override the image's default command (container entrypoint)",
	"[sig-node] Security Context when creating containers with AllowPrivilegeEscalation should not allow privilege escalation when false",
	"[sig-cli] Kubectl client Kubectl version should check is all data is printed",
	"[sig-cli] Kubectl client Kubectl api-versions should check if v1 is in available api versions",
	"[sig-cli] Kubectl client Kubectl cluster-info should check if Kubernetes control plane services is included in cluster-info",
	"[sig-cli] Kubectl client Kubectl label should update the label on a resource",
}

// e2eResult is `devk e2e -o json`'s result, as the tests read it.
type e2eResult struct {
	Selected   int
	Dir, JUnit string
	Log        string
	Summary    struct {
		Passed int
		Failed []struct{ Name, Message string }
	}
}

// runE2E runs devk args -o json (an e2e command) in dir and reads its
// result; each spec that failed is an error of t.
func runE2E(t *testing.T, dir string, env []string, args ...string) (e2eResult, Result) {
	t.Helper()
	r := Devk(t, dir, env, append(args, "-o", "json")...)
	var res e2eResult
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		t.Fatalf("devk e2e -o json: %v (exit: %v)\n%s\n%s", err, r.Err, r.Stdout, r.Stderr)
	}
	for _, f := range res.Summary.Failed {
		t.Errorf("failed: %s\n%s", f.Name, f.Message)
	}
	return res, r
}

// TestConformanceSubset lets devk e2e build what it needs (the tree's
// e2e suite, then its test images, none there before), checks what it
// refuses before it runs anything, then runs the subset on the shared
// cluster: every spec must pass.
func TestConformanceSubset(t *testing.T) {
	c := Cluster(t)
	devk := func(args ...string) Result { t.Helper(); return MustDevkEnv(t, c.Tree, c.Env, args...) }

	// Bad input, refused before anything runs (the first builds e2e.test
	// and ginkgo, as `devk build e2e`, to count the specs).
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"e2e", "--focus", "no spec is called this"}, "matches --focus"},
		{[]string{"e2e", "--name", "nosuch", "--focus", "Pods"}, `no devk cluster "nosuch"`},
		{[]string{"e2e", "--parallel", "0"}, "--parallel 0"},
		{[]string{"e2e", "--skip", "(["}, "is not a regular expression"},
	} {
		r := Devk(t, c.Tree, c.Env, tc.args...)
		if r.Err == nil || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("devk %s: err %v, stderr %q; want a failure saying %q", strings.Join(tc.args, " "), r.Err, r.Stderr, tc.want)
		}
		t.Logf("devk %s: refused in %s", strings.Join(tc.args, " "), r.Took)
	}
	for _, b := range []string{"e2e.test", "ginkgo"} {
		if _, err := os.Stat(filepath.Join(c.Tree, "_output", "devk", "bin", "linux_"+runtime.GOARCH, b)); err != nil {
			t.Errorf("devk e2e did not build %s: %v", b, err)
		}
	}

	var quoted []string
	for _, s := range conformanceSubset {
		quoted = append(quoted, regexp.QuoteMeta(s))
	}
	focus := strings.Join(quoted, "|")
	r := devk("e2e", "--conformance", "--focus", focus, "--dry-run", "-o", "json")
	var plan struct {
		Selected int
		Specs    []string
	}
	if err := json.Unmarshal([]byte(r.Stdout), &plan); err != nil || plan.Selected < len(conformanceSubset) || len(plan.Specs) != plan.Selected {
		t.Fatalf("devk e2e --dry-run: %v, selected %d, want at least %d\n%s", err, plan.Selected, len(conformanceSubset), r.Stdout)
	}

	res, r := runE2E(t, c.Tree, c.Env, "e2e", "--conformance", "--focus", focus, "--parallel", "2")
	if r.Err != nil || res.Summary.Passed != res.Selected || res.Selected < 25 {
		t.Errorf("devk e2e: exit %v, %d of %d selected passed (log %s)", r.Err, res.Summary.Passed, res.Selected, res.Log)
	}
	for _, f := range []string{res.JUnit, res.Log} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if lines := strings.Count(r.Stderr, "✓ "); lines != res.Summary.Passed {
		t.Errorf("%d passed spec lines streamed on stderr, want one per passed spec (%d)", lines, res.Summary.Passed)
	}
	t.Logf("devk e2e: %d specs passed in %s", res.Summary.Passed, r.Took)
	if !strings.Contains(r.Stderr, "building them as `devk e2e images`") {
		t.Errorf("devk e2e did not build the test images the registry lacked; stderr:\n%s", r.Stderr[max(0, len(r.Stderr)-3000):])
	}

	// What it pushed is what `devk e2e images` pushes (the same digests:
	// nothing changed in between), under the framework's names.
	var imgs struct {
		Images []struct {
			Name, Tag, Ref, Digest, Missing string
		}
	}
	r = devk("e2e", "images", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &imgs); err != nil {
		t.Fatalf("devk e2e images -o json: %v\n%s", err, r.Stdout)
	}
	pushed := map[string]string{}
	for _, im := range imgs.Images {
		if im.Missing == "" {
			pushed[im.Name+":"+im.Tag] = im.Ref
		}
	}
	for _, want := range []string{"agnhost:2.56", "busybox:1.37.0-1", "httpd:2.4.38-4", "pause:3.10.1", "jessie-dnsutils:1.7", "nonewprivs:1.3"} {
		if !strings.HasSuffix(pushed[want], "/"+want) || !strings.Contains(pushed[want], "registry.k8s.io/") {
			t.Errorf("%s not pushed under the framework's name: %v", want, pushed)
		}
	}
	t.Logf("devk e2e images: %d pushed in %s", len(pushed), r.Took)

	t.Run("watch", func(t *testing.T) { watchE2E(t, c) })
	t.Run("interrupted", func(t *testing.T) { interruptE2E(t, c) })
}

// watchE2E runs one cycle of devk watch apiserver --e2e-focus: a save in
// staging is built, pushed, swapped in and verified, then the focused
// spec runs against the new API server and passes.
func watchE2E(t *testing.T, c *SharedCluster) {
	const spec = "[sig-node] Pods should get a host IP"
	var out, errb syncbuf.Buffer
	cmd := exec.Command(devkBin, "watch", "apiserver", "--once", "--e2e-focus", regexp.QuoteMeta(spec))
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = c.Tree, append(os.Environ(), c.Env...), &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(errb.String(), "watching ") {
		if time.Now().After(deadline) {
			t.Fatalf("devk watch did not start watching:\n%s", errb.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Cleanups run last first: once appendTo has put the file back, the
	// cluster gets what the tree builds again, as the tests after this one
	// expect (devk digest verify agrees).
	t.Cleanup(func() {
		MustDevkEnv(t, c.Tree, c.Env, "build", "apiserver", "--push")
		MustDevkEnv(t, c.Tree, c.Env, "swap", "apiserver")
		MustDevkEnv(t, c.Tree, c.Env, "digest", "verify", "apiserver")
	})
	appendTo(t, filepath.Join(c.Tree, "staging", "src", "k8s.io", "apiserver", "pkg", "server", "config.go"),
		"\nfunc DevkE2EFocus() string { return \"focused\" }\n")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("devk watch --once --e2e-focus: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
		}
	case <-time.After(10 * time.Minute):
		t.Fatalf("devk watch --once --e2e-focus did not finish:\nstdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	if line := out.String(); !strings.Contains(line, "verified in") || !strings.Contains(line, "; e2e 1 passed, 0 failed") {
		t.Fatalf("the cycle's line does not say the swap was verified and the spec passed:\n%s\nstderr:\n%s", line, errb.String())
	}
	if !strings.Contains(errb.String(), "✓ "+spec) {
		t.Errorf("the spec's line was not streamed:\n%s", errb.String())
	}
	t.Logf("devk watch --e2e-focus: %s", strings.TrimSpace(out.String()))
}

// interruptE2E sends Ctrl-C's SIGINT to devk e2e while ginkgo's processes
// run a spec: devk exits 130 and no ginkgo or e2e.test process is left.
func interruptE2E(t *testing.T, c *SharedCluster) {
	cmd := exec.Command(devkBin, "e2e", "--conformance", "--parallel", "2", "--focus",
		regexp.QuoteMeta("[sig-node] Probing container with readiness probe should not be ready before initial delay and never restart"))
	var stdout syncbuf.Buffer
	cmd.Dir, cmd.Env, cmd.Stdout = c.Tree, append(os.Environ(), c.Env...), &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "... run") {
	}
	suite := filepath.Join(c.Tree, "_output", "devk", "bin", "linux_amd64", "e2e.test")
	deadline := time.Now().Add(time.Minute)
	for len(processesOf(suite)) < 2 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if n := len(processesOf(suite)); n < 2 {
		t.Fatalf("%d e2e.test processes running, want ginkgo's 2", n)
	}
	// Interrupt once the spec runs: its namespace (container-probe-…)
	// holds its pod.
	cs := clientFor(t, filepath.Join(c.Home, "clusters", "devk", "admin.conf"))
	for running := false; !running; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatal("the spec's pod did not appear")
		}
		pods, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			running = running || strings.HasPrefix(p.Namespace, "container-probe-")
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	go func() {
		for sc.Scan() {
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Errorf("interrupted devk e2e: %v, want exit status 130", err)
	}
	if left := processesOf(suite); len(left) > 0 {
		t.Errorf("processes left after the interrupt: %v", left)
	}
	// The summary of what had finished, from the report ginkgo wrote on
	// the interrupt: the running spec was stopped.
	if out := stdout.String(); !strings.Contains(out, "interrupted: 0 of 1 selected specs had finished, 1 were stopped") || !strings.Contains(out, "Interrupted by User") {
		t.Errorf("no summary after the interrupt:\n%s", out)
	}
}

// processesOf lists the pids whose command line starts with path.
func processesOf(path string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.HasPrefix(string(cmdline), path+"\x00") {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}
