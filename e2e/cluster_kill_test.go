//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/internal/syncbuf"
	"github.com/devk/devk/phase"
)

// runnablePaths are the phases of a job that do work (each has a
// failpoint "<job>/<path>" in test builds).
func runnablePaths[S any](ps []*phase.Phase[S]) []string {
	var out []string
	for _, st := range phase.Flatten(ps) {
		if st.Phase.Run != nil {
			out = append(out, st.Path)
		}
	}
	return out
}

// TestUpDownKillPoints kills `devk up` at every one of its phases in
// turn, then interrupts it there, each run resuming what the one before
// left, then checks that one more `devk up` brings
// the cluster up healthy on the pushed digests; then does the same with
// `devk down`, after which nothing may be left. A second up or down while
// one holds the node is refused, naming it.
func TestUpDownKillPoints(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd and a kubelet (run `make e2e` as root)")
	}
	tree := Tree(t)
	home, kubeconfig, env := ownHome(t)
	must := func(args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, tree, env, args...)
	}
	t.Cleanup(func() { Devk(t, tree, env, "down") })
	// At each point: kill -9, then Ctrl-C (the second run resumes what
	// the first left and is interrupted at the same point).
	at := func(job, p string) {
		t.Helper()
		point := job + "/" + p
		if r := atPoint(t, tree, env, point, "kill", job); !killedBySignal(r.Err, syscall.SIGKILL) {
			t.Fatalf("not killed at %s: %v\n%s", point, r.Err, r.Stderr)
		}
		if r := atPoint(t, tree, env, point, "int", job); exitCode(r.Err) != 130 {
			t.Fatalf("exit %d after Ctrl-C at %s, want 130:\n%s", exitCode(r.Err), point, r.Stderr)
		}
	}

	upPoints := runnablePaths(cluster.UpPhases())
	for _, p := range upPoints {
		switch p {
		case "nodes":
			continue // a single-node cluster skips it; TestMultiNode kills node add at each of its join phases
		case "load-balancer":
			continue // so does it this one; TestHAControlPlane kills an HA up there
		case "kubeadm-config", "kubeadm-init":
			continue // a cluster of devk's own skips them; TestKubeadmBootstrapper kills a kubeadm up inside kubeadm's init
		}
		at("up", p)
	}
	must("up")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := clientFor(t, filepath.Join(home, "clusters", "devk", "admin.conf"))
	eventually(t, ctx, "the node to be Ready", func() error {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 1 || !nodeReady(&nodes.Items[0]) {
			return errNotYet
		}
		return nil
	})
	eventually(t, ctx, "every digest to agree", func() error {
		if r := Devk(t, tree, env, "digest", "verify", "etcd", "apiserver", "controller-manager", "scheduler"); r.Err != nil {
			return errNotYet
		}
		return nil
	})
	// An up held at its images phase refuses a second up and a swap.
	holdAndRefuse(t, tree, env, "up/images", []string{"up"}, false, []string{"up"}, []string{"swap", "scheduler"})

	// A down held at its first phase refuses a second down (and then
	// takes the cluster down: bring it up again for the kill points).
	holdAndRefuse(t, tree, env, "down/kubelet", []string{"down"}, false, []string{"down"}, []string{"swap", "scheduler"}, []string{"up"})
	must("up")

	downPoints := runnablePaths(cluster.DownPhases())
	for _, p := range downPoints {
		at("down", p)
	}
	if r := Devk(t, tree, env, "down"); r.Err != nil && !strings.Contains(r.Stderr, "no cluster") {
		t.Fatalf("devk down after the kill points: %v\n%s", r.Err, r.Stderr)
	}
	checkNothingLeft(t, home, kubeconfig, "devk-devk")
	t.Logf("up: %d kill points, down: %d, each hit by kill -9 and by Ctrl-C and resumed by the next run (%d runs); the cluster came up healthy and went away leaving nothing", len(upPoints), len(downPoints), 2*(len(upPoints)+len(downPoints)))
}

// holdAndRefuse runs `devk ARGS` held at point, checks that each of
// others is refused naming it, and lets it finish (or, with kill, kills
// it there: the next run resumes it).
func holdAndRefuse(t *testing.T, tree string, env []string, point string, args []string, kill bool, others ...[]string) {
	t.Helper()
	verb := strings.Join(args, " ")
	cmd := exec.Command(failpointDevk(t), args...)
	cmd.Dir = tree
	cmd.Env = append(append(os.Environ(), env...), "DEVK_FAILPOINT="+point+"=hold")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Minute)
	for !strings.Contains(stderr.String(), "failpoint "+point) {
		if time.Now().After(deadline) {
			t.Fatalf("devk %s never reached %s:\n%s", verb, point, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, o := range others {
		r := Devk(t, tree, env, o...)
		if r.Err == nil || !strings.Contains(r.Stderr, "is busy") || !strings.Contains(r.Stderr, fmt.Sprintf("pid %d", cmd.Process.Pid)) {
			t.Errorf("devk %s while a devk %s holds the node: %v\n%s", strings.Join(o, " "), verb, r.Err, r.Stderr)
		}
	}
	if kill {
		cmd.Process.Kill()
		cmd.Wait()
		return
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the held devk %s: %v\n%s", verb, err, stderr.String())
	}
}
