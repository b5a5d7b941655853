package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cmd/devk/internal/cli"
)

// runMainEnv makes the test binary run devk's main with its arguments
// (TestMain): `devk node exec` execs its command, which only a process
// of its own can do.
const runMainEnv = "DEVK_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// devkProcess is devk args run as a process of its own, in home.
func devkProcess(home string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "DEVK_HOME="+home)
	return cmd
}

// TestNodeExec runs `devk node exec` as a user does, in a cluster whose
// node 0 has real namespaces (a network namespace the test makes under
// the node's name, its mount namespace as up makes it): devk becomes the
// command (its output, stdin, exit status and signals are the
// command's), and its own failures have statuses of their own.
func TestNodeExec(t *testing.T) {
	ctx := context.Background()
	c, name := nodeTestCluster(t, "exec")
	home, n := c.Home, c.FirstNode()
	worker, err := c.Config.AddNode(name+"-worker", "worker", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	nodeNamespaces(t, ctx, n)
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	hostMnt, _ := os.Readlink("/proc/self/ns/mnt")
	nameFlag := []string{"node", "exec", "--name", name}

	for _, tc := range []struct {
		name        string
		args        []string
		stdin       string
		code        int
		stdout      []string
		notInStdout []string
		stderr      string
	}{
		{name: "in the node, with its environment", args: []string{"--", "sh", "-c", `readlink /proc/self/ns/net /proc/self/ns/mnt; env; exit 3`}, code: 3,
			stdout:      []string{"DEVK_NODE=" + n.Name(), "KUBECONFIG=" + n.Files.Kubeconfig("admin"), "CONTAINER_RUNTIME_ENDPOINT=unix://" + n.Files.ContainerdSocket(), ":" + home + "/bin:"},
			notInStdout: []string{hostNet, hostMnt}},
		{name: "node 0 by name, stdin", args: []string{n.Name(), "--", "cat"}, stdin: "through\n", stdout: []string{"through\n"}},
		{name: "a command the node lacks", args: []string{"--", "devk-no-such-command"}, code: cli.ExitCommandNotFound, stderr: "devk: devk-no-such-command: command not found in node " + n.Name() + "'s PATH"},
		{name: "a command the node cannot execute", args: []string{"--", "/etc"}, code: cli.ExitCannotExecute, stderr: "devk: /etc: command not executable in node " + n.Name()},
		{name: "a node the cluster lacks", args: []string{"nosuch", "--", "true"}, code: cli.ExitExecFailed, stderr: `has no node "nosuch"; its nodes: ` + n.Name() + ", " + worker.Name},
		{name: "a node without its namespaces", args: []string{worker.Name, "--", "true"}, code: cli.ExitExecFailed, stderr: "node " + worker.Name + " has no network namespace"},
		{name: "no --", args: []string{"true"}, code: cli.ExitExecFailed, stderr: "put the command after --"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := devkProcess(home, append(nameFlag, tc.args...)...)
			cmd.Stdin = strings.NewReader(tc.stdin)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("devk %s: status %d, stderr %q; want %d, %q", strings.Join(cmd.Args[1:], " "), code, stderr.String(), tc.code, tc.stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(string(out), want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			for _, not := range tc.notInStdout {
				if strings.Contains(string(out), not) {
					t.Errorf("stdout has %q (the command ran in this process's namespaces):\n%s", not, out)
				}
			}
		})
	}

	t.Run("Ctrl-C is the command's", func(t *testing.T) {
		cmd := devkProcess(home, append(nameFlag, "--", "sh", "-c", `trap 'echo got INT; exit 42' INT; echo ready; while :; do sleep 0.05; done`)...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			cmd.Process.Kill()
			t.Fatalf("the command did not start: %q", sc.Text())
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil { // devk's pid
			t.Fatal(err)
		}
		done := make(chan string, 1)
		go func() {
			sc.Scan()
			cmd.Wait()
			done <- sc.Text()
		}()
		select {
		case line := <-done:
			if line != "got INT" || cmd.ProcessState.ExitCode() != 42 {
				t.Errorf("SIGINT to devk: %q, status %d; want the command's trap to run and devk to exit with its 42", line, cmd.ProcessState.ExitCode())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatal("devk node exec did not end on SIGINT")
		}
	})
}

// nodeNamespaces makes node n's network namespace, and its mount
// namespace as up makes it, both removed when the test ends (after the
// clean-ups the test registers later).
func nodeNamespaces(t *testing.T, ctx context.Context, n cluster.Node) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", n.Net.NetNS).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.Net.NetNS).Run() })
	if _, err := n.EnsureMountNS(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := n.RemoveMounts(ctx); err != nil {
			t.Error(err)
		}
	})
}

// nodeTestCluster opens a cluster named prefix<pid> in a new home, its
// node 0's runtime devk's containerd, for tests that give node 0 real
// namespaces (which needs root).
func nodeTestCluster(t *testing.T, prefix string) (*cluster.Cluster, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("making network and mount namespaces needs root: run the tests as root, as CI does")
	}
	name := fmt.Sprintf("%s%d", prefix, os.Getpid())
	c, err := cluster.Open(cluster.Options{Name: name, Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c.Config.CRISocket = c.FirstNode().Files.ContainerdSocket()
	return c, name
}
