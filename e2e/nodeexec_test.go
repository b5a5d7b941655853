//go:build e2e

package e2e

import (
	"os"
	"strings"
	"testing"
)

// TestNodeExec runs commands inside the shared cluster's node with `devk
// node exec`, as `docker exec` into a kind node: they see the node's
// address, mounts and iptables, get its kubeconfig and containerd, and
// devk exits with their status; devk's own failures exit 125 to 127.
func TestNodeExec(t *testing.T) {
	c := Cluster(t)
	ip := strings.TrimSpace(c.Kubectl(t, "get", "nodes", "-o", `jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}`).Stdout)
	if ip == "" {
		t.Fatal("node 0 has no InternalIP")
	}
	inNode := func(t *testing.T, args ...string) Result {
		t.Helper()
		r := Devk(t, c.Tree, c.Env, append([]string{"node", "exec"}, args...)...)
		if code := exitCode(r.Err); code != 0 {
			t.Fatalf("devk node exec %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, r.Stdout, r.Stderr)
		}
		return r
	}
	step(t, "the node's address", func(t *testing.T) {
		if r := inNode(t, "--", "ip", "-br", "addr"); !strings.Contains(r.Stdout, ip+"/24") {
			t.Errorf("ip -br addr in the node lacks %s/24:\n%s", ip, r.Stdout)
		}
	})
	step(t, "the node's mounts", func(t *testing.T) {
		r := inNode(t, "--", "cat", "/proc/self/mountinfo")
		host, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.Stdout, " /var/lib/cni ") || !strings.Contains(r.Stdout, "devk-mntns") || strings.Contains(string(host), "devk-mntns") {
			t.Errorf("mountinfo in the node lacks its own /var/lib/cni and overlays (or the host has them):\n%s", r.Stdout)
		}
	})
	step(t, "iptables-save", func(t *testing.T) {
		if r := inNode(t, "--", "iptables-save", "-t", "nat"); !strings.Contains(r.Stdout, "-A KUBE-SERVICES") || !strings.Contains(r.Stdout, "devk") {
			t.Errorf("iptables-save in the node lacks kube-proxy's and devk's rules:\n%s", r.Stdout)
		}
	})
	step(t, "kubectl and ctr with the node's environment", func(t *testing.T) {
		if r := inNode(t, "--", "kubectl", "get", "nodes", "-o", "name"); !strings.Contains(r.Stdout, "node/devk-control-plane") {
			t.Errorf("kubectl in the node (admin.conf):\n%s", r.Stdout)
		}
		if r := inNode(t, "--", "ctr", "images", "ls", "-q"); !strings.Contains(r.Stdout, "kube-apiserver") {
			t.Errorf("ctr in the node (its containerd, namespace k8s.io):\n%s", r.Stdout)
		}
	})
	step(t, "exit status", func(t *testing.T) {
		r := Devk(t, c.Tree, c.Env, "node", "exec", "--", "sh", "-c", "exit 3")
		if code := exitCode(r.Err); code != 3 || r.Stderr != "" {
			t.Errorf("sh -c 'exit 3' in the node: devk exit %d, stderr %q; want 3 and nothing of devk's", code, r.Stderr)
		}
		for _, tc := range []struct {
			args   []string
			code   int
			stderr string
		}{
			{[]string{"--", "devk-no-such-command"}, 127, "devk: devk-no-such-command: command not found in node devk-control-plane's PATH"},
			{[]string{"nosuch", "--", "true"}, 125, `devk: cluster devk has no node "nosuch"`},
		} {
			r := Devk(t, c.Tree, c.Env, append([]string{"node", "exec"}, tc.args...)...)
			if code := exitCode(r.Err); code != tc.code || !strings.Contains(r.Stderr, tc.stderr) {
				t.Errorf("devk node exec %s: exit %d, stderr %q; want %d, %q", strings.Join(tc.args, " "), code, r.Stderr, tc.code, tc.stderr)
			}
		}
	})
}
