package run

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/syncbuf"
	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/phase"
)

// stopScript stands in for the tree's kube-scheduler: it says it runs
// with which arguments, and ends with status 0 on SIGINT.
const stopScript = `#!/bin/sh
trap 'echo stopped; exit 0' INT
echo "running $*"
while :; do sleep 0.05; done
`

// runFixture is a tree whose state.json names a built kube-scheduler
// (the script) and a manifests dir holding the scheduler's manifest.
func runFixture(t *testing.T) Options {
	t.Helper()
	tree := testtree.Copy(t)
	bin := filepath.Join(t.TempDir(), "kube-scheduler")
	if err := os.WriteFile(bin, []byte(stopScript), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := build.UpdateState(tree, func(st *build.StateFile) error {
		st.Component("scheduler").Binary = &build.BinaryRecord{Path: bin, Platform: runtime.GOOS + "/" + runtime.GOARCH}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	manifests := filepath.Join(t.TempDir(), "manifests")
	data, err := os.ReadFile("testdata/kube-scheduler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(manifests, "kube-scheduler.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return Options{Component: "scheduler", TreeDir: tree, Node: layout.Node{ManifestsDir: manifests}}
}

// TestCtrlCStopsTheProcessAndTheRunGoesOn: the first Ctrl-C while the
// process runs reaches it as SIGINT and ends the run phase as done, so
// the phases after it (the put-back) run; the run succeeds.
func TestCtrlCStopsTheProcessAndTheRunGoesOn(t *testing.T) {
	o := runFixture(t)
	var out, info syncbuf.Buffer
	o.Stdout, o.Info = &out, &info
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ran struct {
		r   *Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		r, err := Run(ctx, o, phase.Options{Only: "run"})
		done <- ran{r, err}
	}()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "running"), nil
	}); err != nil {
		t.Fatalf("the process never ran: %q", out.String())
	}
	if want := "running --kubeconfig=/home/u/.devk/clusters/devk/scheduler.conf --bind-address=10.250.0.2 --secure-port=10259 --v=2"; !strings.Contains(out.String(), want) {
		t.Errorf("the process printed %q, want %q: the manifest's command and args", out.String(), want)
	}
	cancel()
	var res ran
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end after Ctrl-C")
	}
	if res.err != nil {
		t.Fatalf("a run ended by Ctrl-C failed: %v", res.err)
	}
	if e := res.r.Exit; e == nil || !e.Stopped || e.Code != 0 {
		t.Errorf("exit %+v, want stopped with status 0", e)
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Errorf("the process did not get SIGINT: %q", out.String())
	}
}

// TestCtrlCBeforeTheProcessStopsTheJob: a Ctrl-C before the process
// runs stops the job, which fails as interrupted, and nothing starts.
func TestCtrlCBeforeTheProcessStopsTheJob(t *testing.T) {
	o := runFixture(t)
	var out syncbuf.Buffer
	o.Stdout = &out
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, o, phase.Options{Only: "run"})
	if err == nil {
		t.Fatal("a run interrupted before its process started succeeded")
	}
	if strings.Contains(out.String(), "running") {
		t.Errorf("the process started after the Ctrl-C: %q", out.String())
	}
}

