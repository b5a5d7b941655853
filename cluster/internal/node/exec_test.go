package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/cluster/internal/containerd"
	"github.com/devk/devk/internal/layout"
)

// testExecNode is a worker node of the test's own: a network namespace
// under /run/netns with one address (on a veth whose peer is inside too), and a mount
// namespace made as a node's is, its files under a temp dir; both go at
// the end.
func testExecNode(t *testing.T) Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("making network and mount namespaces needs root: run the tests as root, as CI does")
	}
	ctx := context.Background()
	netns := fmt.Sprintf("devk-exectest-%d", os.Getpid())
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sh("ip", "netns", "add", netns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", netns).Run() })
	sh("ip", "-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	sh("ip", "-n", netns, "addr", "add", "10.99.7.2/24", "dev", "eth0")
	sh("ip", "-n", netns, "link", "set", "eth0", "up")

	cfg := layout.NewConfig("exectest")
	cfg.Network.Nodes = []layout.NodeNet{{Name: "exectest-worker", NetNS: netns, Role: layout.RoleWorker, IP: "10.99.7.2"}}
	files := layout.HomeFiles(t.TempDir()).Cluster("exectest").FirstNode()
	cfg.CRISocket = files.ContainerdSocket()
	n := Node{Net: cfg.FirstNode(), Files: files, Config: &cfg}
	if _, err := n.EnsureMountNS(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := n.RemoveMounts(ctx); err != nil {
			t.Error(err)
		}
	})
	return n
}

// execResult is what a command run in a node did.
type execResult struct {
	stdout, stderr string
	code           int
}

