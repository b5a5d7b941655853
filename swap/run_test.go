package swap

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/internal/supervise"
)

// runArgv is the command line a run journal records in these tests.
var runArgv = []string{"/tree/_output/bin/kube-apiserver", "--advertise-address=127.0.0.1"}

// container is the apiserver container of the fixture's manifest.
func (fx *swapFixture) container(t *testing.T) *corev1.Container {
	t.Helper()
	pod, _, err := fx.m.Read()
	if err != nil {
		t.Fatal(err)
	}
	c, err := staticpod.Container(pod, "kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	return c.DeepCopy()
}

// leftProcess starts a process standing in for the one a killed `devk
// run` left running, and records it in the journal.
func leftProcess(t *testing.T, m Manifest) supervise.ProcessID {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	id, err := supervise.Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RecordRun(id); err != nil {
		t.Fatal(err)
	}
	return id
}

// checkBack checks that the pod runs the old image from its manifest
// again, and that the run left no journal or pending backup, and no
// rollback history.
func checkBack(t *testing.T, fx *swapFixture, res *Result) {
	t.Helper()
	if got := imageOf(t, fx.m.Path); got != oldImage {
		t.Errorf("manifest names %s, want %s", got, oldImage)
	}
	if got := fx.node.running("kube-apiserver"); got != oldImage {
		t.Errorf("the node runs %q, want %s", got, oldImage)
	}
	if j, _ := fx.m.InProgress(); j != nil {
		t.Errorf("the journal is still there: %+v", j)
	}
	for _, p := range []string{fx.m.PendingPath(), fx.m.BackupPath()} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is there after a run (err %v): a run must not touch the rollback history", p, err)
		}
	}
	if res == nil {
		t.Fatal("no result")
	}
	if !res.Run || !res.Restored || res.NewImage != oldImage {
		t.Errorf("result %+v, want a run put back on %s", res, oldImage)
	}
	if bad := failedChecks(res); len(bad) > 0 {
		t.Errorf("failed checks: %v", bad)
	}
}

func TestRunTakesThePodOutAndPutsItBack(t *testing.T) {
	ctx := context.Background()
	fx := newSwapFixture(t)
	n := fx.node.Target()
	old, err := fx.m.BeginRun("kube-apiserver", runArgv)
	if err != nil || old != oldImage {
		t.Fatalf("BeginRun = %q, %v; want %s", old, err, oldImage)
	}
	if err := n.TakeOut(ctx, "kube-apiserver", fx.container(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fx.m.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the manifest is still in the manifests dir after the take-out (err %v)", err)
	}
	if got := fx.node.running("kube-apiserver"); got != "" {
		t.Fatalf("the pod still runs %s after the take-out", got)
	}
	j, err := fx.m.InProgress()
	if err != nil || j == nil || j.Run == nil || j.NewImage != "" || j.OldImage != oldImage {
		t.Fatalf("journal %+v, %v; want a run of %s", j, err, oldImage)
	}
	res, err := n.PutBack(ctx, "kube-apiserver", j)
	if err != nil {
		t.Fatal(err)
	}
	checkBack(t, fx, res)
}

// TestResumePutsBackAnInterruptedRun: whichever step a kill stopped a
// run at, the next command's resume puts the pod back, verified, and
// stops a process the run left.
func TestResumePutsBackAnInterruptedRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		// upTo does the run's steps up to its kill.
		upTo func(t *testing.T, fx *swapFixture, n *Target) *supervise.ProcessID
	}{
		{"after the journal", func(*testing.T, *swapFixture, *Target) *supervise.ProcessID { return nil }},
		{"after the take-out", func(t *testing.T, fx *swapFixture, n *Target) *supervise.ProcessID {
			if err := n.TakeOut(context.Background(), "kube-apiserver", fx.container(t)); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{"during the take-out, the manifest moved out", func(t *testing.T, fx *swapFixture, _ *Target) *supervise.ProcessID {
			if err := fx.m.Vacate(); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{"while the process runs", func(t *testing.T, fx *swapFixture, n *Target) *supervise.ProcessID {
			if err := n.TakeOut(context.Background(), "kube-apiserver", fx.container(t)); err != nil {
				t.Fatal(err)
			}
			id := leftProcess(t, fx.m)
			return &id
		}},
		{"after the manifest went back", func(t *testing.T, fx *swapFixture, n *Target) *supervise.ProcessID {
			if err := n.TakeOut(context.Background(), "kube-apiserver", fx.container(t)); err != nil {
				t.Fatal(err)
			}
			if _, err := fx.m.Restore("kube-apiserver", nil); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fx := newSwapFixture(t)
			n := fx.node.Target()
			if _, err := fx.m.BeginRun("kube-apiserver", runArgv); err != nil {
				t.Fatal(err)
			}
			left := tc.upTo(t, fx, n)
			res, err := ResumeAll(ctx, fx.node.dir, func(context.Context) (*Target, error) { return n, nil }, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 1 || !res[0].Resumed {
				t.Fatalf("results %+v, want one resumed", res)
			}
			checkBack(t, fx, res[0])
			if left != nil && left.Running() {
				t.Errorf("the process the run left (pid %d) still runs", left.PID)
			}
		})
	}
}

// TestReturnRun: `devk up` puts back, as a file, the manifest a killed
// run took out, and stops what the run left; it leaves a swap's journal
// alone.
func TestReturnRun(t *testing.T) {
	ctx := context.Background()
	m := writeManifest(t)
	if _, err := m.BeginRun("kube-apiserver", runArgv); err != nil {
		t.Fatal(err)
	}
	if err := m.Vacate(); err != nil {
		t.Fatal(err)
	}
	left := leftProcess(t, m)
	back, err := m.ReturnRun(ctx, "kube-apiserver")
	if err != nil || !back {
		t.Fatalf("ReturnRun = %v, %v; want true", back, err)
	}
	if got := imageOf(t, m.Path); got != oldImage {
		t.Errorf("manifest names %s, want %s", got, oldImage)
	}
	if j, _ := m.InProgress(); j != nil {
		t.Errorf("the journal is still there: %+v", j)
	}
	if left.Running() {
		t.Errorf("the process the run left (pid %d) still runs", left.PID)
	}
	if back, err := m.ReturnRun(ctx, "kube-apiserver"); back || err != nil {
		t.Errorf("ReturnRun again = %v, %v; want false", back, err)
	}

	if _, err := m.Begin("kube-apiserver", newImage); err != nil {
		t.Fatal(err)
	}
	if back, err := m.ReturnRun(ctx, "kube-apiserver"); back || err != nil {
		t.Errorf("ReturnRun of a swap's journal = %v, %v; want false", back, err)
	}
	if j, _ := m.InProgress(); j == nil || j.NewImage != newImage {
		t.Errorf("a swap's journal went: %+v", j)
	}
}

func TestRecordRunNeedsARunJournal(t *testing.T) {
	m := writeManifest(t)
	if err := m.RecordRun(supervise.ProcessID{PID: 1}); err == nil {
		t.Error("RecordRun without a journal succeeded")
	}
	if _, err := m.Begin("kube-apiserver", newImage); err != nil {
		t.Fatal(err)
	}
	if err := m.RecordRun(supervise.ProcessID{PID: 1}); err == nil {
		t.Error("RecordRun into a swap's journal succeeded")
	}
}
