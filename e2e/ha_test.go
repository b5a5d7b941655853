//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/joinsteps"
	"github.com/devk/devk/cluster/noderemove"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
)

// TestHAControlPlane is a cluster of three control-plane nodes made by
// `devk up --control-planes 3` beside the shared cluster: every node a
// control plane with its own etcd member (3 members), every kubeconfig
// naming HAProxy on the host's bridge address; with one node's API
// server stopped the cluster still answers through HAProxy; a fourth
// control-plane node joins (killed and interrupted at each of its
// control-plane phases, then resumed) and leaves again (its etcd member
// removed); `devk swap apiserver` with a patched build swaps all three,
// one at a time, each verified by digest on its node, while a client
// sends requests through HAProxy, none of which fails; `devk down`
// leaves nothing, HAProxy included.
func TestHAControlPlane(t *testing.T) {
	c := Cluster(t)
	const name = "ha"
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	devk, downed := besideShared(t, c, name)
	hostBefore := hostNetState(t)

	// Asking the shared cluster (one control plane, no load balancer)
	// for another is refused, and changes nothing.
	step(t, "the shared cluster refuses another control plane", func(t *testing.T) {
		sharedCfg := filepath.Join(c.Home, "clusters", "devk", "cluster.json")
		before, _ := os.ReadFile(sharedCfg)
		for _, args := range [][]string{{"node", "add", "--control-plane"}, {"up", "--control-planes", "2"}} {
			r := Devk(t, c.Tree, c.Env, args...)
			if r.Err == nil || !strings.Contains(r.Stderr, "no load balancer") {
				t.Errorf("devk %s on a one-control-plane cluster: %v\n%s", strings.Join(args, " "), r.Err, r.Stderr)
			}
		}
		if after, _ := os.ReadFile(sharedCfg); string(after) != string(before) {
			t.Error("a refused control-plane join changed the shared cluster's cluster.json")
		}
	})

	// Killed and interrupted where one control plane skips: starting
	// HAProxy; the next up resumes.
	upArgs := []string{"up", "--control-planes", "3", "--name", name}
	if r := atPoint(t, c.Tree, c.Env, "up/load-balancer", "kill", upArgs...); !killedBySignal(r.Err, syscall.SIGKILL) {
		t.Fatalf("not killed at up/load-balancer: %v\n%s", r.Err, r.Stderr)
	}
	if r := atPoint(t, c.Tree, c.Env, "up/load-balancer", "int", upArgs...); exitCode(r.Err) != 130 {
		t.Fatalf("exit %d after Ctrl-C at up/load-balancer, want 130:\n%s", exitCode(r.Err), r.Stderr)
	}
	up := devk(t, "up", "--control-planes", "3", "-o", "json")
	t.Logf("devk up --control-planes 3 took %s", up.Took.Round(time.Millisecond))
	cfg, paths, err := layout.Open(c.Home, name)
	if err != nil {
		t.Fatal(err)
	}
	cps := []string{name + "-control-plane", name + "-control-plane2", name + "-control-plane3"}
	if got := cfg.ControlPlaneNames(); !slices.Equal(got, cps) {
		t.Fatalf("control-plane nodes %v, want %v", got, cps)
	}
	endpoint := "https://" + cfg.Network.HostIP + ":6443"
	if cfg.APIServerURL() != endpoint {
		t.Fatalf("clients talk to %s, want HAProxy at %s", cfg.APIServerURL(), endpoint)
	}
	// Every kubeconfig of every node names the load balancer.
	step(t, "every kubeconfig names the load balancer", func(t *testing.T) {
		kcs, _ := filepath.Glob(filepath.Join(paths.Dir, "*.conf"))
		more, _ := filepath.Glob(filepath.Join(paths.NodesDir(), "*", "*.conf"))
		for _, f := range append(kcs, more...) {
			kc, err := clientcmd.LoadFromFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, cl := range kc.Clusters {
				if cl.Server != endpoint {
					t.Errorf("%s names %s, not the load balancer %s", f, cl.Server, endpoint)
				}
			}
		}
	})
	admin := filepath.Join(paths.Dir, "admin.conf")
	cs := clientFor(t, admin)
	etcdMembers := func(t *testing.T) []string {
		t.Helper()
		return etcdMemberNames(t, ctx, cfg, paths)
	}
	step(t, "three control planes, three etcd members", func(t *testing.T) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; !nodeReady(&n) || !cp {
				t.Errorf("node %s: Ready %v, labels %v", n.Name, nodeReady(&n), n.Labels)
			}
		}
		if len(nodes.Items) != 3 {
			t.Fatalf("%d nodes, want 3", len(nodes.Items))
		}
		if got := etcdMembers(t); !slices.Equal(got, cps) {
			t.Fatalf("etcd members %v, want one per control-plane node %v", got, cps)
		}
		// The shared certificates went through kubeadm's Secret, owned by a
		// token that expires.
		if sec, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "kubeadm-certs", metav1.GetOptions{}); err != nil || len(sec.OwnerReferences) != 1 || len(sec.Data) != 8 {
			t.Errorf("Secret kubeadm-certs: %v %+v", err, sec)
		}
	})
	lbServers := func(t *testing.T) map[string]string {
		t.Helper()
		var st struct {
			LoadBalancer struct {
				Servers []struct{ Node, Status string }
			}
		}
		r := devk(t, "status", "-o", "json")
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
			t.Fatalf("devk status -o json: %v\n%s", err, r.Stdout)
		}
		out := map[string]string{}
		for _, s := range st.LoadBalancer.Servers {
			out[s.Node] = strings.Fields(s.Status)[0]
		}
		return out
	}
	waitServers := func(t *testing.T, want map[string]string) {
		t.Helper()
		var got map[string]string
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			got = lbServers(t)
			return fmt.Sprint(got) == fmt.Sprint(want), nil
		})
		if err != nil {
			t.Fatalf("HAProxy says %v, want %v", got, want)
		}
	}
	allUp := map[string]string{cps[0]: "UP", cps[1]: "UP", cps[2]: "UP"}
	waitServers(t, allUp)

	// A machine on the LAN that routes the node subnet to this one
	// reaches none of the bridge's listeners; the host and nodes do.
	step(t, "lan-neighbour", func(t *testing.T) { checkLANNeighbour(t, ctx, cfg) })

	// One API server stopped: the cluster answers through HAProxy.
	step(t, "one API server stopped", func(t *testing.T) {
		manifest := filepath.Join(paths.FirstNode().Manifests(), "kube-apiserver.yaml")
		aside := filepath.Join(t.TempDir(), "kube-apiserver.yaml")
		if err := os.Rename(manifest, aside); err != nil {
			t.Fatal(err)
		}
		waitServers(t, map[string]string{cps[0]: "DOWN", cps[1]: "UP", cps[2]: "UP"})
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ha-one-down"}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("a write with %s's API server stopped: %v", cps[0], err)
		}
		if n, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(n.Items) != 3 {
			t.Errorf("a read with %s's API server stopped: %v", cps[0], err)
		}
		if err := os.Rename(aside, manifest); err != nil {
			t.Fatal(err)
		}
		waitServers(t, allUp)
	})

	// A fourth control plane joins, killed and interrupted at each of
	// its control-plane phases first, then leaves.
	fourth := name + "-control-plane4"
	step(t, "a fourth control plane joins, killed and interrupted at each phase", func(t *testing.T) {
		for _, st := range phase.Flatten(cluster.JoinPhases()) {
			if !joinsteps.ControlPlaneOnly(st.Path) || len(st.Phase.Children) > 0 {
				continue // TestMultiNode kills a join at the others; a parent runs only its children
			}
			point := "node-add/" + st.Path
			args := []string{"node", "add", fourth, "--control-plane", "--name", name}
			if r := atPoint(t, c.Tree, c.Env, point, "kill", args...); !killedBySignal(r.Err, syscall.SIGKILL) {
				t.Fatalf("not killed at %s: %v\n%s", point, r.Err, r.Stderr)
			}
			if r := atPoint(t, c.Tree, c.Env, point, "int", args...); exitCode(r.Err) != 130 {
				t.Fatalf("exit %d after Ctrl-C at %s, want 130:\n%s", exitCode(r.Err), point, r.Stderr)
			}
		}
		add := devk(t, "node", "add", fourth, "--control-plane")
		t.Logf("devk node add --control-plane took %s", add.Took.Round(time.Millisecond))
		if got := etcdMembers(t); !slices.Equal(got, append(slices.Clone(cps), fourth)) {
			t.Errorf("etcd members after the join %v", got)
		}
		waitServers(t, map[string]string{cps[0]: "UP", cps[1]: "UP", cps[2]: "UP", fourth: "UP"})
	})

	// Its removal killed (kill -9) at every one of its phases, each
	// `node remove` again resuming what the one before left. Killed once
	// its etcd member is gone, up leaves the node alone and says what
	// finishes it (no learner added again, no etcd restarted on the
	// removed member's data), and HAProxy drops it. One more `node
	// remove` finishes it.
	step(t, "its removal, killed at each phase", func(t *testing.T) {
		removeArgs := []string{"node", "remove", fourth, "--name", name}
		var removePoints []string
		for _, p := range runnablePaths(noderemove.Phases()) {
			if joinsteps.RunsFor(p, false, true) { // not kubeadm's
				removePoints = append(removePoints, p)
			}
		}
		for _, p := range removePoints {
			point := "node-remove/" + p
			if r := atPoint(t, c.Tree, c.Env, point, "kill", removeArgs...); !killedBySignal(r.Err, syscall.SIGKILL) {
				t.Fatalf("not killed at %s: %v\n%s", point, r.Err, r.Stderr)
			}
			if p != "kubelet" {
				continue
			}
			// The etcd phase is done: the member is gone.
			if got := etcdMembers(t); !slices.Equal(got, cps) {
				t.Errorf("etcd members after a removal killed past its etcd phase: %v, want %v", got, cps)
			}
			r := MustDevkEnv(t, c.Tree, c.Env, "up", "--name", name)
			if want := "node " + fourth + " was being removed: run `devk node remove --name " + name + " " + fourth + "` to finish"; !strings.Contains(r.Stderr, want) {
				t.Errorf("up after a killed control-plane removal does not say %q:\n%s", want, r.Stderr)
			}
			if r.Took > 2*time.Minute {
				t.Errorf("up after a killed control-plane removal took %s", r.Took)
			}
			if got := etcdMembers(t); !slices.Equal(got, cps) {
				t.Errorf("etcd members after up: %v, want %v (up joined the leaving node again)", got, cps)
			}
			waitServers(t, allUp)
		}
		devk(t, "node", "remove", fourth)
		t.Logf("control-plane node remove: %d kill points, each resumed by node remove, one by up", len(removePoints))
		if got := etcdMembers(t); !slices.Equal(got, cps) {
			t.Errorf("etcd members after node remove %v, want %v", got, cps)
		}
		waitServers(t, allUp)
		nodeLeftovers(t, fourth, filepath.Join(paths.NodesDir(), fourth), layout.NodeCgroupRoot(name, fourth))
	})

	// up again on the running cluster: every node's join is resumed,
	// and nothing changes (no manifest rewritten, the same members).
	step(t, "up again changes nothing", func(t *testing.T) {
		staticPods := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
		manifestsOf := func() map[string]string {
			out := map[string]string{}
			for _, n := range cps {
				dir := paths.FirstNode().Manifests()
				if n != cfg.FirstNode().Name {
					dir = filepath.Join(paths.NodesDir(), n, "manifests")
				}
				for _, pod := range staticPods {
					data, err := os.ReadFile(filepath.Join(dir, pod+".yaml"))
					if err != nil {
						t.Fatal(err)
					}
					out[n+"/"+pod] = string(data)
				}
			}
			return out
		}
		beforeUp := manifestsOf()
		devk(t, "up")
		for k, v := range manifestsOf() {
			if beforeUp[k] != v {
				t.Errorf("up again rewrote the manifest %s", k)
			}
		}
		if got := etcdMembers(t); !slices.Equal(got, cps) {
			t.Errorf("etcd members after up again %v", got)
		}
		waitServers(t, allUp)
	})

	// A patched API server swapped on every control-plane node, one at a
	// time, under load through HAProxy.
	configGo := filepath.Join(c.Tree, "staging", "src", "k8s.io", "apiserver", "pkg", "server", "config.go")
	orig, err := os.ReadFile(configGo)
	if err != nil {
		t.Fatal(err)
	}
	// build pushes the tree's own API server or the patched one: each
	// swap below moves the cluster to the other (the second build of each
	// is the Go build cache's).
	patched := append(append([]byte{}, orig...), "\nfunc DevkE2EHA() string { return \"ha\" }\n"...)
	build := func(t *testing.T, source []byte) {
		t.Helper()
		if err := os.WriteFile(configGo, source, 0o644); err != nil {
			t.Fatal(err)
		}
		MustDevkEnv(t, c.Tree, c.Env, "build", "apiserver", "--push", "-q")
	}
	t.Cleanup(func() { os.WriteFile(configGo, orig, 0o644) })
	step(t, "a rolling swap under load", func(t *testing.T) {
		build(t, patched)
		load := startLoad(t, admin)
		sw := devk(t, "swap", "apiserver", "-o", "json")
		sent, failures := load.stop()
		var swapped haSwapReport
		if err := json.Unmarshal([]byte(sw.Stdout), &swapped); err != nil || len(swapped.StaticPods) != 3 {
			t.Fatalf("swap apiserver on 3 control planes: %v\n%s", err, sw.Stdout)
		}
		for i, p := range swapped.StaticPods {
			bad := 0
			for _, ch := range p.Checks {
				if !ch.OK {
					bad++
				}
			}
			if bad > 0 || p.Unchanged || p.RolledBack || p.Node != cps[i] {
				t.Errorf("swap %d (want on %s, in that order): %+v", i, cps[i], p)
			}
		}
		t.Logf("rolling swap of 3 API servers took %s; %d requests through HAProxy meanwhile, %d failed", sw.Took.Round(time.Millisecond), sent, len(failures))
		if sent < 100 {
			t.Errorf("the load sent only %d requests: it did not run", sent)
		}
		if len(failures) > 0 {
			t.Errorf("%d of %d requests through HAProxy failed during the rolling swap, e.g. %s", len(failures), sent, failures[0])
		}
		v := devk(t, "digest", "verify", "apiserver")
		for _, n := range cps[1:] {
			if !strings.Contains(v.Stdout, "cri@"+n) || !strings.Contains(v.Stdout, "mirror-pod@"+n) {
				t.Errorf("digest verify does not look at %s:\n%s", n, v.Stdout)
			}
		}
	})

	// The same cluster from a devk that knows only a copy of its admin
	// kubeconfig: through the cluster, by devk's node agent on each control
	// plane, rolling and verified, under load, with no failed request:
	// a client killed as its first node's agent starts swapping to the
	// tree's own API server (the agent finishes on its own; the next swap
	// reports it and rolls the rest), then verified through the cluster;
	// nothing of devk's is left on the cluster.
	step(t, "a rolling swap through the cluster", func(t *testing.T) {
		build(t, orig)
		env, copied := strangerEnv(t, c, admin)
		r := atPoint(t, c.Tree, env, "remote/swap/started", "kill", "swap", "apiserver", "--kubeconfig", copied, "--registry", agentRegistry)
		if !killedBySignal(r.Err, syscall.SIGKILL) {
			t.Fatalf("not killed at remote/swap/started: %v\n%s", r.Err, r.Stderr)
		}
		load := startLoad(t, admin)
		next := Devk(t, c.Tree, env, "swap", "apiserver", "--kubeconfig", copied, "--registry", agentRegistry, "-o", "json")
		sent, failures := load.stop()
		if next.Err != nil || !strings.Contains(next.Stderr, "the swap a killed devk began at") || !strings.Contains(next.Stderr, "finished on its own: kube-apiserver runs") {
			t.Errorf("the swap after a killed one does not say what the killed one's agent did (%v):\n%s", next.Err, next.Stderr)
		}
		var rep haSwapReport
		if err := json.Unmarshal([]byte(next.Stdout), &rep); err != nil || len(rep.StaticPods) != 3 || !rep.StaticPods[0].Unchanged || rep.StaticPods[1].Unchanged || rep.StaticPods[2].Unchanged {
			t.Errorf("after the killed swap: %v, want %s already swapped and the others swapped:\n%s", err, cps[0], next.Stdout)
		}
		if len(failures) > 0 {
			t.Errorf("%d of %d requests failed during the swap after a killed one, e.g. %s", len(failures), sent, failures[0])
		}
		v := Devk(t, c.Tree, env, "digest", "verify", "apiserver", "--kubeconfig", copied, "--registry", agentRegistry)
		for _, n := range cps {
			if v.Err != nil || !strings.Contains(v.Stdout, "cri@"+n) || !strings.Contains(v.Stdout, "mirror-pod@"+n) {
				t.Errorf("digest verify through the cluster (%v) does not agree on %s:\n%s", v.Err, n, v.Stdout)
			}
		}
		if left := devkObjectsLeft(t, ctx, cs); len(left) > 0 {
			t.Errorf("devk left on the cluster: %v", left)
		}
	})

	// The same with --load, from a home with no registry credential at
	// all: back to the patched API server (--rollback), then the tree's
	// own again: devk's agent and the API server's image reach each node
	// through the API (the loader starts the agent where the node lacks
	// it), the manifests name them as loaded, and verify agrees on every
	// node.
	step(t, "a rolling swap loaded through the API (--load)", func(t *testing.T) {
		env, copied := strangerEnv(t, c, admin)
		env = append(env, "DOCKER_CONFIG="+t.TempDir())
		remoteSwap(t, c, env, copied, admin, cps, "--rollback", "apiserver", "--load")
		rep := remoteSwap(t, c, env, copied, admin, cps, "apiserver", "--load")
		pushed := pushedDigests(t, c.Tree)["apiserver"]
		for i, p := range rep.StaticPods {
			if want := "127.0.0.1:5098/kube-apiserver@" + pushed; p.NewImage != want {
				t.Errorf("%s runs %s after --load, want %s", cps[i], p.NewImage, want)
			}
		}
		v := Devk(t, c.Tree, env, "digest", "verify", "apiserver", "--kubeconfig", copied, "--load")
		for _, n := range cps {
			if v.Err != nil || !strings.Contains(v.Stdout, "cri@"+n) || !strings.Contains(v.Stdout, "mirror-pod@"+n) {
				t.Errorf("digest verify --load (%v) does not agree on %s:\n%s%s", v.Err, n, v.Stdout, v.Stderr)
			}
		}
		if left := devkObjectsLeft(t, ctx, cs); len(left) > 0 {
			t.Errorf("devk left on the cluster: %v", left)
		}
	})

	// Killed inside a rolling swap (to the tree's own API server from
	// the registry, the tree clean again so that up builds nothing new):
	// with node 0 out of HAProxy, status says so and what to run, and up
	// puts it back, as a change; held between two nodes, a node removal,
	// up, down, a node add, certs renew and a kubelet swap on another node
	// are refused, naming it, and killed there, the next swap finishes the
	// roll. Every server is UP after each.
	step(t, "killed inside a rolling swap, refusing others while it holds the cluster", func(t *testing.T) {
		build(t, orig)
		swapArgs := []string{"swap", "apiserver", "--name", name}
		if r := atPoint(t, c.Tree, c.Env, "swap/rolling/drained", "kill", swapArgs...); !killedBySignal(r.Err, syscall.SIGKILL) {
			t.Fatalf("not killed at swap/rolling/drained: %v\n%s", r.Err, r.Stderr)
		}
		if got := lbServers(t)[cps[0]]; got != "DRAIN" {
			t.Errorf("HAProxy says %s for %s after a swap killed while it was out, want DRAIN", got, cps[0])
		}
		if st := devk(t, "status"); !strings.Contains(st.Stdout, "`devk up --name "+name+"` (or the next `devk swap`) puts it back") {
			t.Errorf("status does not say what puts the drained server back:\n%s", st.Stdout)
		}
		if r := devk(t, "up"); !strings.Contains(r.Stderr, "put back "+cps[0]+" (was DRAIN)") {
			t.Errorf("up does not report putting %s back:\n%s", cps[0], r.Stderr)
		}
		waitServers(t, allUp)
		holdAndRefuse(t, c.Tree, c.Env, "swap/rolling/next", swapArgs, true,
			[]string{"node", "remove", cps[2], "--name", name}, []string{"up", "--name", name}, []string{"down", "--name", name},
			[]string{"node", "add", "--control-plane", "--name", name}, []string{"certs", "renew", "all", "--name", name},
			[]string{"swap", "kubelet", "--node", cps[2], "--name", name})
		waitServers(t, allUp)
		devk(t, "swap", "apiserver")
		waitServers(t, allUp)
		devk(t, "digest", "verify", "apiserver")
	})

	// The scheduler of the second control plane under the debugger: the
	// one on --node alone, leader election kept (the result says what a
	// paused replica does), verified by digest; --stop puts it back byte
	// for byte.
	step(t, "debug on a second control plane", func(t *testing.T) {
		manifest := func(n string) string {
			f, err := paths.Node(cfg, n)
			if err != nil {
				t.Fatal(err)
			}
			return filepath.Join(f.Manifests(), "kube-scheduler.yaml")
		}
		before := map[string]string{}
		for _, n := range cps {
			before[n] = manifestContainer(t, manifest(n))
		}
		r := debugJSON(t, devk, "scheduler", "--node", cps[1])
		if len(r.Notes) == 0 || !strings.Contains(strings.Join(r.Notes, " "), "leader election") {
			t.Errorf("devk debug scheduler on HA says nothing of leader election: %+v", r)
		}
		debugged := manifestContainer(t, manifest(cps[1]))
		if !strings.Contains(debugged, "dlv") || strings.Contains(debugged, "--leader-elect=false") {
			t.Errorf("the scheduler on %s: want dlv, leader election kept:\n%s", cps[1], debugged)
		}
		for _, n := range []string{cps[0], cps[2]} {
			if got := manifestContainer(t, manifest(n)); got != before[n] {
				t.Errorf("devk debug --node %s changed the scheduler on %s", cps[1], n)
			}
		}
		if n, _, err := cfg.FindNode(cps[1]); err != nil || !strings.HasPrefix(r.Address, n.IP+":") {
			t.Errorf("the debugger listens at %s, not on %s's address", r.Address, cps[1])
		}
		devk(t, "digest", "verify", "scheduler")
		devk(t, "debug", "--stop", "scheduler", "--node", cps[1])
		if got := manifestContainer(t, manifest(cps[1])); got != before[cps[1]] {
			t.Errorf("after --stop the scheduler on %s is\n%s\nwant\n%s", cps[1], got, before[cps[1]])
		}
		devk(t, "digest", "verify", "scheduler")
	})

	// Every control-plane node's certificates checked and renewed,
	// rolling, under load through HAProxy (renew_test.go).
	step(t, "certs", func(t *testing.T) { haCerts(t, c, name, cps, admin) })

	// down: nothing of any node, nor HAProxy.
	step(t, "down", func(t *testing.T) {
		devk(t, "down")
		downed()
		for _, n := range cfg.NodeNames() {
			dir, root := filepath.Join(paths.NodesDir(), n), layout.NodeCgroupRoot(name, n)
			if n == cfg.FirstNode().Name {
				dir, root = paths.Dir, layout.CgroupRoot(name)
			}
			nodeLeftovers(t, n, dir, root)
		}
		if hostAfter := hostNetState(t); hostAfter != hostBefore {
			t.Errorf("the host's network changed:\nbefore %+v\nafter  %+v", hostBefore, hostAfter)
		}
	})

	// The shared cluster running what the tree builds again (built
	// above), for the tests after this one.
	MustDevkEnv(t, c.Tree, c.Env, "swap")
}

