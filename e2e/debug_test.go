//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/build"
)

// debugPause is how long the test keeps a component stopped at its
// breakpoint before it checks that nothing killed it: past the leader
// election's lease (15 s) and renew deadline (10 s), after which a
// controller-manager electing a leader exits as soon as it runs again;
// under the controller-manager's node-monitor-grace-period (50 s), since a
// paused API server renews no lease, and past that grace the
// controller-manager's write marking the node Unknown can land before the
// kubelet's renewal when the API server runs on (CI saw it once with a
// 60 s pause). (The liveness probes devk turns off would need 80 s.)
const debugPause = 25 * time.Second

// funcBody is the first line of the body of the function whose
// declaration line starts with decl, in file of the tree.
func funcBody(t *testing.T, tree, file, decl string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tree, file))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.HasPrefix(sc.Text(), decl) && strings.HasSuffix(sc.Text(), "{") {
			return n + 1
		}
	}
	t.Fatalf("no %q in %s", decl, file)
	return 0
}

// Breakpoints of the debug step: the API server's /version handler, the
// deployment controller's sync, the kubelet's pod sync.
const (
	versionFile    = "staging/src/k8s.io/apiserver/pkg/server/routes/version.go"
	deploymentFile = "pkg/controller/deployment/deployment_controller.go"
	kubeletFile    = "pkg/kubelet/kubelet.go"
	proxierFile    = "pkg/proxy/iptables/proxier.go"
)

// atBreakpoint connects the test's own dlv to the debugger at addr with
// devk's init file, from outside the tree (so it prints absolute paths):
// `stack 0` waits for the component to stop, and must show want
// (FILE:LINE); then every breakpoint goes and the component runs on.
func atBreakpoint(t *testing.T, ctx context.Context, dlv, addr, init, want string) {
	t.Helper()
	out := dlvSession(t, ctx, dlv, addr, init, "stack 0\nclearall\nquit -c\n")
	if !strings.Contains(out, want) {
		t.Fatalf("dlv did not show the stop at %s:\n%s", want, out)
	}
}

// debugResult is what `devk debug -o json` prints.
type debugResult struct {
	Component, Image, Binary, Address, Connect, InitFile, LaunchJSON, GoLand string
	SubstitutePath                                                           []struct{ From, To string }
	Breakpoints                                                              []struct {
		File string
		Line int
	}
	WaitsAtStart bool
	Notes        []string
	Addresses    []string
}

// debugJSON runs `devk debug ARGS -o json` and decodes its result.
func debugJSON(t *testing.T, devk func(t *testing.T, args ...string) Result, args ...string) debugResult {
	t.Helper()
	r := devk(t, append(append([]string{"debug"}, args...), "-o", "json")...)
	var res debugResult
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		t.Fatalf("devk debug -o json printed %q: %v", r.Stdout, err)
	}
	return res
}

// dlvSession runs the test's own dlv against the debugger at addr with
// devk's init file and the commands in script, and returns its output.
func dlvSession(t *testing.T, ctx context.Context, dlv, addr, init, script string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, dlv, "connect", addr, "--init", init, "--allow-non-terminal-interactive")
	cmd.Dir = t.TempDir()
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dlv connect %s: %v\n%s", addr, err, out)
	}
	return string(out)
}

// debugAt runs `devk debug COMPONENT --break file:line` and checks its
// result: a breakpoint at that line, the IDE files written.
func debugAt(t *testing.T, devk func(t *testing.T, args ...string) Result, component, file string, line int, args ...string) debugResult {
	t.Helper()
	res := debugJSON(t, devk, append([]string{component, "--break", file + ":" + strconv.Itoa(line)}, args...)...)
	if (res.Image == "") == (res.Binary == "") || len(res.SubstitutePath) == 0 || len(res.Breakpoints) != 1 || res.Breakpoints[0].Line != line {
		t.Fatalf("devk debug %s: %+v", component, res)
	}
	for _, f := range []string{res.InitFile, res.LaunchJSON, res.GoLand} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("devk debug wrote no %s: %v", f, err)
		}
	}
	return res
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