// runExec runs e as devk node exec runs it (Path, Argv, Env: devk execs
// the same), with stdin.
func runExec(t *testing.T, e Exec, stdin string) execResult {
	t.Helper()
	cmd := &exec.Cmd{Path: e.Path, Args: e.Argv, Env: e.Env, Stdin: strings.NewReader(stdin)}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return execResult{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// TestExec runs commands in a real node (network and mount namespaces
// the test makes): they see the node's address and mounts and its files,
// get the node's environment, stdin, the working directory, and their
// exit status is their own (cmd/devk's TestNodeExec sends devk a
// signal); a command the node lacks, or
// cannot execute, and a node without its namespaces are refused before
// anything runs.
func TestExec(t *testing.T) {
	n := testExecNode(t)
	ctx := context.Background()
	// the node's CNI cache, written from the host, is /var/lib/cni inside
	cni := n.Files.NodeFS("/var/lib/cni")
	if err := os.WriteFile(filepath.Join(cni, "marker"), []byte("the node's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// the node's kubelet, where devk puts it: on the node's PATH
	if err := os.MkdirAll(filepath.Dir(n.Files.KubeletBinary()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.Files.KubeletBinary(), []byte("#!/bin/sh\necho this is the node kubelet \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "hello.sh"), []byte("#!/bin/sh\necho hello from \"$(pwd)\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "data"), []byte("not a program\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	environ := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "KUBECONFIG=/home/u/.kube/config", "HOME=/root", "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	in := func(dir string, command ...string) ExecInput {
		return ExecInput{Command: command, Dir: dir, Environ: environ, Extra: []string{"NO_PROXY=10.99.7.0/24"}, ToolDirs: []string{"/opt/devk/bin"}, CRISocket: n.Files.ContainerdSocket()}
	}
	run := func(t *testing.T, dir, stdin string, command ...string) execResult {
		t.Helper()
		e, err := n.Exec(ctx, in(dir, command...))
		if err != nil {
			t.Fatal(err)
		}
		return runExec(t, e, stdin)
	}

	t.Run("the node's address", func(t *testing.T) {
		r := run(t, "", "", "ip", "-br", "addr")
		if r.code != 0 || !strings.Contains(r.stdout, "eth0@eth1") || !strings.Contains(r.stdout, "10.99.7.2/24") {
			t.Errorf("ip -br addr in the node: %+v; want eth0 with 10.99.7.2/24", r)
		}
		if host, _ := exec.Command("ip", "-br", "addr").Output(); strings.Contains(string(host), "10.99.7.2/24") {
			t.Fatal("the host has the node's address: the test tests nothing")
		}
	})
	t.Run("the node's mounts and files", func(t *testing.T) {
		r := run(t, "", "", "cat", "/proc/self/mountinfo", "/var/lib/cni/marker")
		if r.code != 0 || !strings.Contains(r.stdout, " /var/lib/cni ") || !strings.Contains(r.stdout, "the node's own") {
			t.Errorf("mountinfo and /var/lib/cni/marker in the node: %+v", r)
		}
		if _, err := os.Stat("/var/lib/cni/marker"); err == nil {
			t.Fatal("the host has the node's file: the test tests nothing")
		}
	})
	t.Run("exit status", func(t *testing.T) {
		if r := run(t, "", "", "sh", "-c", "echo out; echo err >&2; exit 3"); r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
			t.Errorf("sh -c 'exit 3' in the node: %+v; want status 3, out and err apart", r)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		if r := run(t, "", "a line\nanother\n", "cat"); r.code != 0 || r.stdout != "a line\nanother\n" {
			t.Errorf("cat in the node: %+v; want stdin back", r)
		}
	})
	t.Run("environment", func(t *testing.T) {
		r := run(t, "", "", "env")
		got := strings.Split(strings.TrimSpace(r.stdout), "\n")
		want := []string{
			"PATH=" + filepath.Dir(n.Files.KubeletBinary()) + ":/opt/devk/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + containerd.CNIBinDir(),
			"KUBECONFIG=" + n.Files.Kubeconfig("kubelet"),
			"CONTAINER_RUNTIME_ENDPOINT=unix://" + n.Files.ContainerdSocket(),
			"CONTAINERD_ADDRESS=" + n.Files.ContainerdSocket(),
			"CONTAINERD_NAMESPACE=k8s.io",
			"DEVK_CLUSTER=exectest", "DEVK_NODE=exectest-worker", "HOME=/root", "NO_PROXY=10.99.7.0/24",
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("the node's environment lacks %s:\n%s", w, r.stdout)
			}
		}
		for _, name := range []string{"PATH", "KUBECONFIG"} {
			if c := len(slices.DeleteFunc(slices.Clone(got), func(kv string) bool { return !strings.HasPrefix(kv, name+"=") })); c != 1 {
				t.Errorf("%s set %d times:\n%s", name, c, r.stdout)
			}
		}
		if r := run(t, "", "", "kubelet", "--version"); r.stdout != "this is the node kubelet --version\n" {
			t.Errorf("kubelet in the node: %+v; want the node's own", r)
		}
	})
	t.Run("working directory", func(t *testing.T) {
		if r := run(t, work, "", "./hello.sh"); r.code != 0 || r.stdout != "hello from "+work+"\n" {
			t.Errorf("./hello.sh in %s: %+v", work, r)
		}
		if r := run(t, "/nonexistent-devk-dir", "", "pwd"); r.stdout != "/\n" {
			t.Errorf("pwd from a directory the node lacks: %+v; want /", r)
		}
	})
	for _, tc := range []struct {
		name    string
		in      ExecInput
		node    Node
		want    error
		message string
	}{
		{name: "not found", in: in("", "devk-no-such-command"), want: ErrCommandNotFound, message: "devk-no-such-command: command not found in node exectest-worker's PATH (" + filepath.Dir(n.Files.KubeletBinary()) + ":/opt/devk/bin:/usr/local/bin"},
		{name: "no such path", in: in("", "/devk/none"), want: ErrCommandNotFound, message: "/devk/none: command not found in node exectest-worker: "},
		{name: "not executable", in: in(work, "./data"), want: ErrCommandNotExecutable, message: "./data: command not executable in node exectest-worker"},
		{name: "a directory", in: in("", work), want: ErrCommandNotExecutable},
		{name: "no command", in: in(""), message: "no command to run in the node"},
		{name: "no network namespace", in: in("", "true"), node: withNetNS(n, "devk-exectest-none"), message: "node exectest-worker has no network namespace at /run/netns/devk-exectest-none: is cluster exectest up? `devk up --name exectest` makes it again"},
		{name: "no mount namespace", in: in("", "true"), node: withFiles(n, layout.HomeFiles(t.TempDir()).Cluster("exectest").FirstNode()), message: "has no mount namespace at "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := n
			if tc.node.Config != nil {
				node = tc.node
			}
			_, err := node.Exec(ctx, tc.in)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("Exec = %v; want %v, %q", err, tc.want, tc.message)
			}
		})
	}
}

func withNetNS(n Node, netns string) Node { n.Net.NetNS = netns; return n }

func withFiles(n Node, f layout.NodeFiles) Node { n.Files = f; return n }

// TestExecEnv: a control-plane node's command gets admin.conf, a
// worker's kubelet.conf; ctr's variables only on devk's own containerd;
// the caller's PATH (or the default) after the node's directories; each
// variable once, the node's in place of the caller's.
func TestExecEnv(t *testing.T) {
	cfg := layout.NewConfig("devk")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	files := layout.HomeFiles("/home/u/.devk").Cluster("devk")
	cp := Node{Net: cfg.FirstNode(), Files: files.FirstNode(), Config: &cfg}
	worker := Node{Net: layout.NodeNet{Name: "devk-worker", Role: layout.RoleWorker}, Files: files.FirstNode(), Config: &cfg}
	env := func(n Node, environ []string, socket string) []string {
		return n.execEnv(ExecInput{Environ: environ, CRISocket: socket})
	}
	bin := filepath.Dir(cp.Files.KubeletBinary())
	for _, tc := range []struct {
		name      string
		got       []string
		want, not []string
	}{
		{name: "control plane", got: env(cp, []string{"KUBECONFIG=/x", "TERM=xterm"}, cp.Files.ContainerdSocket()),
			want: []string{"KUBECONFIG=" + cp.Files.Kubeconfig("admin"), "TERM=xterm", "CONTAINERD_ADDRESS=" + cp.Files.ContainerdSocket(), "PATH=" + bin + ":" + DefaultExecPath + ":" + containerd.CNIBinDir()},
			not:  []string{"KUBECONFIG=/x"}},
		{name: "worker", got: env(worker, []string{"PATH=/bin"}, cp.Files.ContainerdSocket()),
			want: []string{"KUBECONFIG=" + cp.Files.Kubeconfig("kubelet"), "PATH=" + bin + ":/bin:" + containerd.CNIBinDir(), "DEVK_NODE=devk-worker"}},
		{name: "DEVK_HOME the cluster's", got: cp.execEnv(ExecInput{Environ: []string{"DEVK_HOME=~/elsewhere"}, Home: "/home/u/.devk", CRISocket: cp.Files.ContainerdSocket()}),
			want: []string{"DEVK_HOME=/home/u/.devk", "DEVK_CLUSTER=devk"},
			not:  []string{"DEVK_HOME=~/elsewhere"}},
		{name: "a runtime of the user's", got: env(cp, nil, "/run/crio/crio.sock"),
			want: []string{"CONTAINER_RUNTIME_ENDPOINT=unix:///run/crio/crio.sock"},
			not:  []string{"CONTAINERD_ADDRESS=/run/crio/crio.sock", "CONTAINERD_NAMESPACE=k8s.io"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range tc.want {
				if !slices.Contains(tc.got, w) {
					t.Errorf("lacks %s: %q", w, tc.got)
				}
			}
			for _, w := range tc.not {
				if slices.Contains(tc.got, w) {
					t.Errorf("has %s: %q", w, tc.got)
				}
			}
			seen := map[string]bool{}
			for _, kv := range tc.got {
				k, _, _ := strings.Cut(kv, "=")
				if seen[k] {
					t.Errorf("%s twice: %q", k, tc.got)
				}
				seen[k] = true
			}
		})
	}
}
