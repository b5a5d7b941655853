//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/joinsteps"
	"github.com/devk/devk/cluster/noderemove"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
)

// TestMultiNode is a cluster of one control plane and two workers made
// by `devk up --nodes 3` beside the shared cluster (in its DEVK_HOME,
// sharing its registry): every node Ready at its own address with its
// own pod subnet; a Deployment spread across the workers; a pod on one
// worker reaches a pod and a Service on the other and sees the other
// pod's own address (no masquerading between nodes); DNS works from
// both; kubectl logs and exec on each node; `devk node add` then `devk
// node remove` leave nothing of that node; a join with a wrong CA hash
// or an unknown token fails before changing the cluster; `devk down`
// leaves nothing of any node, and the host's iptables, sysctls, links and
// routes are as they were.
func TestMultiNode(t *testing.T) {
	c := Cluster(t)
	const name = "multi"
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	devk, downed := besideShared(t, c, name)
	hostBefore := hostNetState(t)
	fsBefore := hostFSState(t)

	// up's images phase pushes what the tree builds: the shared cluster
	// runs it again after this test, passed or failed, for the tests
	// after it (digest verify).
	t.Cleanup(func() {
		if r := Devk(t, c.Tree, c.Env, "swap"); r.Err != nil {
			t.Errorf("devk swap on the shared cluster: %v\n%s", r.Err, r.Stderr)
		}
	})
	up := devk(t, "up", "--nodes", "3", "-o", "json")
	var upRes struct{ Kubeconfig string }
	if err := json.Unmarshal([]byte(up.Stdout), &upRes); err != nil {
		t.Fatalf("devk up -o json: %v\n%s", err, up.Stdout)
	}
	t.Logf("devk up --nodes 3 took %s", up.Took.Round(time.Millisecond))
	cs := clientFor(t, upRes.Kubeconfig)
	cfg, paths, err := layout.Open(c.Home, name)
	if err != nil {
		t.Fatal(err)
	}
	workers := []string{name + "-worker", name + "-worker2"}
	if got, want := cfg.NodeNames(), append([]string{name + "-control-plane"}, workers...); !slices.Equal(got, want) {
		t.Fatalf("cluster.json nodes %v, want %v", got, want)
	}
	step(t, "every node Ready at its own address and pod subnet", func(t *testing.T) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ips, cidrs := map[string]string{}, map[string]bool{}
		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				t.Errorf("node %s is not Ready: %+v", n.Name, n.Status.Conditions)
			}
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ips[n.Name] = a.Address
				}
			}
			cidrs[n.Spec.PodCIDR] = true
			want, _, err := cfg.FindNode(n.Name)
			if err != nil || want.IP != ips[n.Name] || want.PodCIDR != n.Spec.PodCIDR || want.Joining {
				t.Errorf("node %s: address %s, pods %s; cluster.json has %+v (%v)", n.Name, ips[n.Name], n.Spec.PodCIDR, want, err)
			}
		}
		if len(nodes.Items) != 3 || len(ips) != 3 || len(cidrs) != 3 {
			t.Fatalf("want 3 nodes with their own addresses and pod subnets: %v %v", ips, cidrs)
		}
	})
	// Each node's kubelet runs in a mount namespace of the node's own
	// (not the host's, not another node's), where the device-plugin
	// socket the kubelet hard-codes is the node's own file.
	step(t, "a mount namespace per node", func(t *testing.T) {
		seen := map[string]string{nsOf(t, os.Getpid()): "the host"}
		for _, n := range cfg.NodeNames() {
			p, err := paths.Node(cfg, n)
			if err != nil {
				t.Fatal(err)
			}
			ns := nsOf(t, pidFromFile(t, p.PIDFile("kubelet")))
			if other, ok := seen[ns]; ok {
				t.Errorf("node %s's kubelet shares its mount namespace with %s", n, other)
			}
			seen[ns] = n
			if _, err := os.Stat(filepath.Join(p.Dir, "fs/var/lib/kubelet/device-plugins/kubelet.sock")); err != nil {
				t.Errorf("node %s's own device-plugin socket: %v", n, err)
			}
		}
	})

	// The workers' kubelets got their client certificates by TLS
	// bootstrap: an approved, issued CSR each, from the bootstrap token.
	step(t, "TLS bootstrap", func(t *testing.T) {
		csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bootstrapped := 0
		for _, r := range csrs.Items {
			if strings.HasPrefix(r.Spec.Username, "system:bootstrap:") && len(r.Status.Certificate) > 0 {
				bootstrapped++
			}
		}
		if bootstrapped != 2 {
			t.Errorf("%d CSRs by a bootstrap token were issued, want one per worker", bootstrapped)
		}
	})

	// digest verify sees the kube-proxy pod of every node through that
	// node's own runtime.
	step(t, "digest verify on every node", func(t *testing.T) {
		if v := devk(t, "digest", "verify", "kube-proxy"); !strings.Contains(v.Stdout, "3 pods, 3 on nodes whose runtime was asked") {
			t.Errorf("digest verify kube-proxy on 3 nodes:\n%s", v.Stdout)
		}
	})

	img := agnhost(t, c)
	kubectl := func(t *testing.T, args ...string) string {
		t.Helper()
		r := run(t, c.Tree, nil, c.KubectlPath(), append([]string{"--kubeconfig", upRes.Kubeconfig}, args...)...)
		if r.Err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
		}
		return r.Stdout
	}
	// web: one replica per worker (anti-affinity, off the control
	// plane); a client pod pinned to each worker.
	manifests := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}]}]
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]
      containers: [{name: web, image: %[1]q, args: [netexec, --http-port=8080]}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client-1, namespace: default}