// deleteAndWait deletes what the test made and waits until gone says it
// is: the steps after it (up again changes nothing) snapshot the pods.
func deleteAndWait(t *testing.T, ctx context.Context, cs kubernetes.Interface, what string, del, gone func() error) {
	t.Helper()
	if err := del(); err != nil {
		t.Fatalf("delete the %s: %v", what, err)
	}
	eventually(t, ctx, "the "+what+" to be gone", gone)
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
// line (after devk's substitute-path rules) for 40 s without the pod
// being restarted or the node going NotReady, and answers once the
// client continues. Then --stop puts the container back byte for byte.
// The controller-manager survives the same pause; the kubelet under
// dlv stops in its pod sync. Bad input changes nothing.
func checkDebug(t *testing.T, tree, manifests, kubeconfig, nodeName, pauseImage string, devk func(t *testing.T, args ...string) Result, devkErr func(args ...string) Result) {
	cs := clientFor(t, kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	manifest := filepath.Join(manifests, "kube-apiserver.yaml")
	before := manifestContainer(t, manifest)
	file, line := versionFile, funcBody(t, tree, versionFile, "func (v Version) handleVersion(")

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

	var res debugResult
	step(t, "debug apiserver", func(t *testing.T) {
		res = debugAt(t, devk, "apiserver", file, line)
		devk(t, "digest", "verify", "apiserver")
	})
	dlv := delveClient(t)
	restarts := func(t *testing.T, pod string) int32 {
		t.Helper()
		p, err := cs.CoreV1().Pods("kube-system").Get(ctx, pod+"-"+nodeName, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			t.Fatalf("mirror pod %s: %v", pod, err)
		}
		return p.Status.ContainerStatuses[0].RestartCount
	}

	step(t, "a request stops at the breakpoint", func(t *testing.T) {
		before := restarts(t, "kube-apiserver")
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
		// The client connects from the host to the printed address.
		atBreakpoint(t, ctx, dlv, res.Address, res.InitFile, filepath.Join(tree, file)+":"+strconv.Itoa(line))
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
		if after := restarts(t, "kube-apiserver"); after != before {
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

	// The controller-manager paused in the deployment controller for a
	// minute: not restarted, and (leader election off) not exiting; the
	// Deployment then rolls out.
	step(t, "controller-manager paused", func(t *testing.T) {
		line := funcBody(t, tree, deploymentFile, "func (dc *DeploymentController) syncDeployment(")
		r := debugAt(t, devk, "controller-manager", deploymentFile, line)
		before := restarts(t, "kube-controller-manager")
		one := int32(1)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-debug", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "e2e-debug"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "e2e-debug"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: pauseImage}}},
				},
			},
		}
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(debugPause)
		atBreakpoint(t, ctx, dlv, r.Address, r.InitFile, filepath.Join(tree, deploymentFile)+":"+strconv.Itoa(line))
		eventually(t, ctx, "the Deployment to roll out after the pause", func() error {
			got, err := cs.AppsV1().Deployments("default").Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.AvailableReplicas != 1 {
				return fmt.Errorf("%d of 1 replicas available", got.Status.AvailableReplicas)
			}
			return nil
		})
		if after := restarts(t, "kube-controller-manager"); after != before {
			t.Errorf("the controller-manager's container restarted %d times during the pause", after-before)
		}
		devk(t, "debug", "--stop", "controller-manager")
		devk(t, "digest", "verify", "controller-manager")
		deleteAndWait(t, ctx, cs, "Deployment", func() error {
			return cs.AppsV1().Deployments("default").Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		}, func() error {
			pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=e2e-debug"})
			if err == nil && len(pods.Items) > 0 {
				return fmt.Errorf("%d pods left", len(pods.Items))
			}
			return err
		})
	})

	// The kubelet under dlv: its pod sync stops at the breakpoint when a
	// pod is created; the pod runs once it goes on; --stop puts its own
	// kubelet back.
	step(t, "kubelet", func(t *testing.T) {
		line := funcBody(t, tree, kubeletFile, "func (kl *Kubelet) SyncPod(")
		r := debugAt(t, devk, "kubelet", kubeletFile, line)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-debug-kubelet", Namespace: "default"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: pauseImage}}},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		atBreakpoint(t, ctx, dlv, r.Address, r.InitFile, filepath.Join(tree, kubeletFile)+":"+strconv.Itoa(line))
		eventually(t, ctx, "the pod to run once the kubelet goes on", func() error {
			p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod is %s", p.Status.Phase)
			}
			return nil
		})
		devk(t, "debug", "--stop", "kubelet")
		readyTransition(t, ctx, cs, nodeName)
		deleteAndWait(t, ctx, cs, "pod", func() error {
			return cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{})
		}, func() error {
			_, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err == nil {
				return fmt.Errorf("pod %s still there", pod.Name)
			}
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
	})

	// etcd under the debugger (its code is a module's, not the tree's:
	// no --break): the API answers through it, the client sees its
	// goroutines at module-cache paths, --stop puts it back byte for byte.
	step(t, "etcd", func(t *testing.T) {
		manifest := filepath.Join(manifests, "etcd.yaml")
		before := manifestContainer(t, manifest)
		r := debugJSON(t, devk, "etcd")
		if r.Address == "" || r.Image == "" || len(r.SubstitutePath) == 0 {
			t.Fatalf("devk debug etcd: %+v", r)
		}
		devk(t, "digest", "verify", "etcd")
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("the API through etcd under the debugger: %v", err)
		}
		out := dlvSession(t, ctx, dlv, r.Address, r.InitFile, "goroutines\nquit -c\n")
		if !strings.Contains(out, "go.etcd.io/etcd/server") {
			t.Errorf("dlv shows no goroutine of etcd's server:\n%s", out)
		}
		devk(t, "debug", "--stop", "etcd")
		if got := manifestContainer(t, manifest); got != before {
			t.Errorf("after --stop etcd's container is\n%s\nwant\n%s", got, before)
		}
		devk(t, "digest", "verify", "etcd")
	})

	// --stop-at-start: the scheduler waits before main, so a new pod
	// stays unscheduled until the client continues it.
	step(t, "scheduler stopped at start", func(t *testing.T) {
		r := debugJSON(t, devk, "scheduler", "--stop-at-start")
		if !r.WaitsAtStart || r.Address == "" {
			t.Fatalf("devk debug scheduler --stop-at-start: %+v", r)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-debug-at-start", Namespace: "default"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: pauseImage}}},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(atStartPause)
		if p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("pod scheduled to %q (%v) while the scheduler waits before main", p.Spec.NodeName, err)
		}
		dlvSession(t, ctx, dlv, r.Address, r.InitFile, "quit -c\n")
		eventually(t, ctx, "the pod to be scheduled once the scheduler runs on", func() error {
			p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName != nodeName {
				return fmt.Errorf("pod is on %q", p.Spec.NodeName)
			}
			return nil
		})
		eventually(t, ctx, "digest verify scheduler under the debugger", func() error {
			if r := devkErr("digest", "verify", "scheduler"); r.Err != nil {
				return fmt.Errorf("%v\n%s", r.Err, r.Stdout)
			}
			return nil
		})
		devk(t, "debug", "--stop", "scheduler")
		deleteAndWait(t, ctx, cs, "pod", func() error {
			return cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{})
		}, func() error {
			if _, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s: %v", pod.Name, err)
			}
			return nil
		})
	})
}

