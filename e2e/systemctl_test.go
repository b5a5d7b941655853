//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeSystemctl runs `systemctl` inside the shared cluster's node as
// kubeadm's docs tell a user to (after `kubeadm certs renew`): it is
// devk's, serving the node's kubelet. A restart gives the kubelet a new
// pid and the Node is Ready again; is-active says active; another unit
// exits 5 with systemd's message; the node's /usr/bin/systemctl is devk's
// while the host's stays the host's.
func TestNodeSystemctl(t *testing.T) {
	c := Cluster(t)
	const node = "devk-control-plane"
	pidFile := filepath.Join(c.Home, "clusters", "devk", "run", "kubelet.pid")
	kubeletPID := func(t *testing.T) int {
		t.Helper()
		data, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			t.Fatalf("%s is empty", pidFile)
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	inNode := func(t *testing.T, wantCode int, args ...string) Result {
		t.Helper()
		r := Devk(t, c.Tree, c.Env, append([]string{"node", "exec", node, "--"}, args...)...)
		if code := exitCode(r.Err); code != wantCode {
			t.Fatalf("devk node exec %s -- %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", node, strings.Join(args, " "), code, wantCode, r.Stdout, r.Stderr)
		}
		return r
	}

	step(t, "is-active", func(t *testing.T) {
		if r := inNode(t, 0, "systemctl", "is-active", "kubelet"); r.Stdout != "active\n" {
			t.Errorf("systemctl is-active kubelet: %q, want active", r.Stdout)
		}
	})
	step(t, "restart kubelet", func(t *testing.T) {
		before := kubeletPID(t)
		inNode(t, 0, "systemctl", "daemon-reload")
		inNode(t, 0, "systemctl", "restart", "kubelet")
		after := kubeletPID(t)
		if after == before {
			t.Fatalf("systemctl restart kubelet kept the kubelet's pid %d", before)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", after)); err != nil {
			t.Fatalf("the restarted kubelet (pid %d) does not run: %v", after, err)
		}
		cs := clientFor(t, c.Kubeconfig)
		eventually(t, context.Background(), "node "+node+" Ready after the kubelet's restart", func() error {
			n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeReady(n) {
				return fmt.Errorf("node %s is not Ready: %+v", node, n.Status.Conditions)
			}
			return nil
		})
		if r := inNode(t, 0, "systemctl", "status", "kubelet"); !strings.Contains(r.Stdout, "Main PID: "+strconv.Itoa(after)) {
			t.Errorf("systemctl status kubelet does not name pid %d:\n%s", after, r.Stdout)
		}
	})
	step(t, "another unit", func(t *testing.T) {
		r := inNode(t, 5, "systemctl", "restart", "containerd")
		if !strings.Contains(r.Stderr, "Unit containerd.service not found.") || !strings.Contains(r.Stderr, "devk's systemctl serves only kubelet.service") {
			t.Errorf("systemctl restart containerd: stderr %q", r.Stderr)
		}
	})
	step(t, "/usr/bin/systemctl", func(t *testing.T) {
		if _, err := os.Stat("/usr/bin/systemctl"); err != nil {
			t.Skip("this machine has no /usr/bin/systemctl: the node has none either")
		}
		if r := inNode(t, 0, "/usr/bin/systemctl", "is-active", "kubelet"); r.Stdout != "active\n" {
			t.Errorf("/usr/bin/systemctl is-active kubelet in the node: %q, want devk's active", r.Stdout)
		}
		if r := inNode(t, 0, "/usr/bin/systemctl", "--version"); !strings.Contains(r.Stdout, "as systemctl: a devk node's init system") {
			t.Errorf("/usr/bin/systemctl --version in the node is not devk's: %q", r.Stdout)
		}
		out, _ := exec.Command("/usr/bin/systemctl", "--version").CombinedOutput()
		if strings.Contains(string(out), "devk node") {
			t.Errorf("this machine's /usr/bin/systemctl is devk's: the node's bind leaked out:\n%s", out)
		}
	})
}