spec:
  nodeName: %[2]s
  containers: [{name: client, image: %[1]q, args: [netexec, --http-port=8080]}]
---
apiVersion: v1
kind: Pod
metadata: {name: client-2, namespace: default}
spec:
  nodeName: %[3]s
  containers: [{name: client, image: %[1]q, args: [netexec, --http-port=8080]}]
`, img, workers[0], workers[1])
	webOn := map[string]corev1.Pod{}
	podIP := map[string]string{}
	step(t, "web spread across the workers", func(t *testing.T) {
		if r := run(t, c.Tree, nil, "sh", "-c", fmt.Sprintf("%s --kubeconfig %s apply -f - <<'EOF'\n%sEOF", c.KubectlPath(), upRes.Kubeconfig, manifests)); r.Err != nil {
			t.Fatalf("kubectl apply: %v\n%s", r.Err, r.Stderr)
		}
		kubectl(t, "rollout", "status", "deployment/web", "--timeout=120s")
		kubectl(t, "wait", "--for=condition=Ready", "pod/client-1", "pod/client-2", "--timeout=120s")
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			podIP[p.Name] = p.Status.PodIP
			if p.Labels["app"] == "web" {
				webOn[p.Spec.NodeName] = p
			}
		}
		if len(webOn) != 2 || webOn[workers[0]].Name == "" || webOn[workers[1]].Name == "" {
			t.Fatalf("the Deployment is not spread across the workers: %v", webOn)
		}
	})

	// Across nodes, through each client's netexec (reached by
	// port-forward: the API server to that worker's kubelet): client-1
	// (on worker) dials the web pod on worker2 by its address, which sees
	// client-1's own address; each dials the Service by name; and the API
	// server's name answers from both.
	step(t, "pods and Services across nodes", func(t *testing.T) {
		for i, client := range []string{"client-1", "client-2"} {
			other := webOn[workers[1-i]]
			port := portForward(t, ctx, c.KubectlPath(), upRes.Kubeconfig, "pod/"+client, 8080)
			dial := func(host string, p int, request string) string {
				return httpGet(t, fmt.Sprintf("http://127.0.0.1:%s/dial?request=%s&host=%s&port=%d&protocol=http&tries=1", port, request, host, p))
			}
			if got := dial(other.Status.PodIP, 8080, "clientip"); !strings.Contains(got, `"`+podIP[client]+":") {
				t.Errorf("%s on %s to %s on %s: the server saw %s, want %s's own address %s", client, workers[i], other.Name, workers[1-i], got, client, podIP[client])
			}
			// kube-proxy may not have programmed the Service's endpoints on
			// this node yet.
			eventually(t, ctx, client+" to Service web", func() error {
				if got := dial("web.default.svc.cluster.local", 80, "hostname"); !strings.Contains(got, `"web-`) {
					return fmt.Errorf("Service web answered %s", got)
				}
				return nil
			})
			kubectl(t, "exec", client, "--", "/agnhost", "connect", "kubernetes.default.svc.cluster.local:443", "--timeout=5s")
		}
	})
	// kubectl logs on each node's pods (the API server reaches every
	// kubelet at its node's address).
	step(t, "kubectl logs on each node", func(t *testing.T) {
		for _, n := range workers {
			if logs := kubectl(t, "logs", webOn[n].Name); !strings.Contains(logs, "Started HTTP server on port 8080") {
				t.Errorf("kubectl logs %s (on %s):\n%s", webOn[n].Name, n, logs)
			}
		}
	})

	// swap kubelet --node: only that node's kubelet is replaced and
	// restarted, and the swap waits for that node. A kubelet with a few
	// bytes appended (an ELF runs the same) as its .prev makes the
	// rollback install different bytes.
	step(t, "swap kubelet --node", func(t *testing.T) {
		w1 := filepath.Join(paths.NodesDir(), workers[0])
		w1Paths := layout.NodeFiles{Supervised: layout.Supervised{Dir: w1}}
		kubeletPID := func(p layout.NodeFiles) string {
			data, _ := os.ReadFile(p.PIDFile("kubelet"))
			return strings.Fields(string(data) + " -")[0]
		}
		cpPID, w1PID := kubeletPID(paths.FirstNode()), kubeletPID(w1Paths)
		bin, err := os.ReadFile(w1Paths.KubeletBinary())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(w1Paths.KubeletBinary()+".prev", append(bin, "\n# devk e2e\n"...), 0o755); err != nil {
			t.Fatal(err)
		}
		sw := devk(t, "swap", "kubelet", "--rollback", "--node", workers[0], "-o", "json")
		var swapped struct {
			Binaries []struct {
				Node, Dest string
				Changed    bool
			}
		}
		if err := json.Unmarshal([]byte(sw.Stdout), &swapped); err != nil || len(swapped.Binaries) != 1 || swapped.Binaries[0].Node != workers[0] || !swapped.Binaries[0].Changed {
			t.Errorf("swap kubelet --node %s -o json: %v\n%s", workers[0], err, sw.Stdout)
		}
		if now := kubeletPID(w1Paths); now == w1PID {
			t.Errorf("%s's kubelet was not restarted (pid %s)", workers[0], now)
		}
		if now := kubeletPID(paths.FirstNode()); now != cpPID {
			t.Errorf("the control plane's kubelet was restarted (pid %s, was %s) by a swap on %s", now, cpPID, workers[0])
		}
		if n, err := cs.CoreV1().Nodes().Get(ctx, workers[0], metav1.GetOptions{}); err != nil || !nodeReady(n) {
			t.Errorf("%s after its kubelet swap: %v", workers[0], err)
		}
		if r := Devk(t, c.Tree, c.Env, "swap", "apiserver", "--node", workers[0], "--name", name); r.Err == nil || !strings.Contains(r.Stderr, "which --node leaves out") {
			t.Errorf("swap apiserver --node %s (a worker): %v\n%s", workers[0], r.Err, r.Stderr)
		}
	})

	// A cluster of the same name in another DEVK_HOME would share the
	// nodes' namespaces and cgroups: refused before anything is made.
	step(t, "the same name in another DEVK_HOME", func(t *testing.T) {
		other := t.TempDir()
		if r := Devk(t, c.Tree, []string{"DEVK_HOME=" + other, "KUBECONFIG=" + filepath.Join(other, "kubeconfig")}, "up", "--name", name); r.Err == nil ||
			!strings.Contains(r.Stderr, "network namespace devk-"+name+"-control-plane exists already") {
			t.Errorf("up --name %s in another DEVK_HOME: %v, want the namespace refused:\n%s", name, r.Err, r.Stderr)
		}
		if _, err := os.Stat(filepath.Join(other, "clusters", name)); err == nil {
			t.Errorf("the refused up left %s", filepath.Join(other, "clusters", name))
		}
	})

	// Bad input leaves the cluster as it is.
	step(t, "bad input", func(t *testing.T) {
		cfgFile := paths.ConfigFile()
		before, _ := os.ReadFile(cfgFile)
		bad := []struct {
			args []string
			want string
		}{
			{[]string{"node", "add", workers[0]}, "has a node " + workers[0] + " already"},
			{[]string{"node", "remove", name + "-control-plane"}, "goes only with the cluster"},
			{[]string{"node", "add", "--discovery-token-ca-cert-hash", "sha256:" + strings.Repeat("0", 64)}, "does not match any pinned hash"},
			{[]string{"node", "add", "--token", "abcdef.0123456789abcdef", "--discovery-timeout", "3s"}, "not signed for this token"},
			{[]string{"node", "add", "--control-plane"}, "no load balancer"},
		}
		for _, tc := range bad {
			r := Devk(t, c.Tree, c.Env, append(tc.args, "--name", name)...)
			if r.Err == nil || !strings.Contains(r.Stderr, tc.want) {
				t.Errorf("devk %s: %v, want an error saying %q:\n%s", strings.Join(tc.args, " "), r.Err, tc.want, r.Stderr)
			}
			if after, _ := os.ReadFile(cfgFile); string(after) != string(before) {
				t.Errorf("devk %s changed cluster.json", strings.Join(tc.args, " "))
			}
			if ns, _ := filepath.Glob("/run/netns/devk-" + name + "-worker3"); len(ns) > 0 {
				t.Errorf("devk %s made a namespace: %v", strings.Join(tc.args, " "), ns)
			}
		}
	})

	// node add, then node remove: the node drains and leaves nothing.
	third := name + "-worker3"
	// Killed (kill -9) and interrupted (Ctrl-C) at every phase of the
	// join, each run resuming what the one before left; then one more
	// `node add` finishes it.
	thirdDir := filepath.Join(paths.NodesDir(), third)
	var thirdNS string
	step(t, "node add, killed and interrupted at each phase", func(t *testing.T) {
		for _, st := range phase.Flatten(cluster.JoinPhases()) {
			if !joinsteps.RunsFor(st.Path, false, false) {
				continue // not a devk worker's: TestHAControlPlane kills a control-plane join there
			}
			point := "node-add/" + st.Path
			args := []string{"node", "add", third, "--name", name}
			if r := atPoint(t, c.Tree, c.Env, point, "kill", args...); !killedBySignal(r.Err, syscall.SIGKILL) {
				t.Fatalf("not killed at %s: %v\n%s", point, r.Err, r.Stderr)
			}
			if r := atPoint(t, c.Tree, c.Env, point, "int", args...); exitCode(r.Err) != 130 {
				t.Fatalf("exit %d after Ctrl-C at %s, want 130:\n%s", exitCode(r.Err), point, r.Stderr)
			}
		}
		// While a node add holds the cluster, an up, a down, another add, a
		// removal and a kubelet swap on the joining node are refused, naming
		// it; killed there, the next add resumes it.
		holdAndRefuse(t, c.Tree, c.Env, "node-add/wait", []string{"node", "add", third, "--name", name}, true,
			[]string{"up", "--name", name}, []string{"down", "--name", name}, []string{"node", "add", "--name", name},
			[]string{"node", "remove", workers[1], "--name", name}, []string{"swap", "kubelet", "--node", third, "--name", name})
		add := devk(t, "node", "add", third, "-o", "json")
		var added struct {
			Node, IP, PodCIDR string
			Nodes             []string
		}
		if err := json.Unmarshal([]byte(add.Stdout), &added); err != nil || added.Node != third || len(added.Nodes) != 4 || added.PodCIDR == "" {
			t.Fatalf("devk node add -o json: %v\n%s", err, add.Stdout)
		}
		t.Logf("devk node add took %s", add.Took.Round(time.Millisecond))
		kubectl(t, "scale", "deployment/web", "--replicas=3")
		kubectl(t, "rollout", "status", "deployment/web", "--timeout=120s")
		if n, err := cs.CoreV1().Nodes().Get(ctx, third, metav1.GetOptions{}); err != nil || !nodeReady(n) {
			t.Fatalf("node %s after node add: %v", third, err)
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + third})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("the third web replica is not on %s: %v %v", third, err, pods)
		}
		thirdNS = nsOf(t, pidFromFile(t, filepath.Join(thirdDir, "run", "kubelet.pid")))
	})
	// Killed (kill -9) at every phase of a worker's removal, each `node
	// remove` again resuming what the one before left; then one more
	// finishes it.
	step(t, "node remove, killed at each phase", func(t *testing.T) {
		var removePoints []string
		for _, p := range runnablePaths(noderemove.Phases()) {
			if !joinsteps.RunsFor(p, false, false) {
				continue // a control plane's (TestHAControlPlane kills one there) or kubeadm's
			}
			removePoints = append(removePoints, p)
			point := "node-remove/" + p
			if r := atPoint(t, c.Tree, c.Env, point, "kill", "node", "remove", third, "--name", name); !killedBySignal(r.Err, syscall.SIGKILL) {
				t.Fatalf("not killed at %s: %v\n%s", point, r.Err, r.Stderr)
			}
			if p == "drain" {
				// Marked leaving: status says so, and another add of it is
				// refused with what finishes the removal.
				if st := devk(t, "status"); !strings.Contains(st.Stdout, "leaving (`devk node remove` did not finish") {
					t.Errorf("status does not show %s leaving:\n%s", third, st.Stdout)
				}
				if r := Devk(t, c.Tree, c.Env, "node", "add", third, "--name", name); r.Err == nil || !strings.Contains(r.Stderr, "was being removed: run `devk node remove --name "+name+" "+third+"` to finish") {
					t.Errorf("node add of a leaving node: %v\n%s", r.Err, r.Stderr)
				}
			}
		}
		devk(t, "node", "remove", third)
		t.Logf("worker node remove: %d kill points, each resumed by node remove", len(removePoints))
		// Nothing runs in the removed node's mount namespace (its pods'
		// volumes went with it).
		for _, pid := range procsInMountNS(thirdNS) {
			t.Errorf("process %d still runs in %s's mount namespace after node remove", pid, third)
		}
		// The drained replica's successor has nowhere to go (one per
		// worker, two workers): two ready, none on the removed node.
		eventually(t, ctx, "web at 2 ready replicas off "+third, func() error {
			d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.ReadyReplicas != 2 {
				return fmt.Errorf("%d ready", d.Status.ReadyReplicas)
			}
			return nil
		})
		kubectl(t, "scale", "deployment/web", "--replicas=2")
		if _, err := cs.CoreV1().Nodes().Get(ctx, third, metav1.GetOptions{}); err == nil {
			t.Errorf("Node %s remains after node remove", third)
		}
		if left, _ := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + third}); left != nil && len(left.Items) > 0 {
			t.Errorf("pods of %s remain: %d, e.g. %s", third, len(left.Items), left.Items[0].Name)
		}
		nodeLeftovers(t, third, thirdDir, layout.NodeCgroupRoot(name, third))
		if cfg, _, err := layout.Open(c.Home, name); err != nil || len(cfg.Network.Nodes) != 3 {
			t.Errorf("cluster.json after node remove: %v %v", err, cfg.NodeNames())
		}
	})

	// down: nothing of any node.
	step(t, "down", func(t *testing.T) {
		devk(t, "down")
		downed()
		for _, n := range cfg.NodeNames() {
			dir := filepath.Join(paths.NodesDir(), n)
			root := layout.NodeCgroupRoot(name, n)
			if n == cfg.FirstNode().Name {
				dir, root = paths.Dir, layout.CgroupRoot(name)
			}
			nodeLeftovers(t, n, dir, root)
		}
		if _, err := os.Stat("/sys/class/net/" + cfg.Network.HostBridge); err == nil {
			t.Errorf("bridge %s remains", cfg.Network.HostBridge)
		}
		if hostAfter := hostNetState(t); hostAfter != hostBefore {
			t.Errorf("the host's network changed:\nbefore %+v\nafter  %+v", hostBefore, hostAfter)
		}
		fsBefore.check(t, "after a node add, a node remove and down of a 3-node cluster", hostFSState(t))
	})
}

