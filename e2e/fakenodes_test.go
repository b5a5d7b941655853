//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devk/devk/cluster/fakenodes"
	"github.com/devk/devk/internal/layout"
)

// fakeCluster is TestFakeNodes' cluster: a name of its own, machine-wide.
const fakeCluster = "fk"

// fakeWait bounds each wait of TestFakeNodes: 1,000 pods on two cores.
const fakeWait = 5 * time.Minute

// TestFakeNodes gives a one-node cluster of its own (in the shared
// cluster's home, whose registry it shares) 200 of kwok's fake
// nodes (kwok built from its module by the build test, in the shared
// tree), runs 1,000 pods on them, swaps the scheduler under them, takes
// 50 away, then every one, gives it a topology from a config file and
// checks a spread Deployment against it, refuses bad input, and checks
// that down leaves no kwok behind.
func TestFakeNodes(t *testing.T) {
	// The shared cluster's home (its registry, its images), a cluster of
	// the test's own name.
	sc := Cluster(t)
	tree, home, env := sc.Tree, sc.Home, sc.Env
	// devk runs a command on the test's cluster (--name added).
	devk := func(t *testing.T, args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, tree, env, append(args, "--name", fakeCluster)...)
	}
	dir := filepath.Join(home, "clusters", fakeCluster)
	downed := false
	t.Cleanup(func() {
		if !downed {
			if r := Devk(t, tree, env, "down", "--name", fakeCluster); r.Err != nil {
				t.Errorf("cleanup: devk down: %v\n%s", r.Err, r.Stderr)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var cs *kubernetes.Clientset
	top := t

	step(t, "up with 200 fake nodes", func(t *testing.T) {
		r := devk(t, "up", "--fake-nodes", "200", "-o", "json")
		var res struct {
			Kubeconfig string
			FakeNodes  int
			Seconds    float64
		}
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || res.FakeNodes != 200 {
			t.Fatalf("devk up -o json: %v\n%s", err, r.Stdout)
		}
		t.Logf("devk up --fake-nodes 200: %.1fs", res.Seconds)
		cs = clientFor(t, res.Kubeconfig)
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready, fake := 0, 0
		for i := range nodes.Items {
			if nodeReady(&nodes.Items[i]) {
				ready++
			}
			if nodes.Items[i].Labels[layout.FakeNodeKey] == layout.FakeNodeValue {
				fake++
			}
		}
		if len(nodes.Items) != 201 || ready != 201 || fake != 200 {
			t.Fatalf("%d nodes, %d Ready, %d fake: want 201, 201, 200", len(nodes.Items), ready, fake)
		}
	})

	step(t, "leases and the grace period for the count", func(t *testing.T) {
		// 200 fake nodes: kwok's shortest lease (120 s, renewed every
		// 30 s) and the controller-manager's grace period half of it.
		leases := fakeLeases(t, ctx, cs)
		for _, l := range leases {
			if d := l.Spec.LeaseDurationSeconds; d == nil || *d != 120 {
				t.Errorf("lease %s: %v s, want 120", l.Name, d)
			}
		}
		// The mirror pod of the controller-manager up retuned may be
		// between the kubelet's deletion of the old one and its creation of
		// the new one: wait for it.
		var args []string
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			cm, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, "kube-controller-manager-"+fakeCluster+"-control-plane", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			args = cm.Spec.Containers[0].Command
			return slices.Contains(args, "--node-monitor-grace-period=1m0s"), nil
		})
		if err != nil {
			t.Errorf("controller-manager's mirror pod after a minute: command %q, want --node-monitor-grace-period=1m0s in it", args)
		}
		t.Logf("%d fake nodes' leases of 120 s, the controller-manager's grace period 1m0s", len(leases))
		if len(leases) != 200 {
			t.Errorf("%d fake leases, want 200", len(leases))
		}
	})

	step(t, "1,000 pods Running on fake nodes", func(t *testing.T) {
		t0 := time.Now()
		createFakeDeployment(t, ctx, cs, "fake-load", 1000, nil, nil)
		waitReplicas(t, ctx, cs, "fake-load", 1000)
		t.Logf("1,000 pods Running in %s", time.Since(t0).Round(100*time.Millisecond))
		on := podsByNode(t, ctx, cs, "app=fake-load")
		for name := range on {
			if !strings.HasPrefix(name, fakeCluster+"-fake-") {
				t.Errorf("%d pods on %s, not a fake node", on[name], name)
			}
		}
	})

	step(t, "kube-proxy on the real node alone", func(t *testing.T) {
		on := podsByNode(t, ctx, cs, "k8s-app=kube-proxy")
		if len(on) != 1 || on[fakeCluster+"-control-plane"] != 1 {
			t.Fatalf("kube-proxy's pods by node: %v, want one on %s-control-plane", on, fakeCluster)
		}
	})

	step(t, "status counts them", func(t *testing.T) {
		var st struct {
			FakeNodes struct{ Want, Registered, Ready, Pods, Running int }
			Processes []struct {
				Name    string
				Running bool
			}
		}
		r := devk(t, "status", "-o", "json")
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
			t.Fatal(err)
		}
		f := st.FakeNodes
		if f.Want != 200 || f.Registered != 200 || f.Ready != 200 || f.Pods != 1000 || f.Running != 1000 {
			t.Errorf("status: fake nodes %+v, want 200 of each and 1000 pods Running", f)
		}
		kwokRuns := false
		for _, p := range st.Processes {
			kwokRuns = kwokRuns || (p.Name == "kwok" && p.Running)
		}
		if !kwokRuns {
			t.Errorf("status lists no running kwok: %+v", st.Processes)
		}
	})

	step(t, "swap the scheduler under them", func(t *testing.T) {
		// Pods no node fits yet: pending while the old scheduler runs.
		createFakeDeployment(t, ctx, cs, "fake-pending", 20, map[string]string{"devk-e2e/pool": "late"}, nil)
		eventually(t, ctx, "20 pods pending, unschedulable", func() error {
			pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=fake-pending"})
			if err != nil {
				return err
			}
			unschedulable := 0
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && p.Spec.NodeName == "" {
						unschedulable++
					}
				}
			}
			if unschedulable != 20 {
				return fmt.Errorf("%d of %d pods unschedulable", unschedulable, len(pods.Items))
			}
			return nil
		})
		appendTo(top, filepath.Join(tree, "cmd", "kube-scheduler", "scheduler.go"), "\n// devkE2EFake proves the swapped scheduler is this build.\nfunc devkE2EFake() string { return \"fake\" }\n")
		MustDevkEnv(t, tree, env, "build", "scheduler", "--push")
		rep := swapJSON(t, func(t *testing.T, args ...string) Result { return devk(t, args...) }, "scheduler", 1, 0)
		for _, c := range rep.StaticPods[0].Checks {
			if !c.OK {
				t.Errorf("swap check %s: want %s, got %s", c.Check, c.Want, c.Got)
			}
		}
		swapped := time.Now()
		devk(t, "digest", "verify", "scheduler")
		for i := 1; i <= 5; i++ {
			patch := []byte(`{"metadata":{"labels":{"devk-e2e/pool":"late"}}}`)
			if _, err := cs.CoreV1().Nodes().Patch(ctx, fmt.Sprintf("%s-fake-%d", fakeCluster, i), types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitReplicas(t, ctx, cs, "fake-pending", 20)
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=fake-pending"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && c.LastTransitionTime.Time.Before(swapped.Add(-time.Second)) {
					t.Errorf("pod %s was scheduled at %s, before the swap ended (%s)", p.Name, c.LastTransitionTime, swapped)
				}
			}
		}
	})

	step(t, "remove 50", func(t *testing.T) {
		devk(t, "node", "remove", "--fake", "50")
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != 151 {
			t.Fatalf("%d nodes after removing 50 fake ones, want 151", len(nodes.Items))
		}
		for _, n := range nodes.Items {
			if n.Name == fakeCluster+"-fake-151" || n.Name == fakeCluster+"-fake-200" {
				t.Errorf("%s is still there: the last 50 go", n.Name)
			}
		}
		if n := len(fakeLeases(t, ctx, cs)); n != 150 {
			t.Errorf("%d fake nodes' leases, want 150", n)
		}
	})

	// Killed before any of its phases, the job is finished by the next
	// `devk up` (the count was recorded by preflight, or nothing was
	// done); held, it keeps the node's lock from a swap.
	step(t, "killed anywhere, finished by the next up", func(t *testing.T) {
		want := 150
		for _, p := range runnablePaths(fakenodes.Phases()) {
			if p == "stop" {
				continue // runs only when no fake node is left
			}
			atPoint(t, tree, env, "fake-nodes/"+p, "kill", "node", "add", "--name", fakeCluster, "--fake", "2")
			if p != "preflight" {
				want += 2
			}
		}
		holdAndRefuse(t, tree, env, "fake-nodes/nodes", []string{"node", "add", "--name", fakeCluster, "--fake", "1"}, false, []string{"swap", "scheduler", "--name", fakeCluster})
		want++
		devk(t, "up")
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: layout.FakeNodeKey})
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for i := range nodes.Items {
			if nodeReady(&nodes.Items[i]) {
				ready++
			}
		}
		if len(nodes.Items) != want || ready != want {
			t.Fatalf("%d fake nodes, %d Ready after the kills and up: want %d", len(nodes.Items), ready, want)
		}
		devk(t, "node", "remove", "--fake", strconv.Itoa(want-150))
	})

	step(t, "export logs has kwok's", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "logs")
		devk(t, "export", "logs", out)
		data, err := os.ReadFile(filepath.Join(out, fakeCluster+"-control-plane", "kwok.log"))
		if err != nil || len(data) == 0 {
			t.Fatalf("the export has no kwok log: %v", err)
		}
	})

	step(t, "a topology from the config file", func(t *testing.T) {
		devk(t, "node", "remove", "--all-fake")
		if n := len(fakeLeases(t, ctx, cs)); n != 0 {
			t.Errorf("%d fake nodes' leases after --all-fake", n)
		}
		if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "devk:kwok", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("kwok's ClusterRole after --all-fake: %v", err)
		}
		cfg := filepath.Join(t.TempDir(), "topo.yaml")
		writeFile(t, cfg, "apiVersion: devk.dev/v1alpha1\nkind: Cluster\nname: "+fakeCluster+`
fakeNodes:
  groups:
  - count: 30
    zones: [zone-a, zone-b, zone-c]
  - count: 10
    labels: {pool: batch}
    taints: ["dedicated=batch:NoSchedule"]
`)
		devk(t, "up", "--config", cfg)
		spread := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		createFakeDeployment(t, ctx, cs, "spread", 30, nil, spread)
		waitReplicas(t, ctx, cs, "spread", 30)
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: layout.FakeNodeKey})
		if err != nil {
			t.Fatal(err)
		}
		zone, batch := map[string]string{}, map[string]bool{}
		for _, n := range nodes.Items {
			zone[n.Name] = n.Labels[corev1.LabelTopologyZone]
			batch[n.Name] = n.Labels["pool"] == "batch"
		}
		if len(nodes.Items) != 40 {
			t.Fatalf("%d fake nodes, want 40", len(nodes.Items))
		}
		perZone := map[string]int{}
		for name, n := range podsByNode(t, ctx, cs, "app=spread") {
			if batch[name] {
				t.Errorf("%d pods on %s, tainted dedicated=batch", n, name)
			}
			perZone[zone[name]] += n
		}
		if perZone["zone-a"] != 10 || perZone["zone-b"] != 10 || perZone["zone-c"] != 10 {
			t.Errorf("pods per zone %v, want 10 in each of three", perZone)
		}
	})

	step(t, "bad input changes nothing", func(t *testing.T) {
		r := Devk(t, tree, env, "up", "--name", fakeCluster, "--fake-nodes", "300")
		if r.Err == nil || !strings.Contains(r.Stderr, "300 fake and 1 real nodes do not fit the cluster's pod subnet 10.244.0.0/16: it has room for 256 nodes") {
			t.Errorf("--fake-nodes 300 on a /16: %v\n%s", r.Err, r.Stderr)
		}
		dir := t.TempDir()
		missing := filepath.Join(dir, "missing.yaml")
		notStages := filepath.Join(dir, "cm.yaml")
		writeFile(t, notStages, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
		for file, want := range map[string]string{missing: "stage file: open " + missing, notStages: "want apiVersion kwok.x-k8s.io/v1alpha1 and kind Stage"} {
			cfg := filepath.Join(dir, "stages.yaml")
			writeFile(t, cfg, "apiVersion: devk.dev/v1alpha1\nkind: Cluster\nname: "+fakeCluster+"\nfakeNodes:\n  count: 5\n  stages: ["+file+"]\n")
			if r := Devk(t, tree, env, "up", "--name", fakeCluster, "--config", cfg); r.Err == nil || !strings.Contains(r.Stderr, want) {
				t.Errorf("stages %s: %v\n%s\nwant %q", file, r.Err, r.Stderr, want)
			}
		}
		// More than the memory holds, in a pod subnet with room: refused
		// with the figure before a new cluster is made.
		avail := memAvailable(t)
		count := int(avail>>20) + 1000 // at about 1 MiB a node, more than there is
		if count > 65000 {
			t.Logf("%d MiB available: the memory refusal needs more than a /8's 65,536 nodes; skipped", avail>>20)
		} else {
			cfg := filepath.Join(dir, "big.yaml")
			writeFile(t, cfg, fmt.Sprintf("apiVersion: devk.dev/v1alpha1\nkind: Cluster\nnetworking:\n  podSubnet: 10.0.0.0/8\n  serviceSubnet: 172.30.0.0/16\n  nodeSubnet: 172.31.250.0/24\nfakeNodes:\n  count: %d\n", count))
			r := Devk(t, tree, env, "up", "--name", "fkm", "--config", cfg)
			if r.Err == nil || !strings.Contains(r.Stderr, fmt.Sprintf("%d more fake nodes need about", count)) || !strings.Contains(r.Stderr, "MiB are available") {
				t.Errorf("%d fake nodes: %v\n%s", count, r.Err, r.Stderr)
			}
			if _, err := os.Stat(filepath.Join(home, "clusters", "fkm")); err == nil {
				t.Error("the refused up left cluster fkm's directory")
			}
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: layout.FakeNodeKey})
		if err != nil || len(nodes.Items) != 40 {
			t.Errorf("after the refusals: %d fake nodes (%v), want the 40 there were", len(nodes.Items), err)
		}
	})

	step(t, "down leaves no kwok", func(t *testing.T) {
		devk(t, "down")
		downed = true
		if procs := procsMentioning(dir); len(procs) > 0 {
			t.Errorf("left running after down: %v", procs)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s is still there", dir)
		}
	})
}

