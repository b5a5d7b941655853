package node

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestNodeSystemctl checks, in a real node (its namespaces made by the
// test), that the node's systemctl is devk: the link in its bin dir names
// the running binary and, where the host has a systemctl, it is that
// file inside the node; and that the kubelet service starts, restarts
// and stops the supervised kubelet (a script that sleeps, as the node's
// kubelet binary), refusing a start without the kubelet's files.
func TestNodeSystemctl(t *testing.T) {
	n := testExecNode(t)
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(n.SystemctlLink()); err != nil || got != exe {
		t.Fatalf("the node's systemctl link = %q, %v; want %s", got, err, exe)
	}
	if changed, err := n.installSystemctl(); err != nil || changed {
		t.Errorf("installSystemctl again = %v, %v; want nothing to do", changed, err)
	}
	var devk, host strings.Builder
	for _, p := range hostSystemctls {
		if _, err := os.Stat(p); err != nil {
			continue // the host has none there: the node neither
		}
		out, err := exec.Command("nsenter", "--mount="+n.Files.MountNS(), "--", "stat", "-L", "-c", "%d %i", p).Output()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := exec.Command("stat", "-L", "-c", "%d %i", exe).Output()
		hostID, _ := exec.Command("stat", "-L", "-c", "%d %i", p).Output()
		if string(out) != string(want) {
			t.Errorf("%s in the node is %s; want devk's (%s)", p, out, want)
		}
		if string(hostID) == string(want) {
			t.Errorf("%s on the host is devk: the bind leaked out of the node", p)
		}
		devk.Write(out)
		host.Write(hostID)
	}
	t.Logf("host's systemctl: %q; in the node: %q", host.String(), devk.String())

	// No kubelet installed: a start says what to run.
	if _, _, err := n.ServeKubelet(ctx, nil, false); err == nil || !strings.Contains(err.Error(), "`devk up") {
		t.Errorf("ServeKubelet without a kubelet = %v; want an error saying to run devk up", err)
	}
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(n.Files.KubeletBinary(), "#!/bin/sh\nexec sleep 600\n", 0o755)
	write(n.Files.KubeletConfig(), "kind: KubeletConfiguration\n", 0o644)
	t.Cleanup(func() { _, _ = n.StopKubelet(ctx) })

	pid, started, err := n.ServeKubelet(ctx, nil, false)
	if err != nil || !started || pid == 0 {
		t.Fatalf("ServeKubelet = %d, %v, %v; want it started", pid, started, err)
	}
	if st := n.KubeletState(); st.PID != pid || st.Since.IsZero() || len(st.Argv) == 0 {
		t.Errorf("KubeletState = %+v; want pid %d with its start time and command line", st, pid)
	}
	if !n.inMountNS(pid) {
		t.Errorf("the kubelet (pid %d) runs outside the node's mount namespace", pid)
	}
	if again, started, err := n.ServeKubelet(ctx, nil, false); err != nil || started || again != pid {
		t.Errorf("ServeKubelet while it runs = %d, %v, %v; want %d left running", again, started, err, pid)
	}
	restarted, err := n.RestartServedKubelet(ctx, nil, false)
	if err != nil || restarted == pid || restarted == 0 {
		t.Errorf("RestartServedKubelet = %d, %v; want a new pid (was %d)", restarted, err, pid)
	}
	if stopped, err := n.StopKubelet(ctx); err != nil || !stopped {
		t.Errorf("StopKubelet = %v, %v", stopped, err)
	}
	if st := n.KubeletState(); st.PID != 0 {
		t.Errorf("KubeletState after stop = %+v; want none running", st)
	}

	// A kubelet that exits at once: the start fails with its log.
	write(n.Files.KubeletBinary(), "#!/bin/sh\necho bad flag for the test >&2\nexit 1\n", 0o755)
	if _, _, err := n.ServeKubelet(ctx, nil, false); err == nil || !strings.Contains(err.Error(), "bad flag for the test") {
		t.Errorf("ServeKubelet of a kubelet that exits = %v; want its log quoted", err)
	}

	// Started for a kubeadm a devk job runs (watched): the start returns
	// at once, as systemd's; the job's watch sees the exit and stops
	// kubeadm with the kubelet's log. A kubelet that keeps running, or
	// one systemctl stopped, stops nothing.
	watchFor := func(d time.Duration) error {
		wctx, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		go n.watchKubelet(wctx, stop)
		select {
		case <-wctx.Done():
			return context.Cause(wctx)
		case <-time.After(d):
			return nil
		}
	}
	if _, _, err := n.ServeKubelet(ctx, nil, true); err != nil {
		t.Fatalf("a watched ServeKubelet of a kubelet that exits = %v; want it to return once started", err)
	}
	if err := watchFor(10 * kubeletWatchInterval); !errors.Is(err, errKubeletExited) || !strings.Contains(err.Error(), "bad flag for the test") {
		t.Errorf("the watch of a kubelet that exited = %v; want errKubeletExited with its log", err)
	}
	if _, err := n.StopKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := watchFor(4 * kubeletWatchInterval); err != nil {
		t.Errorf("the watch of a stopped kubelet = %v; want nothing (systemctl stopped it)", err)
	}
	write(n.Files.KubeletBinary(), "#!/bin/sh\nexec sleep 600\n", 0o755)
	if _, err := n.RestartServedKubelet(ctx, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := watchFor(4 * kubeletWatchInterval); err != nil {
		t.Errorf("the watch of a running kubelet = %v; want nothing", err)
	}
}
