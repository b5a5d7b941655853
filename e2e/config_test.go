//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// configFile is the cluster TestClusterConfigFile makes: its own name,
// networks and kubelet flag, the taint kept, the control plane emulating
// the minor version before the tree's (compatibility versions).
const configFile = `apiVersion: devk.dev/v1alpha1
kind: Cluster
name: cfg
emulatedVersion: "1.33"
kubelet:
  extraArgs:
    v: "2"
networking:
  podSubnet: 10.245.0.0/16
  serviceSubnet: 10.97.0.0/16
  nodeSubnet: 10.250.77.0/24
controlPlaneTaint: keep
`

// apiserverGate is the change applied to the running cluster: an alpha
// gate on the API server alone.
const apiserverGate = `apiServer:
  featureGates:
    ComponentFlagz: true
`

// TestClusterConfigFile brings a cluster up by a config file, checks the
// file reached the cluster (networks, node address, taint, kubelet flag,
// the control plane's emulated version; one it cannot emulate refused),
// then applies a changed file to the running cluster (a feature gate on
// the API server alone) and checks that only kube-apiserver restarted,
// with the gate on its command line; a file that changes a network is
// refused, and an up without --config keeps the applied file.
//
// The addon phases are skipped: kube-proxy does not run on a node yet
// (KubeProxyRuns) and up does not build the CoreDNS image yet.
func TestClusterConfigFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd and a kubelet (run `make e2e` as root)")
	}
	tree := Tree(t)
	home := newHome(t)
	env := []string{"DEVK_HOME=" + home, "KUBECONFIG=" + filepath.Join(home, "user-kubeconfig")}
	dir := filepath.Join(home, "clusters", "cfg")
	file := filepath.Join(home, "devk.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	up := func(args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, tree, env, append([]string{"up", "--skip-phases", "addon"}, args...)...)
	}
	t.Cleanup(func() {
		if r := Devk(t, tree, env, "down", "--name", "cfg"); r.Err != nil {
			t.Errorf("cleanup: devk down --name cfg: %v\n%s", r.Err, r.Stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s remains after down: %v", dir, err)
		}
		for _, p := range procsMentioning(home) {
			t.Errorf("process %s still runs after devk down", p)
		}
	})

	write(configFile)
	up("--config", file)
	cs := clientFor(t, filepath.Join(dir, "admin.conf"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	node, err := cs.CoreV1().Nodes().Get(ctx, "cfg-control-plane", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the file's name did not name the cluster: %v", err)
	}
	if ip := nodeIP(node); ip != "10.250.77.2" {
		t.Errorf("node address %q, want 10.250.77.2 of networking.nodeSubnet", ip)
	}
	if !hasControlPlaneTaint(node) {
		t.Errorf("controlPlaneTaint: keep, but the node's taints are %v", node.Spec.Taints)
	}
	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.97.0.1" {
		t.Errorf("Service kubernetes at %s, want 10.97.0.1 of networking.serviceSubnet", svc.Spec.ClusterIP)
	}
	if cmd := commandLine(t, home, "kubelet"); !strings.Contains(cmd, " --v=2 ") && !strings.HasSuffix(cmd, " --v=2") {
		t.Errorf("the kubelet runs without kubelet.extraArgs' --v=2: %s", cmd)
	}
	// emulatedVersion: the API server says so, the three run with it,
	// and devk status shows it.
	if v, err := cs.Discovery().ServerVersion(); err != nil || v.GitVersion != KubeVersion || v.EmulationMajor != "1" || v.EmulationMinor != "33" {
		t.Errorf("emulatedVersion 1.33: the API server's /version is %+v (%v)", v, err)
	}
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if cmd := commandLine(t, home, c); !strings.Contains(cmd, "--emulated-version=1.33") {
			t.Errorf("%s runs without --emulated-version=1.33: %s", c, cmd)
		}
	}
	// The scheduler's version comes from its metrics, which it serves a
	// moment after it starts.
	eventually(t, ctx, "devk status to show the three emulating 1.33", func() error {
		if st := MustDevkEnv(t, tree, env, "status", "--name", "cfg").Stdout; strings.Count(st, KubeVersion+" (emulating 1.33)") != 3 {
			return fmt.Errorf("devk status shows:\n%s", st)
		}
		return nil
	})

	// Apply a gate on the API server alone to the running cluster.
	before := controlPlaneReady(t, ctx, cs, node.Name)
	kubeletPid, _ := os.ReadFile(filepath.Join(dir, "run", "kubelet.pid"))
	write(configFile + apiserverGate)
	applied := up("--config", file)
	t.Logf("applying the gate:\n%s", applied.Stderr)
	var after map[string]containerState
	eventually(t, ctx, "the new kube-apiserver container running", func() error {
		after = controlPlaneReady(t, ctx, cs, node.Name)
		if a := after["kube-apiserver"]; a.id == before["kube-apiserver"].id {
			return fmt.Errorf("kube-apiserver is %+v, as before", a)
		}
		return nil
	})
	for _, pod := range []string{"etcd", "kube-controller-manager", "kube-scheduler"} {
		if after[pod] != before[pod] {
			t.Errorf("%s restarted for an API server gate: %+v -> %+v", pod, before[pod], after[pod])
		}
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "run", "kubelet.pid")); string(now) != string(kubeletPid) {
		t.Errorf("the kubelet restarted for an API server gate: pid %s -> %s", kubeletPid, now)
	}
	if cmd := commandLine(t, home, "kube-apiserver"); !strings.Contains(cmd, "--feature-gates=ComponentFlagz=true") {
		t.Errorf("the running kube-apiserver lacks the gate: %s", cmd)
	}
	for _, other := range []string{"kube-controller-manager", "kube-scheduler"} {
		if cmd := commandLine(t, home, other); strings.Contains(cmd, "--feature-gates") {
			t.Errorf("%s got the API server's gate: %s", other, cmd)
		}
	}

	// An emulated version the tree's components cannot emulate is
	// refused by preflight, and restarts nothing.
	write(strings.Replace(configFile+apiserverGate, `emulatedVersion: "1.33"`, `emulatedVersion: "1.30"`, 1))
	r := Devk(t, tree, env, "up", "--skip-phases", "addon", "--config", file)
	if want := "emulatedVersion 1.30: components of " + KubeVersion + " emulate 1.31 to 1.34"; r.Err == nil || !strings.Contains(r.Stderr, want) {
		t.Errorf("emulatedVersion 1.30 on a %s tree: %v, want %q in\n%s", KubeVersion, r.Err, want, r.Stderr)
	}
	if now := controlPlaneReady(t, ctx, cs, node.Name); now["kube-apiserver"] != after["kube-apiserver"] {
		t.Errorf("a refused emulatedVersion restarted kube-apiserver: %+v -> %+v", after["kube-apiserver"], now["kube-apiserver"])
	}
	if stored, err := os.ReadFile(filepath.Join(dir, "cluster.json")); err != nil || !strings.Contains(string(stored), `"emulatedVersion": "1.33"`) {
		t.Errorf("a file refused by preflight changed cluster.json's spec (%v):\n%s", err, stored)
	}

	// A changed network is refused, and changes nothing.
	write(strings.Replace(configFile+apiserverGate, "podSubnet: 10.245.0.0/16", "podSubnet: 10.246.0.0/16", 1))
	r = Devk(t, tree, env, "up", "--skip-phases", "addon", "--config", file)
	if r.Err == nil || !strings.Contains(r.Stderr, "networking.podSubnet: is 10.246.0.0/16, but cluster cfg has 10.245.0.0/16") ||
		!strings.Contains(r.Stderr, "`devk down --name cfg` first") {
		t.Errorf("a changed podSubnet on a running cluster: %v\n%s", r.Err, r.Stderr)
	}

	// Settings devk owns in extraArgs are refused at their line, and
	// change nothing (issue 33): the host's containerd for the kubelet,
	// an open kubelet API, an open API server.
	stored, _ := os.ReadFile(filepath.Join(dir, "cluster.json"))
	pidBefore, _ := os.ReadFile(filepath.Join(dir, "run", "kubelet.pid"))
	write(strings.Replace(configFile, "    v: \"2\"\n", "    v: \"2\"\n    container-runtime-endpoint: unix:///run/containerd/containerd.sock\n    anonymous-auth: \"true\"\napiServer:\n  extraArgs:\n    authorization-mode: AlwaysAllow\n", 1))
	r = Devk(t, tree, env, "up", "--skip-phases", "addon", "--config", file)
	for _, want := range []string{
		file + ":8: kubelet.extraArgs.container-runtime-endpoint: devk sets containerRuntimeEndpoint in the kubelet's config file",
		file + ":9: kubelet.extraArgs.anonymous-auth: devk owns --anonymous-auth",
		file + ":12: apiServer.extraArgs.authorization-mode: devk owns --authorization-mode",
	} {
		if r.Err == nil || !strings.Contains(r.Stderr, want) {
			t.Errorf("a file giving extraArgs what devk owns: %v, want %q in\n%s", r.Err, want, r.Stderr)
		}
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "cluster.json")); string(now) != string(stored) {
		t.Error("a refused file changed cluster.json")
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "run", "kubelet.pid")); string(now) != string(pidBefore) {
		t.Errorf("a refused file restarted the kubelet: pid %s -> %s", pidBefore, now)
	}
	if cmd := commandLine(t, home, "kubelet"); strings.Contains(cmd, "container-runtime-endpoint") || strings.Contains(cmd, "anonymous-auth") {
		t.Errorf("the kubelet runs with a flag devk owns: %s", cmd)
	}

	// up without --config keeps what the file applied: nothing changes.
	again := up("--name", "cfg")
	if !strings.Contains(again.Stdout, "nothing changed") {
		t.Errorf("up without --config after applying a file changed something:\n%s%s", again.Stdout, again.Stderr)
	}
	if last := controlPlaneReady(t, ctx, cs, node.Name); last["kube-apiserver"] != after["kube-apiserver"] {
		t.Errorf("up without --config restarted kube-apiserver: %+v -> %+v", after["kube-apiserver"], last["kube-apiserver"])
	}
}

