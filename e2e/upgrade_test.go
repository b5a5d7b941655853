//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
)

// The releases TestUpgrade moves between: the suite's (KubeVersion), the
// next minor (the upgrade), and one past that (refused: a minor skipped).
const (
	UpgradeVersion = "v1.35.4"
	SkipVersion    = "v1.36.1"
)

// afterUpgradeSubset are the conformance specs TestUpgrade runs on the
// upgraded cluster: pods, the downward API, a Deployment's rollout, a
// Service's endpoints and DNS, one a node each.
var afterUpgradeSubset = []string{
	"[sig-node] Pods should get a host IP",
	"[sig-node] Pods should be submitted and removed",
	"[sig-node] Downward API should provide pod name, namespace and IP address as env vars",
	"[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones",
	"[sig-network] Services should serve a basic endpoint from pods",
	"[sig-network] DNS should provide DNS for the cluster",
}

// otherTree gets release version beside the suite's tree.
func otherTree(t *testing.T, version string) string {
	t.Helper()
	dir := filepath.Join(workDir, "kubernetes-"+version)
	MustDevk(t, workDir, "source", "get", version, dir)
	return dir
}

// pacedClient GETs a URL at a steady pace, each request on a new
// connection (as a new client would: kube-proxy's rules apply to each),
// counting the answers and the failures.
type pacedClient struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string
	cancel     context.CancelFunc
	done       chan struct{}
}