// TestProcessFailureFailsTheRun: a process that ends with an error
// makes the run fail, saying so.
func TestProcessFailureFailsTheRun(t *testing.T) {
	o := runFixture(t)
	st, err := build.LoadState(o.TreeDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(st.Components["scheduler"].Binary.Path, []byte("#!/bin/sh\nexit 4\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), o, phase.Options{Only: "run"})
	if err == nil || !strings.Contains(err.Error(), "kube-scheduler ended with exit status 4") {
		t.Errorf("err = %v, want the exit status", err)
	}
	if r == nil || r.Exit == nil || r.Exit.Code != 4 || r.Exit.Stopped {
		t.Errorf("result %+v", r)
	}
}

// TestPlan: --dry-run names each phase and what it reads and writes,
// and changes nothing.
func TestPlan(t *testing.T) {
	o := runFixture(t)
	manifest := filepath.Join(o.Node.ManifestsDir, "kube-scheduler.yaml")
	before, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var plan syncbuf.Buffer
	if _, err := Run(context.Background(), o, phase.Options{DryRun: true, PlanOut: &plan}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"compile", "take-out", "put-back", "writes " + filepath.Join(o.TreeDir, "_output", "devk", "run", LaunchFile), manifest} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("the plan does not say %q:\n%s", want, plan.String())
		}
	}
	if after, _ := os.ReadFile(manifest); string(after) != string(before) {
		t.Error("a dry run changed the manifest")
	}
	if _, err := os.Stat(filepath.Join(o.TreeDir, "_output", "devk", "run")); !os.IsNotExist(err) {
		t.Errorf("a dry run wrote the launch configuration (%v)", err)
	}
}

// dlvScript stands in for Delve: it says with which arguments it runs,
// and ends with status 0 on SIGTERM (headless dlv's stop), not SIGINT.
const dlvScript = `#!/bin/sh
trap 'echo terminated; exit 0' TERM
echo "dlv $*"
while :; do sleep 0.05; done
`

// TestDebugRun: --debug runs the debug build under the debugger on the
// node's address (--continue unless --stop-at-start), with leader
// election off on one control plane; Ctrl-C sends the debugger SIGTERM.
// (dlv stands in: Delve itself runs the component in e2e/run_test.go.)
func TestDebugRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the debugger runs in a PID namespace of its own (unshare --pid)")
	}
	for _, atStart := range []bool{false, true} {
		o := runFixture(t)
		dir := t.TempDir()
		debugBin, dlv := filepath.Join(dir, "kube-scheduler"), filepath.Join(dir, "dlv")
		for path, script := range map[string]string{debugBin: stopScript, dlv: dlvScript} {
			if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		here := runtime.GOOS + "/" + runtime.GOARCH
		if err := build.UpdateState(o.TreeDir, func(st *build.StateFile) error {
			st.Component("scheduler").Debug = &build.BinaryRecord{Path: debugBin, Platform: here}
			st.Component(build.Delve).Binary = &build.BinaryRecord{Path: dlv, Platform: here}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		o.Debug, o.StopAtStart, o.DebugAddress = true, atStart, "127.0.0.1"
		var out syncbuf.Buffer
		o.Stdout = &out
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var r *Result
		go func() {
			var err error
			r, err = Run(ctx, o, phase.Options{Only: "run"})
			done <- err
		}()
		if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return strings.Contains(out.String(), "dlv "), nil
		}); err != nil {
			t.Fatalf("the debugger never ran: %q", out.String())
		}
		want := "dlv exec --headless --accept-multiclient --api-version=2 --listen=127.0.0.1:2347 --continue " + debugBin + " -- --kubeconfig=/home/u/.devk/clusters/devk/scheduler.conf --bind-address=10.250.0.2 --secure-port=10259 --v=2 --leader-elect=false"
		if atStart {
			want = strings.Replace(want, "--continue ", "", 1)
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("stop at start %v: the debugger printed %q, want %q", atStart, out.String(), want)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("a debug run ended by Ctrl-C failed: %v", err)
		}
		if !strings.Contains(strings.Join(r.Command, " "), "unshare --pid --fork --mount-proc --kill-child=SIGKILL "+dlv+" exec") {
			t.Errorf("command %q: the debugger not in a PID namespace of its own", r.Command)
		}
		if !strings.Contains(out.String(), "terminated") {
			t.Errorf("the debugger did not get SIGTERM: %q", out.String())
		}
	}
	o := runFixture(t)
	for _, c := range []struct {
		debug, goRun, atStart bool
		want                  string
	}{
		{true, true, false, "pick one"},
		{false, false, true, "it needs --debug"},
	} {
		o.Debug, o.GoRun, o.StopAtStart, o.DebugAddress = c.debug, c.goRun, c.atStart, "127.0.0.1"
		if _, err := NewJob(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c, err, c.want)
		}
	}
}
