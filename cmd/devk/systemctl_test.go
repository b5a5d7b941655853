package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/nodelock"
)

// TestNodeSystemctl runs devk's systemctl as kubeadm and a user run it
// in a node (`devk node exec -- systemctl …`; the node's namespaces made
// by the test, its kubelet a script that sleeps): it starts, restarts and
// stops the node's supervised kubelet, which runs in the node's
// namespaces; /usr/bin/systemctl in the node is devk's too; other units
// exit 5; run as systemctl outside a node, devk says what it is.
func TestNodeSystemctl(t *testing.T) {
	ctx := context.Background()
	c, name := nodeTestCluster(t, "sysctl")
	home, n := c.Home, c.FirstNode()
	if err := c.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	nodeNamespaces(t, ctx, n)
	t.Cleanup(func() {
		if _, err := n.StopKubelet(ctx); err != nil {
			t.Error(err)
		}
	})
	if err := os.WriteFile(n.Files.KubeletBinary(), []byte("#!/bin/sh\necho the test kubelet starts\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.Files.KubeletConfig(), []byte("kind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var inNodeEnv []string
	inNode := func(t *testing.T, wantCode int, args ...string) string {
		t.Helper()
		cmd := devkProcess(home, append([]string{"node", "exec", "--name", name, "--"}, args...)...)
		cmd.Env = append(cmd.Env, inNodeEnv...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		if code := cmd.ProcessState.ExitCode(); code != wantCode {
			t.Fatalf("devk node exec -- %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, out, stderr.String())
		}
		return string(out) + stderr.String()
	}
	procs := n.Files.Procs()
	dev, ino, _ := mountns.ID(n.Files.MountNS())

	if out := inNode(t, 3, "systemctl", "is-active", "kubelet"); out != "inactive\n" {
		t.Errorf("is-active before a start: %q", out)
	}
	inNode(t, 0, "systemctl", "daemon-reload")
	inNode(t, 0, "systemctl", "start", "kubelet")
	pid, ok := procs.Running("kubelet")
	if !ok {
		t.Fatal("systemctl start kubelet in the node started no supervised kubelet")
	}
	if !mountns.In(pid, dev, ino) {
		t.Errorf("the kubelet (pid %d) is not in the node's mount namespace", pid)
	}
	if ndev, nino, ok := mountns.ID(n.Net.NetNSPath()); !ok || !sameFile("/proc/"+strconv.Itoa(pid)+"/ns/net", ndev, nino) {
		t.Errorf("the kubelet (pid %d) is not in the node's network namespace %s", pid, n.Net.NetNSPath())
	}
	if out := inNode(t, 0, "systemctl", "is-active", "kubelet"); out != "active\n" {
		t.Errorf("is-active after start: %q", out)
	}
	if out := inNode(t, 0, "systemctl", "status", "kubelet"); !strings.Contains(out, "Main PID: "+strconv.Itoa(pid)) || !strings.Contains(out, "Loaded: loaded") {
		t.Errorf("status after start:\n%s", out)
	}
	inNode(t, 0, "systemctl", "restart", "kubelet.service")
	pid2, ok := procs.Running("kubelet")
	if !ok || pid2 == pid {
		t.Errorf("systemctl restart kubelet: pid %d, running %v; want a new one (was %d)", pid2, ok, pid)
	}
	if _, err := os.Stat("/usr/bin/systemctl"); err == nil {
		if out := inNode(t, 0, "/usr/bin/systemctl", "is-active", "kubelet"); out != "active\n" {
			t.Errorf("/usr/bin/systemctl is-active kubelet in the node: %q; want devk's answer", out)
		}
	}
	if out := inNode(t, 5, "systemctl", "restart", "containerd"); !strings.Contains(out, "Unit containerd.service not found.") {
		t.Errorf("restart containerd: %q", out)
	}
	// Under a devk that holds the node's lock (a swap): refused, unless
	// that devk named the lock for its command (kubeadm under up).
	held, err := nodelock.Acquire(n.Files.Manifests(), "devk swap kubelet (the test)")
	if err != nil {
		t.Fatal(err)
	}
	if out := inNode(t, 1, "systemctl", "restart", "kubelet"); !strings.Contains(out, "devk swap kubelet (the test)") || !strings.Contains(out, "is busy") {
		t.Errorf("restart while the node's lock is held: %q; want the holder named", out)
	}
	heldEnv, err := nodelock.HeldEnvVar(n.Files.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	inNodeEnv = []string{heldEnv}
	inNode(t, 0, "systemctl", "restart", "kubelet")
	inNodeEnv = nil
	held.Release()
	inNode(t, 0, "systemctl", "stop", "kubelet")
	if pid, ok := procs.Running("kubelet"); ok {
		t.Errorf("systemctl stop kubelet left pid %d running", pid)
	}

	// devk as systemctl outside a node: says what it is, forwards nothing.
	cmd := exec.Command(os.Args[0], "restart", "kubelet")
	cmd.Args[0] = filepath.Join(t.TempDir(), "systemctl")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "this is devk's systemctl") {
		t.Errorf("devk as systemctl outside a node: exit %d, %q", code, out)
	}
}

// sameFile says whether path is the file (dev, ino).
func sameFile(path string, dev, ino uint64) bool {
	var st syscall.Stat_t
	return syscall.Stat(path, &st) == nil && st.Dev == dev && st.Ino == ino
}
