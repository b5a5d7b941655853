//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/debug"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/syncbuf"
	"github.com/devk/devk/swap"
)

// runResult is what `devk run -o json` prints.
type runResult struct {
	Component  string   `json:"component"`
	Node       string   `json:"node"`
	Command    []string `json:"command"`
	LaunchJSON string   `json:"launchJSON"`
	Debugger   *struct {
		Address string `json:"address"`
	} `json:"debugger"`
	Exit *struct {
		Code    int  `json:"code"`
		Stopped bool `json:"stopped"`
	} `json:"exit"`
	PutBack *struct {
		NewImage string      `json:"newImage"`
		Checks   []swapCheck `json:"checks"`
	} `json:"putBack"`
}

// runPoints are the failpoints of `devk run` up to the process: the
// engine's before each phase, and those inside the hand-over.
var runPoints = []string{
	"run/backup", "swap/after-backup", "swap/after-journal", "run/take-out", "swap/after-vacate",
	"swap/handover", "run/after-take-out", "run/run", "run/started",
}

// backgroundRun is `devk run` started in the background.
type backgroundRun struct {
	cmd            *exec.Cmd
	stdout, stderr syncbuf.Buffer
	done           chan struct{}
	err            error // Wait's, once done is closed
}

// runEndTimeout bounds the wait for a `devk run` to end once told to:
// the scheduler's stop, then the put-back (at most its --timeout).
const runEndTimeout = 5 * time.Minute

func startRun(t *testing.T, sc *SharedCluster, args ...string) *backgroundRun {
	t.Helper()
	b := &backgroundRun{cmd: exec.Command(devkBin, append([]string{"run"}, args...)...), done: make(chan struct{})}
	b.cmd.Dir, b.cmd.Env = sc.Tree, append(os.Environ(), sc.Env...)
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	})
	return b
}

// processOf is "PID EXE" of a process whose executable's path ends in
// suffix; empty when none runs.
func processOf(t *testing.T, suffix string) string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/exe")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if exe, err := os.Readlink(p); err == nil && strings.HasSuffix(exe, suffix) {
			return strings.TrimSuffix(strings.TrimPrefix(p, "/proc/"), "/exe") + " " + exe
		}
	}
	return ""
}

// ended says whether the run has ended.
func (b *backgroundRun) ended() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// wait waits for the run to end, at most runEndTimeout.
func (b *backgroundRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-b.done:
		return b.err
	case <-time.After(runEndTimeout):
		t.Fatalf("devk run did not end within %s:\n%s", runEndTimeout, b.stderr.String())
		return nil
	}
}

