//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devk/devk/internal/syncbuf"
)

// The kill points of a static-pod swap, in order (swap/*.go calls
// failpoint.Hit with these names).
var swapPoints = []string{
	"swap/after-pull", "swap/after-backup", "swap/after-journal", "swap/after-vacate",
	"swap/handover", "swap/after-write", "swap/wait-ready", "swap/verify",
}

var (
	fpOnce sync.Once
	fpBin  string
	fpErr  error
)

// failpointDevk is devk built with -tags failpoints: DEVK_FAILPOINT=
// point=kill|int|int2|hold makes it act at that point.
func failpointDevk(t *testing.T) string {
	t.Helper()
	fpOnce.Do(func() {
		fpBin = filepath.Join(workDir, "devk-failpoints")
		// Static, as make build's: it is also the node agent's image.
		build := exec.Command("go", "build", "-tags", "failpoints", "-o", fpBin, "../cmd/devk")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		if err != nil {
			fpErr = fmt.Errorf("go build -tags failpoints: %v\n%s", err, out)
		}
	})
	if fpErr != nil {
		t.Fatal(fpErr)
	}
	return fpBin
}

// atPoint runs the failpoint build with DEVK_FAILPOINT=point=action and
// checks that the point was reached (it prints "failpoint <point>").
func atPoint(t *testing.T, dir string, env []string, point, action string, args ...string) Result {
	t.Helper()
	env = append(append([]string{}, env...), "DEVK_FAILPOINT="+point+"="+action)
	r := run(t, dir, env, failpointDevk(t), args...)
	if !strings.Contains(r.Stderr, "failpoint "+point+":") {
		t.Fatalf("devk %s never reached failpoint %s (exit %v):\n%s", strings.Join(args, " "), point, r.Err, r.Stderr)
	}
	return r
}