func startPaced(url string, every time.Duration) *pacedClient {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pacedClient{cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			err := func() error {
				resp, err := client.Get(url)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s: %s", resp.Status, body)
				}
				return err
			}()
			if err == nil {
				p.ok.Add(1)
				continue
			}
			p.failed.Add(1)
			p.mu.Lock()
			p.failures = append(p.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *pacedClient) stop() {
	p.cancel()
	<-p.done
}

// minAvailable watches a Deployment's available replicas until stopped and
// reports the fewest it saw (reads that fail, while the API server is
// swapped, are skipped).
func minAvailable(cs kubernetes.Interface, ns, name string) (stop func() (least int32, reads int)) {
	ctx, cancel := context.WithCancel(context.Background())
	least, reads := int32(1<<30), 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				least, reads = min(least, d.Status.AvailableReplicas), reads+1
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() (int32, int) {
		cancel()
		<-done
		return least, reads
	}
}

// upgradeReport is the part of `devk upgrade -o json` the test reads.
type upgradeReport struct {
	To       string
	Versions []struct{ Component, Node, Version string }
	Plan     []struct{ Step, Component, Node, From, To string }
	Swaps    []struct {
		Step string
		Swap struct {
			StaticPods []struct {
				Pod       string
				Unchanged bool
			}
			Addons []struct {
				Component string
				Unchanged bool
			}
			Binaries []struct {
				Component string
				Changed   bool
			}
		}
	}
}

func parseUpgrade(t *testing.T, r Result) upgradeReport {
	t.Helper()
	var rep upgradeReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("devk upgrade -o json: %v\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
	}
	return rep
}

// TestUpgrade upgrades a cluster of two nodes (beside the shared one)
// from the suite's v1.34.4 to v1.35.4, whose tree the upgrade builds,
// while a client from the host GETs a Deployment of agnhost behind a
// NodePort Service with a PodDisruptionBudget ten times a second: a
// minor version skipped is refused before anything changes; the dry run
// plans every step; the upgrade killed (kill -9) in the control plane's,
// the addons' and a kubelet's step resumes each time to the end, with
// every component and Node at v1.35.4, the nodes schedulable, the
// client's requests all answered and the Deployment never below its
// budget; a second run changes nothing; a focused conformance subset
// passes on the upgraded cluster; a config file adds a worker
// running the v1.34.4 tree's kubelet (nodes[].tree), and refuses one
// newer than the API server; --rollback brings back every version and
// every static pod's image.
func TestUpgrade(t *testing.T) {
	c := Cluster(t)
	const name = "upg"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	devk, downed := besideShared(t, c, name)
	next := otherTree(t, UpgradeVersion)

	up := devk(t, "up", "--nodes", "2", "-o", "json")
	var upRes struct{ Kubeconfig string }
	if err := json.Unmarshal([]byte(up.Stdout), &upRes); err != nil {
		t.Fatalf("devk up -o json: %v\n%s", err, up.Stdout)
	}
	cs := clientFor(t, upRes.Kubeconfig)
	cfg, paths, err := layout.Open(c.Home, name)
	if err != nil {
		t.Fatal(err)
	}
	worker := name + "-worker"
	journal := filepath.Join(paths.Dir, "upgrade.json")
	kubectl := func(t *testing.T, args ...string) Result {
		t.Helper()
		return run(t, c.Tree, nil, c.KubectlPath(), append([]string{"--kubeconfig", upRes.Kubeconfig}, args...)...)
	}
	manifestImages := func(t *testing.T) map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, pod := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			img, err := staticpod.Image(filepath.Join(paths.FirstNode().Manifests(), pod+".yaml"), pod)
			if err != nil {
				t.Fatal(err)
			}
			out[pod] = img
		}
		return out
	}
	before := manifestImages(t)

	img := agnhost(t, c)
	web := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: web
        image: %q
        args: [netexec, --http-port=8080]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
        lifecycle: {preStop: {sleep: {seconds: 3}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`, img)
	manifest := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(manifest, []byte(web), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := kubectl(t, "apply", "-f", manifest); r.Err != nil {
		t.Fatalf("kubectl apply: %v\n%s", r.Err, r.Stderr)
	}
	if r := kubectl(t, "rollout", "status", "deployment/web", "--timeout=120s"); r.Err != nil {
		t.Fatalf("kubectl rollout status: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	svc, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	workerNet, _, err := cfg.FindNode(worker)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s:%d/hostname", workerNet.IP, svc.Spec.Ports[0].NodePort)
	if got := httpGet(t, url); !strings.HasPrefix(got, "web-") {
		t.Fatalf("the NodePort answered %q", got)
	}
	client := startPaced(url, 100*time.Millisecond)
	defer client.stop()
	stopWatch := minAvailable(cs, "default", "web")

	step(t, "a minor version skipped is refused", func(t *testing.T) {
		skip := otherTree(t, SkipVersion)
		r := Devk(t, c.Tree, c.Env, "upgrade", "--tree", skip, "--name", name)
		if r.Err == nil || !strings.Contains(r.Stderr, "upgrade one minor version at a time (to v1.35 first)") || !strings.Contains(r.Stderr, "--force-skew") {
			t.Fatalf("devk upgrade to %s: %v, want the skew policy's refusal\n%s", SkipVersion, r.Err, r.Stderr)
		}
		if _, err := os.Stat(journal); !os.IsNotExist(err) {
			t.Fatalf("a refused upgrade left its journal (%v)", err)
		}
	})

	step(t, "the dry run plans every step", func(t *testing.T) {
		rep := parseUpgrade(t, devk(t, "upgrade", "--tree", next, "--dry-run", "-o", "json"))
		var steps []string
		for _, s := range rep.Plan {
			steps = append(steps, s.Step+":"+s.Component+"@"+s.Node+":"+s.From+">"+s.To)
		}
		cp := name + "-control-plane"
		want := []string{"etcd:etcd@" + cp + ":>",
			"control-plane:kube-apiserver@" + cp + ":v1.34.4>v1.35.4", "control-plane:kube-controller-manager@" + cp + ":v1.34.4>v1.35.4", "control-plane:kube-scheduler@" + cp + ":v1.34.4>v1.35.4",
			"addons:kube-proxy@:>", "addons:coredns@:>",
			"kubelets:kubelet@" + cp + ":v1.34.4>v1.35.4", "kubelets:kubelet@" + worker + ":v1.34.4>v1.35.4", "kubectl:kubectl@:v1.34.4>v1.35.4"}
		if strings.Join(steps, " ") != strings.Join(want, " ") {
			t.Fatalf("plan\n  %s\nwant\n  %s", strings.Join(steps, "\n  "), strings.Join(want, "\n  "))
		}
		if _, err := os.Stat(journal); !os.IsNotExist(err) {
			t.Fatalf("a dry run wrote the journal (%v)", err)
		}
	})

	step(t, "killed in each kind of step, resumed to the end", func(t *testing.T) {
		for _, point := range []string{"upgrade/control-plane/apiserver/ready", "upgrade/addons/kube-proxy/rollout", "upgrade/kubelets/" + worker + "/kubelet"} {
			r := atPoint(t, c.Tree, c.Env, point, "kill", "upgrade", "--tree", next, "--name", name)
			if !killedBySignal(r.Err, syscall.SIGKILL) {
				t.Fatalf("devk upgrade at %s: %v, want killed\n%s", point, r.Err, r.Stderr)
			}
		}
		// Killed after draining the worker: it is cordoned, and the
		// journal says so.
		n, err := cs.CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{})
		if err != nil || !n.Spec.Unschedulable {
			t.Fatalf("node %s after the kill in its kubelet step: unschedulable %v (%v), want cordoned", worker, n.Spec.Unschedulable, err)
		}
		if data, err := os.ReadFile(journal); err != nil || !strings.Contains(string(data), `"cordoned": "`+worker+`"`) {
			t.Fatalf("journal: %v\n%s", err, data)
		}
		rep := parseUpgrade(t, devk(t, "upgrade", "--tree", next, "-o", "json"))
		if len(rep.Versions) != 6 {
			t.Errorf("versions %+v, want 6 (API server, controller-manager, scheduler, two kubelets, kubectl)", rep.Versions)
		}
		for _, v := range rep.Versions {
			if v.Version != UpgradeVersion {
				t.Errorf("%s on %q runs %s, want %s", v.Component, v.Node, v.Version, UpgradeVersion)
			}
		}
		if v, err := cs.Discovery().ServerVersion(); err != nil || v.GitVersion != UpgradeVersion {
			t.Errorf("the API server's version %v (%v), want %s", v, err, UpgradeVersion)
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			if n.Status.NodeInfo.KubeletVersion != UpgradeVersion || n.Spec.Unschedulable || !nodeReady(&n) {
				t.Errorf("node %s: kubelet %s, unschedulable %v, ready %v; want %s, schedulable and Ready", n.Name, n.Status.NodeInfo.KubeletVersion, n.Spec.Unschedulable, nodeReady(&n), UpgradeVersion)
			}
		}
		var st struct {
			Nodes []struct {
				Name       string
				Kubelet    string `json:"kubeletVersion"`
				Components []struct{ Name, Version string }
			}
		}
		if r := devk(t, "status", "-o", "json"); json.Unmarshal([]byte(r.Stdout), &st) != nil || len(st.Nodes) != 2 {
			t.Fatalf("devk status -o json:\n%s", r.Stdout)
		}
		versions := 0
		for _, n := range st.Nodes {
			if n.Kubelet != UpgradeVersion {
				t.Errorf("devk status: node %s's kubelet %s, want %s", n.Name, n.Kubelet, UpgradeVersion)
			}
			for _, comp := range n.Components {
				if comp.Version != "" {
					versions++
					if comp.Version != UpgradeVersion {
						t.Errorf("devk status: %s on %s is %s, want %s", comp.Name, n.Name, comp.Version, UpgradeVersion)
					}
				}
			}
		}
		if versions != 3 {
			t.Errorf("devk status shows %d control-plane components' versions, want 3 (API server, controller-manager, scheduler)", versions)
		}
		if got := manifestImages(t); got["kube-apiserver"] == before["kube-apiserver"] || got["etcd"] == before["etcd"] {
			t.Errorf("the static pods' images after the upgrade %v, the same as before %v", got, before)
		}
	})

	step(t, "a second run changes nothing", func(t *testing.T) {
		rep := parseUpgrade(t, devk(t, "upgrade", "--tree", next, "-o", "json"))
		swapped := 0
		for _, s := range rep.Swaps {
			for _, p := range s.Swap.StaticPods {
				if !p.Unchanged {
					swapped++
				}
			}
			for _, a := range s.Swap.Addons {
				if !a.Unchanged {
					swapped++
				}
			}
			for _, b := range s.Swap.Binaries {
				if b.Changed {
					swapped++
				}
			}
		}
		if swapped != 0 || len(rep.Swaps) == 0 {
			t.Fatalf("the second upgrade swapped %d (of %d steps' swaps), want none: %+v", swapped, len(rep.Swaps), rep.Swaps)
		}
		// up from the old tree would put its kubelets back: refused.
		if r := Devk(t, c.Tree, c.Env, "up", "--name", name); r.Err == nil || !strings.Contains(r.Stderr, "devk upgrade --rollback") {
			t.Errorf("devk up from the %s tree of the upgraded cluster: %v, want refused\n%s", KubeVersion, r.Err, r.Stderr)
		}
	})

	// The upgraded cluster passes the suite's own conformance specs (its
	// v1.34.4 e2e.test, which TestConformanceSubset built, one minor
	// behind the cluster as upstream's skew jobs run it), a focused few.
	step(t, "a focused conformance subset passes after", func(t *testing.T) {
		var quoted []string
		for _, spec := range afterUpgradeSubset {
			quoted = append(quoted, regexp.QuoteMeta(spec))
		}
		res, r := runE2E(t, c.Tree, c.Env, "e2e", "--name", name, "--conformance", "--focus", strings.Join(quoted, "|"), "--parallel", "2", "--suite-skew")
		if r.Err != nil || res.Selected < len(afterUpgradeSubset) || res.Summary.Passed != res.Selected {
			t.Errorf("devk e2e after the upgrade: exit %v, %d of %d selected passed", r.Err, res.Summary.Passed, res.Selected)
		}
		t.Logf("devk e2e on the upgraded cluster: %d specs passed in %s", res.Summary.Passed, r.Took)
	})

	client.stop()
	least, reads := stopWatch()
	t.Logf("the client through the Service: %d answered, %d failed; the Deployment's fewest available replicas %d over %d reads", client.ok.Load(), client.failed.Load(), least, reads)
	if client.failed.Load() > 0 || client.ok.Load() == 0 {
		t.Errorf("the client through the Service saw %d failed requests (of %d):\n  %s", client.failed.Load(), client.ok.Load()+client.failed.Load(), strings.Join(client.failures, "\n  "))
	}
	if least < 1 || reads == 0 {
		t.Errorf("the Deployment had %d available replicas at its lowest (%d reads), below its PodDisruptionBudget's 1", least, reads)
	}

	// Mixed versions by the config file: a third node, a worker running
	// the suite's v1.34.4 kubelet beside the v1.35.4 control plane; one
	// whose tree is newer than the API server is refused before anything
	// changes.
	step(t, "a worker from another tree by the config file", func(t *testing.T) {
		old := name + "-old"
		file := filepath.Join(t.TempDir(), "devk.yaml")
		write := func(tree string) {
			t.Helper()
			body := fmt.Sprintf("apiVersion: devk.dev/v1alpha1\nkind: Cluster\nname: %s\nnodes:\n- role: control-plane\n- role: worker\n  name: %s\n- role: worker\n  name: %s\n  tree: %s\n", name, worker, old, tree)
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(otherTree(t, SkipVersion))
		r := Devk(t, c.Tree, c.Env, "up", "--tree", next, "--config", file)
		if want := "kubelet " + SkipVersion + " on " + old + ": newer than kube-apiserver"; r.Err == nil || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "nodes[].tree") {
			t.Fatalf("devk up with a worker of %s beside %s: %v, want %q\n%s", SkipVersion, UpgradeVersion, r.Err, want, r.Stderr)
		}
		if cfg, _, err := layout.Open(c.Home, name); err != nil || len(cfg.Network.Nodes) != 2 {
			t.Fatalf("the refused file changed the cluster: %d nodes (%v)", len(cfg.Network.Nodes), err)
		}
		write(c.Tree)
		devk(t, "up", "--tree", next, "--config", file)
		n, err := cs.CoreV1().Nodes().Get(ctx, old, metav1.GetOptions{})
		if err != nil || n.Status.NodeInfo.KubeletVersion != KubeVersion || !nodeReady(n) {
			t.Fatalf("node %s runs kubelet %s, ready %v (%v), want %s Ready", old, n.Status.NodeInfo.KubeletVersion, nodeReady(n), err, KubeVersion)
		}
		pod := filepath.Join(t.TempDir(), "pod.yaml")
		if err := os.WriteFile(pod, []byte(fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: on-old, namespace: default}\nspec:\n  nodeName: %s\n  containers: [{name: c, image: %q, args: [pause]}]\n", old, img)), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := kubectl(t, "apply", "-f", pod); r.Err != nil {
			t.Fatalf("kubectl apply: %v\n%s", r.Err, r.Stderr)
		}
		if r := kubectl(t, "wait", "--for=condition=Ready", "pod/on-old", "--timeout=120s"); r.Err != nil {
			t.Fatalf("a pod on %s: %v\n%s%s", old, r.Err, r.Stdout, r.Stderr)
		}
		cfg, _, err := layout.Open(c.Home, name)
		if err != nil {
			t.Fatal(err)
		}
		nn, _, err := cfg.FindNode(old)
		if err != nil || nn.Tree != c.Tree || !strings.Contains(nn.KubeProxyImage, "/kube-proxy@sha256:") {
			t.Errorf("cluster.json records node %s's tree %q and kube-proxy image %q (%v), want %s and its kube-proxy's", old, nn.Tree, nn.KubeProxyImage, err, c.Tree)
		}
		// Its kube-proxy is its tree's, from a DaemonSet of its own: the
		// binary says its version, and a pod there reaches the web
		// Service through the rules it wrote; the cluster's keeps off.
		ownDS := "kube-proxy-" + old
		if r := kubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/"+ownDS, "--timeout=120s"); r.Err != nil {
			t.Fatalf("%s: %v\n%s%s", ownDS, r.Err, r.Stdout, r.Stderr)
		}
		if r := kubectl(t, "-n", "kube-system", "exec", "daemonset/"+ownDS, "--", "/usr/local/bin/kube-proxy", "--version"); !strings.Contains(r.Stdout, "Kubernetes "+KubeVersion) {
			t.Errorf("kube-proxy on %s reports %q (%v), want %s", old, r.Stdout, r.Err, KubeVersion)
		}
		proxies, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + old})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range proxies.Items {
			if strings.HasPrefix(p.Name, "kube-proxy-") && !strings.HasPrefix(p.Name, ownDS+"-") {
				t.Errorf("the cluster's kube-proxy runs on %s too: pod %s", old, p.Name)
			}
		}
		svc, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := kubectl(t, "exec", "on-old", "--", "/agnhost", "connect", svc.Spec.ClusterIP+":80", "--timeout=5s"); r.Err != nil {
			t.Errorf("from a pod on %s to Service web (%s:80): %v\n%s%s", old, svc.Spec.ClusterIP, r.Err, r.Stdout, r.Stderr)
		}
		var st struct {
			Nodes []struct {
				Name    string
				Kubelet string `json:"kubeletVersion"`
				Addons  []struct {
					Name, Pod string
					Manifest  string `json:"manifestImage"`
				}
			}
		}
		if r := devk(t, "status", "-o", "json"); json.Unmarshal([]byte(r.Stdout), &st) != nil || len(st.Nodes) != 3 {
			t.Fatalf("devk status -o json:\n%s", r.Stdout)
		}
		for _, sn := range st.Nodes {
			if want := map[bool]string{true: KubeVersion, false: UpgradeVersion}[sn.Name == old]; sn.Kubelet != want {
				t.Errorf("devk status: node %s's kubelet %s, want %s", sn.Name, sn.Kubelet, want)
			}
			for _, a := range sn.Addons {
				if sn.Name == old && a.Name == "kube-proxy" && a.Manifest != nn.KubeProxyImage {
					t.Errorf("devk status: %s's kube-proxy %s names %s, want its own DaemonSet's %s", old, a.Pod, a.Manifest, nn.KubeProxyImage)
				}
			}
		}
		// A kubelet swap of every node leaves it its tree's kubelet,
		// saying so (the others hold the upgrade's bytes already).
		r = devk(t, "swap", "kubelet", "--tree", next, "-o", "json")
		type node struct{ Node string }
		var sw struct{ Binaries, KeptKubelets []node }
		if err := json.Unmarshal([]byte(r.Stdout), &sw); err != nil || len(sw.Binaries) != 2 || slices.Contains(sw.Binaries, node{old}) ||
			!slices.Equal(sw.KeptKubelets, []node{{old}}) || !strings.Contains(r.Stderr, old+" keeps its kubelet: it runs the tree of its own") {
			t.Errorf("devk swap kubelet beside a worker of its own tree swapped %+v and kept %+v (%v), want the two other nodes swapped and %s kept, saying so:\n%s", sw.Binaries, sw.KeptKubelets, err, old, r.Stderr)
		}
		if n, err := cs.CoreV1().Nodes().Get(ctx, old, metav1.GetOptions{}); err != nil || n.Status.NodeInfo.KubeletVersion != KubeVersion {
			t.Errorf("after devk swap kubelet node %s runs kubelet %s (%v), want its tree's %s", old, n.Status.NodeInfo.KubeletVersion, err, KubeVersion)
		}
		// An upgrade (or rollback) would move the worker off its tree:
		// refused, naming it, until it goes.
		if r := Devk(t, c.Tree, c.Env, "upgrade", "--name", name, "--rollback"); r.Err == nil || !strings.Contains(r.Stderr, "node "+old+" runs its own tree") {
			t.Errorf("devk upgrade --rollback beside a worker of its own tree: %v, want it refused\n%s", r.Err, r.Stderr)
		}
		kubectl(t, "delete", "pod", "on-old", "--wait=false")
		devk(t, "node", "remove", old)
		if _, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, ownDS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("DaemonSet %s after node remove %s: %v, want it gone", ownDS, old, err)
		}
	})

	step(t, "rollback", func(t *testing.T) {
		rep := parseUpgrade(t, devk(t, "upgrade", "--rollback", "-o", "json"))
		for _, v := range rep.Versions {
			if v.Version != KubeVersion {
				t.Errorf("after the rollback %s on %q runs %s, want %s", v.Component, v.Node, v.Version, KubeVersion)
			}
		}
		if got := manifestImages(t); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Errorf("the static pods' images after the rollback\n  %v\nwant those before the upgrade\n  %v", got, before)
		}
		if r := Devk(t, c.Tree, c.Env, "upgrade", "--rollback", "--name", name); r.Err == nil || !strings.Contains(r.Stderr, "no upgrade to roll back") {
			t.Errorf("a second rollback: %v\n%s", r.Err, r.Stderr)
		}
	})

	// Mixed versions by choice: one worker's kubelet from the next
	// minor's tree is newer than the API server, which the policy refuses
	// unless forced; forced, the node runs it Ready, and status says so.
	step(t, "a kubelet newer than the API server", func(t *testing.T) {
		r := Devk(t, c.Tree, c.Env, "swap", "kubelet", "--tree", next, "--node", worker, "--name", name)
		if r.Err == nil || !strings.Contains(r.Stderr, "kubelet "+UpgradeVersion+" on "+worker+": newer than kube-apiserver") || !strings.Contains(r.Stderr, "--force-skew") {
			t.Fatalf("devk swap kubelet --tree %s: %v, want the skew policy's refusal\n%s", next, r.Err, r.Stderr)
		}
		if n, err := cs.CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{}); err != nil || n.Status.NodeInfo.KubeletVersion != KubeVersion {
			t.Fatalf("after the refusal node %s runs kubelet %s (%v), want %s", worker, n.Status.NodeInfo.KubeletVersion, err, KubeVersion)
		}
		devk(t, "swap", "kubelet", "--tree", next, "--node", worker, "--force-skew")
		n, err := cs.CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{})
		if err != nil || n.Status.NodeInfo.KubeletVersion != UpgradeVersion || !nodeReady(n) {
			t.Fatalf("forced: node %s runs kubelet %s, ready %v (%v), want %s Ready", worker, n.Status.NodeInfo.KubeletVersion, nodeReady(n), err, UpgradeVersion)
		}
		var st struct {
			Nodes []struct {
				Name    string
				Kubelet string `json:"kubeletVersion"`
			}
		}
		if r := devk(t, "status", "-o", "json"); json.Unmarshal([]byte(r.Stdout), &st) != nil || len(st.Nodes) != 2 || st.Nodes[1].Kubelet != UpgradeVersion || st.Nodes[0].Kubelet != KubeVersion {
			t.Errorf("devk status with one worker forced to %s: %+v", UpgradeVersion, st.Nodes)
		}
		devk(t, "swap", "kubelet", "--rollback", "--node", worker)
	})

	devk(t, "down")
	downed()
}

// TestUpgradeKubeadm upgrades a cluster the tree's kubeadm bootstrapped
// (a control-plane node and a worker, beside the shared cluster) from
// the suite's v1.34.4 to v1.35.4 as a kubeadm user does, by the new
// tree's kubeadm: `kubeadm upgrade apply` on the control-plane node
// (killed inside it once, resumed), `kubeadm upgrade node` on the
// worker, each node drained around its kubelet's swap. After it the API server, every Node, kubeadm's
// ClusterConfiguration, kube-proxy, CoreDNS and etcd are at what the
// v1.35.4 kubeadm names; a second run changes nothing; --rollback, which
// kubeadm has not, is refused.
func TestUpgradeKubeadm(t *testing.T) {
	c := Cluster(t)
	const name = "upk"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	devk, downed := besideShared(t, c, name)
	next := otherTree(t, UpgradeVersion)
	up := devk(t, "up", "--bootstrapper", "kubeadm", "--nodes", "2", "-o", "json")
	var upRes struct{ Kubeconfig string }
	if err := json.Unmarshal([]byte(up.Stdout), &upRes); err != nil {
		t.Fatalf("devk up -o json: %v\n%s", err, up.Stdout)
	}
	cs := clientFor(t, upRes.Kubeconfig)
	_, paths, err := layout.Open(c.Home, name)
	if err != nil {
		t.Fatal(err)
	}

	// Killed (kill -9) inside kubeadm upgrade apply, as it begins on the
	// static pods: what is left of it is stopped by the next run, which
	// runs apply again to the end (kubeadm skips what it finds done).
	step(t, "killed inside kubeadm upgrade apply", func(t *testing.T) {
		r := atPoint(t, c.Tree, c.Env, "kubeadm/upgrade/upgrade/staticpods", "kill", "upgrade", "--tree", next, "--name", name)
		if !killedBySignal(r.Err, syscall.SIGKILL) {
			t.Fatalf("devk upgrade not killed inside kubeadm upgrade apply: %v\n%s", r.Err, r.Stderr)
		}
	})

	step(t, "kubeadm upgrade apply and node", func(t *testing.T) {
		r := devk(t, "upgrade", "--tree", next, "-v", "1")
		t.Logf("devk upgrade of the kubeadm cluster, resumed, took %s; devk restarted a kubelet %d times for a lagging mirror pod", r.Took.Round(time.Second), strings.Count(r.Stderr, "restarting devk's kubelet"))
		// kubeadm's own words: apply's end on the control-plane node, and
		// the kubelet config written on both nodes (apply's and node's).
		for want, times := range map[string]int{`SUCCESS! A control plane node of your cluster was upgraded to "` + UpgradeVersion + `"`: 1, "The kubelet configuration for this node was successfully upgraded!": 2} {
			if n := strings.Count(r.Stderr, want); n < times {
				t.Errorf("devk upgrade -v 1 shows kubeadm's %q %d times, want %d:\n%s", want, n, times, r.Stderr)
			}
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 2 {
			t.Fatalf("nodes: %v (%d)", err, len(nodes.Items))
		}
		for _, n := range nodes.Items {
			if n.Status.NodeInfo.KubeletVersion != UpgradeVersion || n.Spec.Unschedulable || !nodeReady(&n) {
				t.Errorf("node %s: kubelet %s, unschedulable %v, ready %v; want %s, schedulable and Ready", n.Name, n.Status.NodeInfo.KubeletVersion, n.Spec.Unschedulable, nodeReady(&n), UpgradeVersion)
			}
		}
		if v, err := cs.Discovery().ServerVersion(); err != nil || v.GitVersion != UpgradeVersion {
			t.Errorf("the API server's version %v (%v), want %s", v, err, UpgradeVersion)
		}
		kc, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
		if err != nil || !strings.Contains(kc.Data["ClusterConfiguration"], "kubernetesVersion: "+UpgradeVersion) {
			t.Errorf("kubeadm's ClusterConfiguration after the upgrade (%v):\n%s", err, kc.Data["ClusterConfiguration"])
		}
		// The images the v1.35.4 kubeadm names (its constants): etcd
		// 3.6.6-0, CoreDNS v1.13.1, kube-proxy of its version.
		ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil || !strings.HasSuffix(ds.Spec.Template.Spec.Containers[0].Image, "/kube-proxy:"+UpgradeVersion) {
			t.Errorf("kube-proxy's DaemonSet after the upgrade: %v", err)
		}
		d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil || !strings.HasSuffix(d.Spec.Template.Spec.Containers[0].Image, "/coredns:v1.13.1") {
			t.Errorf("CoreDNS's Deployment after the upgrade: %v", err)
		}
		// kubeadm's CoreDNS has no PodDisruptionBudget: the last drain may
		// have evicted both replicas; they run again on the nodes.
		if r := run(t, c.Tree, nil, c.KubectlPath(), "--kubeconfig", upRes.Kubeconfig, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s"); r.Err != nil {
			t.Errorf("CoreDNS after the upgrade: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
		}
		if img, err := staticpod.Image(filepath.Join(paths.FirstNode().Manifests(), "etcd.yaml"), "etcd"); err != nil || !strings.HasSuffix(img, "/etcd:3.6.6-0") {
			t.Errorf("etcd's manifest names %s (%v), want kubeadm's 3.6.6-0", img, err)
		}
		if loaded, _, err := layout.Open(c.Home, name); err != nil || loaded.KubeVersion != UpgradeVersion {
			t.Errorf("cluster.json's version %q (%v), want %s", loaded.KubeVersion, err, UpgradeVersion)
		}
	})

	step(t, "a second run changes nothing", func(t *testing.T) {
		r := devk(t, "upgrade", "--tree", next, "-o", "json")
		rep := parseUpgrade(t, r)
		if rep.To != UpgradeVersion || len(rep.Versions) < 6 {
			t.Fatalf("devk upgrade reports %s, %d versions", rep.To, len(rep.Versions))
		}
		for _, v := range rep.Versions {
			if v.Version != UpgradeVersion {
				t.Errorf("after the upgrade %s on %q runs %s, want %s", v.Component, v.Node, v.Version, UpgradeVersion)
			}
		}
		if !strings.Contains(r.Stderr, "kubeadm upgrade apply "+UpgradeVersion+" ran before") || !strings.Contains(r.Stderr, "every other node's kubelet already runs") {
			t.Errorf("the second upgrade ran kubeadm again:\n%s", r.Stderr)
		}
		for _, s := range rep.Swaps {
			for _, b := range s.Swap.Binaries {
				if b.Changed {
					t.Errorf("the second upgrade swapped %s in step %s", b.Component, s.Step)
				}
			}
		}
	})

	step(t, "rollback is refused", func(t *testing.T) {
		r := Devk(t, c.Tree, c.Env, "upgrade", "--rollback", "--name", name)
		if r.Err == nil || !strings.Contains(r.Stderr, "kubeadm has no rollback of an upgrade") {
			t.Errorf("devk upgrade --rollback of a kubeadm cluster: %v, want refused\n%s", r.Err, r.Stderr)
		}
	})

	// The upgrade installed the v1.35.4 kubectl as the suite's home's.
	devk(t, "swap", "kubectl", "--rollback")

	devk(t, "down")
	downed()
}