// haSwapReport is what the HA test reads of `devk swap -o json`.
type haSwapReport struct {
	Via        string
	StaticPods []struct {
		Pod, Node             string
		NewImage              string
		Unchanged, RolledBack bool
		Checks                []struct {
			Name string
			OK   bool
		}
	}
}

// etcdMemberNames are the cluster's etcd members, by name, sorted, read
// from node 0's member with the API server's client certificate.
func etcdMemberNames(t *testing.T, ctx context.Context, cfg layout.Config, paths layout.ClusterFiles) []string {
	t.Helper()
	pkiDir := paths.FirstNode().PKI()
	pair, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "apiserver-etcd-client.crt"), filepath.Join(pkiDir, "apiserver-etcd-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(pkiDir, "etcd", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cfg.NodeEtcdURL(cfg.FirstNode())}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.MemberList(mctx)
	if err != nil {
		t.Fatalf("etcd member list: %v", err)
	}
	var out []string
	for _, m := range resp.Members {
		if m.IsLearner {
			out = append(out, m.Name+" (learner)")
			continue
		}
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// load is a client sending requests through the load balancer, 50 a
// second, as a controller would (one clientset, its connection reused).
type load struct {
	cancel   context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex
	sent     int
	failures []string
}

func startLoad(t *testing.T, kubeconfig string) *load {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst, rc.Timeout = 1000, 1000, 10*time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var wg sync.WaitGroup
		for {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := cs.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-root-ca.crt", metav1.GetOptions{})
				l.mu.Lock()
				defer l.mu.Unlock()
				l.sent++
				if err != nil {
					l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
				}
			}()
		}
	}()
	return l
}

// stop ends the load and says how many requests it sent and which failed.
func (l *load) stop() (int, []string) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.failures
}