// checkDebugAddon: kube-proxy under the debugger on every node, a
// breakpoint in its rule sync hit when a Service is created, the rules
// written once it goes on; --stop puts the DaemonSet's container back.
func checkDebugAddon(t *testing.T, tree, kubeconfig string, devk func(t *testing.T, args ...string) Result) {
	cs := clientFor(t, kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dlv := delveClient(t)
	ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := ds.Spec.Template.Spec.Containers[0]
	line := funcBody(t, tree, proxierFile, "func (proxier *Proxier) syncProxyRules(")
	r := debugAt(t, devk, "kube-proxy", proxierFile, line)
	if len(r.Addresses) == 0 || r.Addresses[0] != r.Address {
		t.Fatalf("devk debug kube-proxy: addresses %v, address %s", r.Addresses, r.Address)
	}
	devk(t, "digest", "verify", "kube-proxy")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-debug-proxy", Namespace: "default"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "e2e-debug-proxy"}},
	}
	createSlowly(t, ctx, func(ctx context.Context) error {
		_, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		return err
	})
	defer cs.CoreV1().Services("default").Delete(ctx, svc.Name, metav1.DeleteOptions{})
	for _, addr := range r.Addresses {
		atBreakpoint(t, ctx, dlv, addr, r.InitFile, filepath.Join(tree, proxierFile)+":"+strconv.Itoa(line))
	}
	devk(t, "debug", "--stop", "kube-proxy")
	ds, err = cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after := ds.Spec.Template.Spec.Containers[0]; !apiequality.Semantic.DeepEqual(after, before) {
		t.Errorf("after --stop kube-proxy's container is\n%+v\nwant\n%+v", after, before)
	}
	devk(t, "digest", "verify", "kube-proxy")
}

// slowCreate is how long a create may take on two busy cores: every
// node's Delve has just read kube-proxy's debug information.
const slowCreate = time.Minute

// createSlowly runs create until it succeeds, retrying only a client
// timeout (the API server still answering slowly); a create that timed
// out on the client but landed on the server counts as done.
func createSlowly(t *testing.T, ctx context.Context, create func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(slowCreate)
	for {
		err := create(ctx)
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return
		case time.Now().Before(deadline) && timedOut(err):
			t.Logf("create timed out, again: %v", err)
		default:
			t.Fatal(err)
		}
	}
}

// timedOut: the client gave up waiting, or the server said it did.
func timedOut(err error) bool {
	var net interface{ Timeout() bool }
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || (errors.As(err, &net) && net.Timeout())
}

// atStartPause is how long a component waiting before main is watched
// doing nothing.
const atStartPause = 10 * time.Second