// nsOf is the mount namespace of process pid (the ns/mnt link's target).
func nsOf(t *testing.T, pid int) string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// pidFromFile is the pid a supervised process's pid file names.
func pidFromFile(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(data), &pid); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// procsInMountNS are the processes in mount namespace ns (as nsOf names it).
func procsInMountNS(ns string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && got == ns {
			out = append(out, pid)
		}
	}
	return out
}

// nodeLeftovers fails the test for anything left of node: its network
// namespace, directory, cgroup root, or a process mentioning its dir.
func nodeLeftovers(t *testing.T, node, dir, cgroupRoot string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(layout.NetNSDir, layout.NetNSName(node))); err == nil {
		t.Errorf("netns of %s remains", node)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s's directory %s remains", node, dir)
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupRoot); len(m) > 0 {
		t.Errorf("%s's cgroups remain: %v", node, m)
	}
	for _, pid := range procsMentioning(dir) {
		t.Errorf("process %s of %s still runs", pid, node)
	}
}

// besideShared is a cluster called name beside the shared one (in its
// DEVK_HOME, sharing its registry): devk runs a devk command on it,
// failing the test on an error; the test's end takes the cluster down
// unless downed says it went.
func besideShared(t *testing.T, c *SharedCluster, name string) (devk func(t *testing.T, args ...string) Result, downed func()) {
	gone := false
	t.Cleanup(func() {
		if !gone {
			Devk(t, c.Tree, c.Env, "down", "--name", name)
		}
	})
	return func(t *testing.T, args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, c.Tree, c.Env, append(args, "--name", name)...)
	}, func() { gone = true }
}