// createFakeDeployment makes a Deployment of n pods that only fake nodes
// take (they tolerate the fake nodes' taint and select their label),
// with more node labels to select and spread constraints.
func createFakeDeployment(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, n int32, selector map[string]string, spread []corev1.TopologySpreadConstraint) {
	t.Helper()
	sel := map[string]string{layout.FakeNodeKey: layout.FakeNodeValue}
	for k, v := range selector {
		sel[k] = v
	}
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:              sel,
					Tolerations:               []corev1.Toleration{{Key: layout.FakeNodeKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					TopologySpreadConstraints: spread,
					// kwok runs nothing: the image is never pulled.
					Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitReplicas waits until Deployment name has n ready replicas.
func waitReplicas(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, n int32) {
	t.Helper()
	var got int32
	err := wait.PollUntilContextTimeout(ctx, time.Second, fakeWait, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = d.Status.ReadyReplicas
		return got == n, nil
	})
	if err != nil {
		t.Fatalf("Deployment %s: %d of %d replicas ready: %v", name, got, n, err)
	}
}

// podsByNode counts the pods the selector selects by node, Running ones
// only.
func podsByNode(t *testing.T, ctx context.Context, cs kubernetes.Interface, selector string) map[string]int {
	t.Helper()
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]int{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			on[p.Spec.NodeName]++
		}
	}
	return on
}

// fakeLeases are the node leases of fake nodes.
func fakeLeases(t *testing.T, ctx context.Context, cs kubernetes.Interface) []coordinationv1.Lease {
	t.Helper()
	leases, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []coordinationv1.Lease
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, fakeCluster+"-fake-") {
			out = append(out, l)
		}
	}
	return out
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// memAvailable is /proc/meminfo's MemAvailable in bytes.
func memAvailable(t *testing.T) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			var kb uint64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb); err == nil {
				return kb << 10
			}
		}
	}
	t.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}
