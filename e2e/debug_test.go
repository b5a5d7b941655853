//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/build"
)

// debugPause is how long the test keeps the API server stopped at its
// breakpoint before it checks that nothing killed it.
const debugPause = 60 * time.Second

// versionHandlerLine is the first line of the API server's /version
// handler in the tree (the line after `func (v Version) handleVersion`).
func versionHandlerLine(t *testing.T, tree string) (string, int) {
	t.Helper()
	const file = "staging/src/k8s.io/apiserver/pkg/server/routes/version.go"
	data, err := os.ReadFile(filepath.Join(tree, file))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		if strings.HasPrefix(sc.Text(), "func (v Version) handleVersion(") {
			return file, n + 1
		}
	}
	t.Fatalf("no handleVersion in %s", file)
	return "", 0
}

// delveClient builds dlv from the Delve module at devk's pin with the
// test's own go (not the copy devk built and put in the image).
func delveClient(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", "install", "github.com/go-delve/delve/cmd/dlv@"+build.DelveVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=", "GOWORK=off")
	cmd.Dir = bin
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install dlv: %v\n%s", err, out)
	}
	return filepath.Join(bin, "dlv")
}

// manifestContainer is the first container of a static pod manifest,
// re-marshalled: what --stop must put back byte for byte.
func manifestContainer(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pod struct {
		Spec struct {
			Containers []map[string]any `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pod); err != nil || len(pod.Spec.Containers) == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	out, err := yaml.Marshal(pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// readyTransition is when the node's Ready condition last changed; it
// fails t unless the node is Ready.
func readyTransition(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) metav1.Time {
	t.Helper()
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime
		}
	}
	t.Fatalf("node %s is not Ready: %+v", name, node.Status.Conditions)
	return metav1.Time{}
}

// checkDebug runs the API server of a one-node cluster under Delve with a
// breakpoint in its /version handler: a client the test built connects
// to the printed address, a /version request blocks at that tree file and
// line (after devk's substitute-path rules) for a minute without the pod
// being restarted or the node going NotReady, and answers once the
// client continues. Then --stop puts the container back byte for byte.
// Bad input changes nothing.
func checkDebug(t *testing.T, tree, manifests, kubeconfig, nodeName string, devk func(t *testing.T, args ...string) Result, devkErr func(args ...string) Result) {
	cs := clientFor(t, kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	manifest := filepath.Join(manifests, "kube-apiserver.yaml")
	before := manifestContainer(t, manifest)
	file, line := versionHandlerLine(t, tree)

	t.Run("bad input changes nothing", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"debug", "kubelet-nope"}, "devk debug runs a static pod"},
			{[]string{"debug", "apiserver", "--break", "staging/src/k8s.io/apiserver/nope.go:1"}, "no such file"},
			{[]string{"debug", "apiserver", "--break", "/etc/hostname.go:1"}, "not in the tree"},
			{[]string{"debug", "apiserver", "--break", file + ":1"}, "the nearest lines that do"},
			{[]string{"debug", "apiserver", "--port", "6443"}, "in use"},
			{[]string{"debug", "--stop", "scheduler"}, "not being debugged"},
		} {
			r := devkErr(c.args...)
			if r.Err == nil || !strings.Contains(r.Stderr, c.want) {
				t.Errorf("devk %s: %v, want an error saying %q:\n%s", strings.Join(c.args, " "), r.Err, c.want, r.Stderr)
			}
			if got := manifestContainer(t, manifest); got != before {
				t.Fatalf("devk %s changed the manifest", strings.Join(c.args, " "))
			}
		}
	})

	var res struct {
		Component, Image, Address, Connect, InitFile, LaunchJSON, GoLand string
		SubstitutePath                                                   []struct{ From, To string }
		Breakpoints                                                      []struct {
			File string
			Line int
		}
	}
	step(t, "debug apiserver", func(t *testing.T) {
		r := devk(t, "debug", "apiserver", "--break", file+":"+strconv.Itoa(line), "-o", "json")
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			t.Fatalf("devk debug -o json printed %q: %v", r.Stdout, err)
		}
		if !strings.Contains(res.Image, "@sha256:") || len(res.SubstitutePath) == 0 || len(res.Breakpoints) != 1 || res.Breakpoints[0].Line != line {
			t.Fatalf("devk debug: %+v", res)
		}
		for _, f := range []string{res.InitFile, res.LaunchJSON, res.GoLand} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("devk debug wrote no %s: %v", f, err)
			}
		}
		devk(t, "digest", "verify", "apiserver")
	})

	step(t, "a request stops at the breakpoint", func(t *testing.T) {
		dlv := delveClient(t)
		restarts := func() int32 {
			p, err := cs.CoreV1().Pods("kube-system").Get(ctx, "kube-apiserver-"+nodeName, metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) == 0 {
				t.Fatalf("the API server's mirror pod: %v", err)
			}
			return p.Status.ContainerStatuses[0].RestartCount
		}
		before := restarts()
		readySince := readyTransition(t, ctx, cs, nodeName)
		// A request without client-go's timeouts: the whole process is
		// stopped at the breakpoint (whoever hit it first: the kubelet and
		// the controllers ask for /version too), so even its TLS handshake
		// waits.
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		tlsConfig, err := rest.TLSConfigFor(rc)
		if err != nil {
			t.Fatal(err)
		}
		waiting := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
		answered := make(chan error, 1)
		go func() {
			resp, err := waiting.Get(rc.Host + "/version")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s", resp.Status)
				}
			}
			answered <- err
		}()
		select {
		case err := <-answered:
			t.Fatalf("/version answered (%v) with a breakpoint in its handler", err)
		case <-time.After(debugPause):
		}
		// The client connects from the host to the printed address, with
		// devk's rules, from a directory outside the tree (dlv then prints
		// absolute paths).
		cmd := exec.CommandContext(ctx, dlv, "connect", res.Address, "--init", res.InitFile, "--allow-non-terminal-interactive")
		cmd.Dir = t.TempDir()
		cmd.Stdin = strings.NewReader("stack 0\nclearall\nquit -c\n")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dlv connect %s: %v\n%s", res.Address, err, out)
		}
		if want := filepath.Join(tree, file) + ":" + strconv.Itoa(line); !strings.Contains(string(out), want) {
			t.Fatalf("dlv did not show the stop at %s:\n%s", want, out)
		}
		select {
		case err := <-answered:
			if err != nil {
				t.Fatalf("/version after continue: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("/version did not answer after the client continued")
		}
		if after := readyTransition(t, ctx, cs, nodeName); !after.Equal(&readySince) {
			t.Errorf("node %s's Ready condition changed during the %s pause (last transition %s, was %s)", nodeName, debugPause, after, readySince)
		}
		if after := restarts(); after != before {
			t.Errorf("the API server's container restarted %d times during the pause", after-before)
		}
	})

	step(t, "stop puts the container back", func(t *testing.T) {
		devk(t, "debug", "--stop", "apiserver")
		if got := manifestContainer(t, manifest); got != before {
			t.Errorf("after --stop the container is\n%s\nwant, as before devk debug,\n%s", got, before)
		}
		devk(t, "digest", "verify", "apiserver")
	})
}