// containerState is what tells a restarted static pod: its container and
// when it started.
type containerState struct {
	id       string
	started  string
	restarts int32
	ready    bool
}

// controlPlaneReady reads the control-plane mirror pods' containers once
// each has a ready one (a mirror pod's status comes a moment after the
// pod, and is empty while the mirror pod is recreated).
func controlPlaneReady(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, node string) map[string]containerState {
	t.Helper()
	var out map[string]containerState
	eventually(t, ctx, "the control-plane mirror pods' ready containers", func() error {
		out = map[string]containerState{}
		for _, pod := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			p, err := cs.CoreV1().Pods("kube-system").Get(ctx, pod+"-"+node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready || p.Status.ContainerStatuses[0].State.Running == nil {
				return fmt.Errorf("%s has no ready container yet", p.Name)
			}
			st := p.Status.ContainerStatuses[0]
			out[pod] = containerState{id: st.ContainerID, restarts: st.RestartCount, ready: st.Ready,
				started: st.State.Running.StartedAt.UTC().String()}
		}
		return nil
	})
	return out
}

// commandLine is the command line of the process whose program is
// named name and whose arguments name dir (the cluster's files).
func commandLine(t *testing.T, dir, name string) string {
	t.Helper()
	for _, p := range procsMentioning(dir) {
		f := strings.Fields(p)
		if len(f) > 1 && filepath.Base(f[1]) == name {
			return strings.Join(f[1:], " ")
		}
	}
	t.Fatalf("no %s process runs for %s", name, dir)
	return ""
}

func nodeIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func hasControlPlaneTaint(n *corev1.Node) bool {
	for _, tn := range n.Spec.Taints {
		if tn.Key == "node-role.kubernetes.io/control-plane" && tn.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}