// TestRun runs the scheduler out of its static pod with `devk run`: the
// static pod goes, the foreground scheduler schedules a new pod, Ctrl-C
// brings the static pod back (verified by digest); then devk is killed
// with kill -9 while the scheduler runs, and the next `devk swap`, and
// after another kill the next `devk up`, put the static pod back.
func TestRun(t *testing.T) {
	sc := Cluster(t)
	ctx := context.Background()
	clusterDir := filepath.Join(sc.Home, "clusters", "devk")
	cfg, err := layout.ReadConfig(filepath.Join(clusterDir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	node := cfg.FirstNode().Name
	m := swap.ManifestFor(filepath.Join(clusterDir, "manifests"), "kube-scheduler")
	mirror := "kube-scheduler-" + node
	cs := clientFor(t, sc.Kubeconfig)
	devk := func(t *testing.T, args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, sc.Tree, sc.Env, args...)
	}
	// The static pod runs the pushed build, so that the `devk swap
	// scheduler` below has nothing to swap once it has put the pod back.
	devk(t, "build", "scheduler", "--push")
	devk(t, "swap", "scheduler")
	image := manifestImage(t, m.Path)

	// out waits until the run has taken the pod out and started the
	// scheduler in its place (the journal names its process).
	out := func(t *testing.T, b *backgroundRun) swap.Journal {
		t.Helper()
		var j *swap.Journal
		eventually(t, ctx, "devk run to start the scheduler", func() error {
			if b.ended() {
				t.Fatalf("devk run ended early (%v):\n%s", b.err, b.stderr.String())
			}
			var err error
			if j, err = m.InProgress(); err != nil || j == nil || j.Run == nil || !j.Run.Process.Running() {
				return fmt.Errorf("no journal of a running process yet (%v)", err)
			}
			return nil
		})
		if _, err := os.Stat(m.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the scheduler's manifest is still in the manifests dir while devk run runs (%v)", err)
		}
		eventually(t, ctx, "the static pod's mirror pod to go", func() error {
			if _, err := cs.CoreV1().Pods("kube-system").Get(ctx, mirror, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("mirror pod %s: %v", mirror, err)
			}
			return nil
		})
		return *j
	}
	// back checks that the static pod runs the image it ran before.
	back := func(t *testing.T) {
		t.Helper()
		if got := manifestImage(t, m.Path); got != image {
			t.Errorf("the manifest names %s, want %s as before the run", got, image)
		}
		if j, _ := m.InProgress(); j != nil {
			t.Errorf("the run's journal is still there: %+v", j)
		}
		eventually(t, ctx, "devk digest verify scheduler to pass", func() error {
			if r := Devk(t, sc.Tree, sc.Env, "digest", "verify", "scheduler"); r.Err != nil {
				return fmt.Errorf("%v\n%s%s", r.Err, r.Stdout, r.Stderr)
			}
			return nil
		})
	}

	// newPod creates a pod for the scheduler to place, gone at the end.
	newPod := func(t *testing.T, name string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: cfg.Images["pause"]}}},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	// scheduled waits until pod name is bound to the node.
	scheduled := func(t *testing.T, what, name string) {
		t.Helper()
		eventually(t, ctx, what, func() error {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName != node {
				return fmt.Errorf("pod is on %q", p.Spec.NodeName)
			}
			return nil
		})
	}
	// ctrlC stops the run as a Ctrl-C does and reads its result.
	ctrlC := func(t *testing.T, b *backgroundRun) runResult {
		t.Helper()
		if err := b.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if err := b.wait(t); err != nil {
			t.Fatalf("devk run after Ctrl-C: %v\n%s", err, b.stderr.String())
		}
		var r runResult
		if err := json.Unmarshal([]byte(b.stdout.String()), &r); err != nil {
			t.Fatalf("devk run -o json printed %q: %v", b.stdout.String(), err)
		}
		return r
	}

	step(t, "run and Ctrl-C", func(t *testing.T) {
		b := startRun(t, sc, "scheduler", "-o", "json")
		out(t, b)
		newPod(t, "e2e-run-scheduled")
		scheduled(t, "the foreground scheduler to schedule a pod", "e2e-run-scheduled")
		r := ctrlC(t, b)
		if r.Exit == nil || !r.Exit.Stopped || r.PutBack == nil || r.PutBack.NewImage != image || len(r.Command) == 0 {
			t.Errorf("result %+v: want a stopped scheduler and the pod back on %s", r, image)
		}
		for _, c := range r.PutBack.Checks {
			if !c.OK {
				t.Errorf("check %s failed after the put-back: got %s, want %s", c.Check, c.Got, c.Want)
			}
		}
		if _, err := os.Stat(r.LaunchJSON); err != nil {
			t.Errorf("launch configuration: %v", err)
		}
		back(t)
	})

	// Killed at each step, then `devk swap scheduler` puts the pod back;
	// a Ctrl-C (SIGINT to devk alone) while the scheduler runs ends the
	// run as the terminal's does.
	step(t, "kill points", func(t *testing.T) {
		for _, point := range runPoints {
			t.Run(point, func(t *testing.T) {
				if r := atPoint(t, sc.Tree, sc.Env, point, "kill", "run", "scheduler"); !killedBySignal(r.Err, syscall.SIGKILL) {
					t.Fatalf("devk run at %s: %v, want killed\n%s", point, r.Err, r.Stderr)
				}
				devk(t, "swap", "scheduler")
				back(t)
			})
		}
		t.Run("run/started=int", func(t *testing.T) {
			if r := atPoint(t, sc.Tree, sc.Env, "run/started", "int", "run", "scheduler"); r.Err != nil {
				t.Fatalf("devk run after a Ctrl-C: %v\n%s", r.Err, r.Stderr)
			}
			back(t)
		})
	})

	// --debug --stop-at-start: the debug build under Delve waits before
	// main (a new pod stays unscheduled) until the test's own client
	// continues it; Ctrl-C puts the pod back. Killed with kill -9, the
	// debugger and the scheduler under it die with devk.
	step(t, "run --debug, stopped at start", func(t *testing.T) {
		dlv := delveClient(t)
		b := startRun(t, sc, "scheduler", "--debug", "--stop-at-start", "-o", "json")
		out(t, b)
		newPod(t, "e2e-run-debug")
		time.Sleep(atStartPause)
		if p, err := cs.CoreV1().Pods("default").Get(ctx, "e2e-run-debug", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("pod scheduled to %q (%v) while the scheduler waits before main", p.Spec.NodeName, err)
		}
		addr := cfg.FirstNode().IP + ":" + strconv.Itoa(debug.Ports["scheduler"])
		dlvSession(t, ctx, dlv, addr, filepath.Join(debug.Dir(sc.Tree), "kube-scheduler.dlv"), "quit -c\n")
		scheduled(t, "the scheduler under Delve to schedule the pod once continued", "e2e-run-debug")
		r := ctrlC(t, b)
		if r.Debugger == nil || r.Debugger.Address != addr || !slices.ContainsFunc(r.Command, func(a string) bool { return strings.HasSuffix(a, "/dlv") }) || r.Exit == nil || !r.Exit.Stopped {
			t.Errorf("result %+v: want the scheduler stopped under dlv at %s", r, addr)
		}
		back(t)

		b = startRun(t, sc, "scheduler", "--debug")
		out(t, b)
		debugBin := ""
		eventually(t, ctx, "the scheduler's debug build to run under dlv", func() error {
			debugBin = processOf(t, "-debug/kube-scheduler")
			if debugBin == "" {
				return fmt.Errorf("no process runs a debug kube-scheduler")
			}
			return nil
		})
		if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		b.wait(t)
		eventually(t, ctx, "the debugger and the scheduler to die with devk", func() error {
			if p := processOf(t, "-debug/kube-scheduler"); p != "" {
				return fmt.Errorf("%s still runs", p)
			}
			return nil
		})
		devk(t, "swap", "scheduler")
		back(t)
	})

	for _, next := range [][]string{{"swap", "scheduler"}, {"up"}} {
		step(t, "kill -9, then "+strings.Join(next, " "), func(t *testing.T) {
			b := startRun(t, sc, "scheduler")
			j := out(t, b)
			if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := b.wait(t); !killedBySignal(err, syscall.SIGKILL) {
				t.Fatalf("devk run: %v, want killed", err)
			}
			eventually(t, ctx, "the scheduler to die with devk", func() error {
				if j.Run.Process.Running() {
					return fmt.Errorf("pid %d still runs", j.Run.Process.PID)
				}
				return nil
			})
			if _, err := os.Stat(m.Path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the manifest is back before any command put it back (%v)", err)
			}
			r := devk(t, next...)
			if next[0] == "swap" && !strings.Contains(r.Stdout, "put back after an interrupted devk run") {
				t.Errorf("devk swap does not say it put the scheduler back:\n%s", r.Stdout)
			}
			back(t)
		})
	}
}