func killedBySignal(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// TestSwapKillPoints kills (kill -9) and interrupts (Ctrl-C) `devk swap`
// at every step, then runs what a user would, and checks after each that
// the scheduler runs healthy on an image that was pushed, every digest
// agrees, no journal or half-written file is left, and nothing but
// manifests is in the kubelet's manifests dir. It then checks that a
// second swap, an up and a down are refused while a swap holds the node.
func TestSwapKillPoints(t *testing.T) {
	sc := Cluster(t)
	tree, home, env := sc.Tree, sc.Home, sc.Env
	clusterDir := filepath.Join(home, "clusters", "devk")
	manifests := filepath.Join(clusterDir, "manifests")
	manifest := filepath.Join(manifests, "kube-scheduler.yaml")
	work := filepath.Join(clusterDir, ".devk-swap")
	must := func(t *testing.T, args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, tree, env, args...)
	}
	// Each case swaps to a new image of the same scheduler binary: a new
	// SOURCE_DATE_EPOCH gives a new image config, so a new digest,
	// without a compile.
	known := map[string]bool{manifestImage(t, manifest): true}
	epoch := 1_000_000
	push := func(t *testing.T) string {
		t.Helper()
		epoch++
		r := Devk(t, tree, append(append([]string{}, env...), "SOURCE_DATE_EPOCH="+strconv.Itoa(epoch)), "push", "scheduler")
		if r.Err != nil {
			t.Fatalf("devk push scheduler: %v\n%s", r.Err, r.Stderr)
		}
		ref := strings.TrimSpace(r.Stdout)
		if !strings.Contains(ref, "@sha256:") || known[ref] {
			t.Fatalf("push gave %q, want a new digest", ref)
		}
		known[ref] = true
		return ref
	}
	ctx := context.Background()
	healthy := func(t *testing.T, what string) {
		t.Helper()
		entries, _ := os.ReadDir(manifests)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".yaml") {
				t.Errorf("%s: the manifests dir holds %s", what, e.Name())
			}
			manifestImage(t, filepath.Join(manifests, e.Name())) // each parses whole
		}
		if img := manifestImage(t, manifest); !known[img] {
			t.Fatalf("%s: the manifest names %s, which was never pushed", what, img)
		}
		for _, f := range []string{"kube-scheduler.swap.json", "kube-scheduler.yaml.swapping"} {
			if _, err := os.Stat(filepath.Join(work, f)); !os.IsNotExist(err) {
				t.Errorf("%s: %s is left (%v)", what, f, err)
			}
		}
		if tmps, _ := filepath.Glob(filepath.Join(work, ".*.tmp-*")); len(tmps) > 0 {
			t.Errorf("%s: temp files left: %v", what, tmps)
		}
		// The manifest, the running container (CRI) and the mirror pod
		// agree on the manifest's digest (which need not be the last
		// pushed one: an interrupted swap may have gone back).
		want := manifestImage(t, manifest)
		want = want[strings.Index(want, "@")+1:]
		eventually(t, ctx, what+": the node to run "+want, func() error {
			r := Devk(t, tree, env, "digest", "scheduler", "-o", "json")
			var reps []struct {
				Observations []struct{ Source, Digest string } `json:"observations"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &reps); err != nil || len(reps) != 1 {
				return errNotYet
			}
			seen := map[string]string{}
			for _, ob := range reps[0].Observations {
				seen[ob.Source] = ob.Digest
			}
			for _, src := range []string{"manifest", "cri", "mirror-pod"} {
				if seen[src] != want {
					return fmt.Errorf("%s has %q: %w", src, seen[src], errNotYet)
				}
			}
			return nil
		})
	}
	recoveries := []string{"swap", "rollback", "up"}
	cases, recovered := 0, 0
	for i, point := range swapPoints {
		for _, action := range []string{"kill", "int"} {
			t.Run(point+"="+action, func(t *testing.T) {
				cases++
				push(t)
				r := atPoint(t, tree, env, point, action, "swap", "scheduler", "-v")
				switch action {
				case "kill":
					if !killedBySignal(r.Err, syscall.SIGKILL) {
						t.Fatalf("not killed: %v\n%s", r.Err, r.Stderr)
					}
					how := recoveries[i%len(recoveries)]
					switch how {
					case "swap":
						must(t, "swap", "scheduler")
					case "rollback":
						// With a journal: back to what the swap replaced;
						// without one (killed before it): the last backup.
						must(t, "swap", "--rollback", "scheduler")
					case "up":
						must(t, "up")
						must(t, "swap", "scheduler") // finishes or discards the journal
					}
					healthy(t, "after kill -9 at "+point+" and devk "+how)
				case "int":
					// Ctrl-C undoes the swap (or, past ready, keeps it)
					// by itself: no command is needed afterwards.
					if code := exitCode(r.Err); code != 130 && code != 0 {
						t.Fatalf("exit %d after Ctrl-C, want 130 (or 0 if the swap was verified):\n%s", code, r.Stderr)
					}
					healthy(t, "after Ctrl-C at "+point)
				}
				recovered++
			})
		}
	}
	t.Run("swap/handover=int2", func(t *testing.T) {
		// A second Ctrl-C stops waiting for the old pod: the journal stays,
		// and the next swap finishes the job.
		cases++
		push(t)
		r := atPoint(t, tree, env, "swap/handover", "int2", "swap", "scheduler", "-v")
		if code := exitCode(r.Err); code != 130 {
			t.Fatalf("exit %d after two Ctrl-C, want 130:\n%s", code, r.Stderr)
		}
		must(t, "swap", "scheduler")
		healthy(t, "after two Ctrl-C in the hand-over and devk swap")
		recovered++
	})
	t.Logf("swap kill points: %d cases (%d points x kill/Ctrl-C, and a double Ctrl-C), %d recovered healthy on a pushed image", cases, len(swapPoints), recovered)

	// While a swap holds the node, another swap, an up and a down are
	// refused, naming it.
	t.Run("concurrent", func(t *testing.T) {
		push(t)
		cmd := exec.Command(failpointDevk(t), "swap", "scheduler")
		cmd.Dir = tree
		cmd.Env = append(append(os.Environ(), env...), "DEVK_FAILPOINT=swap/after-pull=hold")
		var stderr syncbuf.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(stderr.String(), "failpoint swap/after-pull") {
			if time.Now().After(deadline) {
				t.Fatalf("the first swap never held:\n%s", stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		holder := fmt.Sprintf("pid %d", cmd.Process.Pid)
		for _, args := range [][]string{{"swap", "scheduler"}, {"swap", "--rollback", "apiserver"}, {"up"}, {"down"}} {
			r := Devk(t, tree, env, args...)
			if r.Err == nil || !strings.Contains(r.Stderr, "is busy") || !strings.Contains(r.Stderr, holder) {
				t.Errorf("devk %s while a swap holds the node: %v\n%s", strings.Join(args, " "), r.Err, r.Stderr)
			}
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("the held swap: %v\n%s", err, stderr.String())
		}
		healthy(t, "after the held swap")
	})
}
