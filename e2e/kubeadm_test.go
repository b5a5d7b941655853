//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/swap"
)

// kubeadmHostPaths are the host's paths kubeadm writes on a machine it
// bootstraps, which a kubeadm cluster of devk's must leave as they were.
var kubeadmHostPaths = []string{"/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd"}

// hostPathState is whether each path exists, and its entries when it
// does: what "unchanged" compares.
func hostPathState(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range kubeadmHostPaths {
		entries, err := os.ReadDir(p)
		switch {
		case os.IsNotExist(err):
			out[p] = "absent"
		case err != nil:
			t.Fatal(err)
		default:
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			out[p] = strings.Join(names, ",")
		}
	}
	return out
}

// TestKubeadmBootstrapper is `devk up --bootstrapper kubeadm
// --control-planes 3 --nodes 4` beside the shared cluster, first refused
// while the tree's kubeadm does not build, then with a kubeadm patched
// to say something new in its init output, which up shows: the tree's
// kubeadm init on node 0, kubeadm join --control-plane (after
// upload-certs) on two more behind HAProxy and kubeadm join on the
// worker, inside the nodes; the first up is killed while kubeadm init
// runs, and the next finishes it. Every node is Ready, etcd has 3
// members; kube-proxy and CoreDNS are kubeadm's (its ConfigMaps
// kubeadm-config and kubelet-config are there, kube-proxy runs from the
// config file kubeadm's addon phase writes); a workload behind a Service
// answers by name from another pod; the node's kubeadm sees its cluster
// (`devk node exec … kubeadm config images list`); `devk up` again
// changes nothing; devk's certificates are kubeadm's, before and after
// devk renews them, and the same through the cluster (devk's node agent
// in each control plane, from a devk with only a copy of the
// kubeadm cluster's kubeconfig); a patched apiserver rolls across the three control
// planes under load through HAProxy with no failed request, verified by
// digest (also through the cluster), and --rollback puts kubeadm's manifests back byte for byte (but
// devk's written-at stamp); devk run and devk debug run kubeadm's
// scheduler in the foreground and under Delve and put it back; a
// node add killed in kubeadm join joins on the next; export logs has
// every node's logs and kubeadm's kubelet config and flags; node remove
// of that worker and of a control plane runs kubeadm reset (etcd down to
// two members); and the host's /etc/kubernetes, /var/lib/kubelet and /var/lib/etcd are
// as they were, before and after `devk down`.
func TestKubeadmBootstrapper(t *testing.T) {
	c := Cluster(t)
	const name = "kad"
	before := hostPathState(t)
	devk, downed := besideShared(t, c, name)
	// A kubeadm contributor's tree: a kubeadm that does not build is
	// refused before anything is made; one whose init says something
	// new is built by up and says it.
	initGo := kubeadmInitSource(t, c.Tree)
	step(t, "a tree whose kubeadm does not build", func(t *testing.T) {
		appendTo(t, initGo, "\nfunc devkE2EBroken( {\n") // the tree's again at the step's end
		r := Devk(t, c.Tree, c.Env, "up", "--bootstrapper", "kubeadm", "--name", "kbroken")
		if r.Err == nil || !strings.Contains(r.Stderr, "the tree's kubeadm does not build") || !strings.Contains(r.Stderr, filepath.Base(initGo)) {
			t.Errorf("up with a kubeadm that does not build: %v, want a preflight problem naming the file\n%s", r.Err, r.Stderr)
		}
		noNetNS(t, "kbroken")
		Devk(t, c.Tree, c.Env, "down", "--name", "kbroken")
	})
	unpatch := replaceIn(t, initGo, kubeadmInitDone, kubeadmInitDone+kubeadmPatchedMark)
	// Killed (kill -9) while kubeadm init waits for the control plane:
	// kubeadm goes on alone; the next up stops it, resets the node and
	// runs init again.
	upArgs := []string{"up", "--bootstrapper", "kubeadm", "--control-planes", "3", "--nodes", "4", "--name", name}
	if r := atPoint(t, c.Tree, c.Env, "kubeadm/init/wait-control-plane", "kill", upArgs...); !killedBySignal(r.Err, syscall.SIGKILL) {
		t.Fatalf("not killed in kubeadm init: %v\n%s", r.Err, r.Stderr)
	}
	up := devk(t, "up", "--control-planes", "3", "--nodes", "4", "-v", "1")
	t.Logf("devk up --bootstrapper kubeadm --control-planes 3 --nodes 4 took %s", up.Took.Round(time.Second))
	if !strings.Contains(up.Stderr, "kubeadm: [init] Using Kubernetes version") || !strings.Contains(up.Stderr, "kubeadm: This node has joined the cluster") {
		t.Errorf("devk up -v 1 shows no kubeadm init and join output:\n%s", up.Stderr)
	}
	if !strings.Contains(up.Stderr, "kubeadm: "+kubeadmInitDone+kubeadmPatchedMark) {
		t.Errorf("devk up -v 1 does not show the patched kubeadm's init output %q:\n%s", kubeadmInitDone+kubeadmPatchedMark, up.Stderr)
	}
	kubeconfig := filepath.Join(c.Home, "clusters", name, "admin.conf")
	kubectl := func(t *testing.T, args ...string) string {
		t.Helper()
		r := run(t, c.Tree, nil, c.KubectlPath(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		if r.Err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
		}
		return r.Stdout
	}
	cs := clientFor(t, kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	step(t, "kubeadm's cluster", func(t *testing.T) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 4 {
			t.Fatalf("nodes: %v %v", err, nodes)
		}
		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				t.Errorf("node %s is not Ready", n.Name)
			}
		}
		for _, cm := range []string{"kubeadm-config", "kubelet-config", "kube-proxy", "coredns"} {
			if _, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, cm, metav1.GetOptions{}); err != nil {
				t.Errorf("kubeadm's ConfigMap kube-system/%s: %v", cm, err)
			}
		}
		if _, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "devk-config", metav1.GetOptions{}); err == nil {
			t.Error("devk's own upload-config ran on a kubeadm cluster")
		}
		ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil || !strings.Contains(strings.Join(ds.Spec.Template.Spec.Containers[0].Command, " "), "--config=/var/lib/kube-proxy/config.conf") {
			t.Errorf("kube-proxy is not kubeadm's: %v %v", err, ds)
		}
		// devk status reads kubeadm's control plane as its own: every
		// static pod healthy (the controller-manager and scheduler on the
		// node's loopback, where kubeadm binds them).
		var st struct {
			Components []struct {
				Name    string
				Healthy bool
			}
		}
		if r := devk(t, "status", "-o", "json"); json.Unmarshal([]byte(r.Stdout), &st) != nil || len(st.Components) != 4 {
			t.Errorf("devk status -o json on a kubeadm cluster:\n%s", r.Stdout)
		}
		for _, comp := range st.Components {
			if !comp.Healthy {
				t.Errorf("devk status: %s is not healthy on a kubeadm cluster", comp.Name)
			}
		}
		kubectl(t, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=180s")
		kubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=180s")
	})

	cfg, paths, err := layout.Open(c.Home, name)
	if err != nil {
		t.Fatal(err)
	}
	cps := cfg.ControlPlaneNames()
	apiManifest := func(t *testing.T, node string) string {
		t.Helper()
		nf, err := paths.Node(cfg, node)
		if err != nil {
			t.Fatal(err)
		}
		return nf.ManifestPath("kube-apiserver")
	}
	step(t, "three control planes behind HAProxy", func(t *testing.T) {
		if want := []string{name + "-control-plane", name + "-control-plane2", name + "-control-plane3"}; !slices.Equal(cps, want) {
			t.Fatalf("control-plane nodes %v, want %v", cps, want)
		}
		if got := etcdMemberNames(t, ctx, cfg, paths); !slices.Equal(got, cps) {
			t.Errorf("etcd members %v, want %v", got, cps)
		}
		if endpoint := "https://" + cfg.Network.HostIP + ":6443"; cfg.APIServerURL() != endpoint {
			t.Errorf("clients talk to %s, want HAProxy at %s", cfg.APIServerURL(), endpoint)
		}
		r := devk(t, "status")
		for _, n := range cps {
			if !strings.Contains(r.Stdout, n+" UP") {
				t.Errorf("devk status: HAProxy does not have %s UP:\n%s", n, r.Stdout)
			}
		}
	})

	webAndClient(t, ctx, c, kubeconfig, agnhost(t, c), "ClusterIP")

	step(t, "the node's own kubeadm", func(t *testing.T) {
		r := MustDevkEnv(t, c.Tree, c.Env, "node", "exec", "--name", name, name+"-control-plane", "--", "kubeadm", "config", "images", "list", "--config", "/etc/kubernetes/kubeadm.yaml")
		if !strings.Contains(r.Stdout, "/kube-apiserver:") || !strings.Contains(r.Stdout, "/etcd:") {
			t.Errorf("kubeadm config images list in the node:\n%s", r.Stdout)
		}
		if _, err := os.Stat(filepath.Join(c.Home, "clusters", name, "manifests", "kube-apiserver.yaml")); err != nil {
			t.Errorf("kubeadm's manifests are not the node's files: %v", err)
		}
	})

	step(t, "up again changes nothing", func(t *testing.T) {
		r := devk(t, "up", "-o", "json")
		var res struct {
			Changed bool
			Phases  []struct {
				Phase, Detail string
				Changed       bool
			}
		}
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || res.Changed {
			var changed []string
			for _, p := range res.Phases {
				if p.Changed {
					changed = append(changed, p.Phase)
				}
			}
			t.Errorf("devk up on a running kubeadm cluster changed something (%v): phases %v\n%s", err, changed, r.Stderr)
		}
	})
	// The tree is its own again (the cluster's images were built from
	// it patched: their version ends in -dirty; a later up would build
	// them again).
	unpatch()

	// Bad input is refused before anything is made or changed: the
	// other bootstrapper on an existing cluster (either way), a
	// kubeadmConfigPatches entry that matches no document of kubeadm's
	// config, and one that makes a config kubeadm rejects.
	step(t, "bad input", func(t *testing.T) {
		sharedJSON := filepath.Join(c.Home, "clusters", "devk", "cluster.json")
		kadJSON := filepath.Join(c.Home, "clusters", name, "cluster.json")
		sharedBefore, _ := os.ReadFile(sharedJSON)
		kadBefore, _ := os.ReadFile(kadJSON)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"up", "--bootstrapper", "kubeadm"}, "--bootstrapper kubeadm, but devk made cluster devk"},
			{[]string{"up", "--bootstrapper", "devk", "--name", name}, "--bootstrapper devk, but kubeadm made cluster " + name},
		} {
			if r := Devk(t, c.Tree, c.Env, tc.args...); r.Err == nil || !strings.Contains(r.Stderr, tc.want) {
				t.Errorf("devk %s: %v, want an error saying %q:\n%s", strings.Join(tc.args, " "), r.Err, tc.want, r.Stderr)
			}
		}
		if now, _ := os.ReadFile(sharedJSON); !bytes.Equal(now, sharedBefore) {
			t.Error("a refused --bootstrapper kubeadm changed the shared cluster's cluster.json")
		}
		if now, _ := os.ReadFile(kadJSON); !bytes.Equal(now, kadBefore) {
			t.Error("a refused --bootstrapper devk changed the kubeadm cluster's cluster.json")
		}
		file := filepath.Join(t.TempDir(), "devk.yaml")
		if err := os.WriteFile(file, []byte("apiVersion: devk.dev/v1alpha1\nkind: Cluster\nkubeadmConfigPatches:\n- |\n  kind: NoSuchConfiguration\n  x: 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := Devk(t, c.Tree, c.Env, "up", "--bootstrapper", "kubeadm", "--name", "kbad", "--config", file)
		if r.Err == nil || !strings.Contains(r.Stderr, "kubeadmConfigPatches[0]: matches no document") {
			t.Errorf("a patch that matches no document: %v\n%s", r.Err, r.Stderr)
		}
		noNetNS(t, "kbad")
		Devk(t, c.Tree, c.Env, "down", "--name", "kbad")
		// A config that applies, which kubeadm itself rejects: kubeadm's
		// message and the documents it was given.
		if err := os.WriteFile(file, []byte("apiVersion: devk.dev/v1alpha1\nkind: Cluster\nkubeadmConfigPatches:\n- |\n  kind: ClusterConfiguration\n  networking:\n    serviceSubnet: not-a-cidr\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r = Devk(t, c.Tree, c.Env, "up", "--bootstrapper", "kubeadm", "--name", "kbad", "--config", file)
		for _, want := range []string{"the tree's kubeadm rejects the config devk made for it", "networking.serviceSubnet", "kind: ClusterConfiguration", "serviceSubnet: not-a-cidr"} {
			if r.Err == nil || !strings.Contains(r.Stderr, want) {
				t.Errorf("a config kubeadm rejects: %v, want an error saying %q\n%s", r.Err, want, r.Stderr)
			}
		}
		noNetNS(t, "kbad")
		Devk(t, c.Tree, c.Env, "down", "--name", "kbad")
	})

	// devk's certificates are kubeadm's: the same list and dates as the
	// node's kubeadm certs check-expiration, before and after devk renews
	// them all, and kubeadm still accepts the cluster (upgrade plan).
	step(t, "certs as kubeadm sees them", func(t *testing.T) {
		before := sameCertsAsKubeadm(t, c, name)
		var renewed renewReport
		if r := devk(t, "certs", "renew", "all", "-o", "json"); json.Unmarshal([]byte(r.Stdout), &renewed) != nil {
			t.Fatalf("certs renew all -o json:\n%s", r.Stdout)
		}
		// kubeadm's manifests name the files inside the node: the pods
		// that use them are found, restarted, and serve the new ones.
		for _, n := range cps {
			for _, pod := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler"} {
				if !slices.Contains(renewed.pods(), n+"/"+pod) {
					t.Errorf("renew all did not restart %s on %s (restarted: %v)", pod, n, renewed.pods())
				}
			}
		}
		after := sameCertsAsKubeadm(t, c, name)
		for cert, was := range before {
			if !after[cert].After(was) {
				t.Errorf("kubeadm certs check-expiration: %s expires %s after devk certs renew all, was %s", cert, after[cert], was)
			}
		}
		kubeadmAcceptsEventually(t, ctx, c, name, "after the renewal")
	})

	// The same certificates through the cluster, from a devk with only a
	// copy of its kubeconfig: devk's node agent on each control plane
	// reads kubeadm's own paths inside the node.
	// devk etcd on kubeadm's etcd (its client URL on each node's
	// loopback, its certificates inside the node): a key, and the exact
	// change of a kubectl command, only the configmap's key among the
	// default namespace's configmaps.
	step(t, "etcd on kubeadm's etcd", func(t *testing.T) {
		if r := devk(t, "etcd", "get", "svc/default/kubernetes"); !strings.Contains(r.Stdout, "name: kubernetes") {
			t.Errorf("etcd get svc/default/kubernetes:\n%s", r.Stdout)
		}
		r := MustDevkEnv(t, c.Tree, c.Env, "etcd", "diff", "cm/default", "--name", name, "-o", "json", "--", c.KubectlPath(), "--kubeconfig", kubeconfig, "create", "configmap", "devk-e2e-kad", "--from-literal=a=b")
		var d etcdDiff
		if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil || len(d.Changes) != 1 || d.Changes[0].Key != "/registry/configmaps/default/devk-e2e-kad" || d.Changes[0].Type != "ADDED" {
			t.Errorf("etcd diff cm -- kubectl create configmap: %v\n%s%s", err, r.Stdout, r.Stderr)
		}
	})

	step(t, "certs through the cluster", func(t *testing.T) {
		local := parseExpiration(t, devk(t, "certs", "check-expiration", "-o", "json"))
		got := certsThroughCluster(t, c, kubeconfig, local)
		if len(got.Nodes) != len(cps) {
			t.Errorf("through the cluster: %d control-plane nodes, want %d", len(got.Nodes), len(cps))
		}
		for _, n := range got.Nodes {
			if n.Files.PKIDir != "/etc/kubernetes/pki" {
				t.Errorf("node %s's certificates through the cluster are at %s, want kubeadm's /etc/kubernetes/pki", n.Name, n.Files.PKIDir)
			}
		}
	})

	// A patched apiserver swapped into kubeadm's manifest, verified by
	// digest; kubeadm still reads its cluster; --rollback through the
	// cluster puts kubeadm's manifest back byte for byte.
	step(t, "a rolling swap on kubeadm's manifests", func(t *testing.T) {
		was, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		manifests := map[string][]byte{}
		for _, n := range cps {
			data, err := os.ReadFile(apiManifest(t, n))
			if err != nil {
				t.Fatal(err)
			}
			manifests[n] = data
		}
		configGo := filepath.Join(c.Tree, "staging", "src", "k8s.io", "apiserver", "pkg", "server", "config.go")
		orig, err := os.ReadFile(configGo)
		if err != nil {
			t.Fatal(err)
		}
		appendTo(t, configGo, "\n// DevkE2EKubeadmSwap proves the swapped apiserver is this build.\nfunc DevkE2EKubeadmSwap() string { return \"swapped\" }\n")
		MustDevkEnv(t, c.Tree, c.Env, "build", "apiserver", "--push", "-q")
		load := startLoad(t, kubeconfig)
		rep := swapJSON(t, devk, "apiserver", 3, 0)
		sent, failures := load.stop()
		for i, sp := range rep.StaticPods {
			for _, check := range sp.Checks {
				if !check.OK {
					t.Errorf("%s: check %s failed: want %s, got %s", cps[i], check.Check, check.Want, check.Got)
				}
			}
			if got := manifestImage(t, apiManifest(t, cps[i])); got != sp.NewImage || !strings.Contains(got, "@sha256:") {
				t.Errorf("%s: kubeadm's manifest names %s after the swap, want %s", cps[i], got, sp.NewImage)
			}
		}
		t.Logf("%d requests through HAProxy during the rolling swap, %d failed", sent, len(failures))
		if sent < 100 {
			t.Errorf("the load sent only %d requests: it did not run", sent)
		}
		if len(failures) > 0 {
			t.Errorf("%d of %d requests through HAProxy failed during the rolling swap, e.g. %s", len(failures), sent, failures[0])
		}
		devk(t, "digest", "verify", "apiserver")
		// The same views through the cluster, by devk's node agent in each
		// control plane: kubeadm's manifests and the node's containerd.
		env, copied := strangerEnv(t, c, kubeconfig)
		r := Devk(t, c.Tree, env, "digest", "verify", "apiserver", "--kubeconfig", copied, "--registry", agentRegistry, "-o", "json")
		var reps []struct {
			Match        bool
			Observations []struct{ Source, Digest string }
		}
		if err := json.Unmarshal([]byte(r.Stdout), &reps); err != nil || len(reps) != 1 || !reps[0].Match {
			t.Errorf("digest verify apiserver through the cluster (%v): %v\n%s%s", r.Err, err, r.Stdout, r.Stderr)
		} else {
			seen := map[string]string{}
			for _, o := range reps[0].Observations {
				seen[o.Source] = o.Digest
			}
			swapped := seen["pushed"]
			for _, n := range cps {
				for _, v := range []string{"manifest@", "cri@", "mirror-pod@"} {
					if seen[v+n] == "" || seen[v+n] != swapped || !strings.Contains(manifestImage(t, apiManifest(t, n)), swapped) {
						t.Errorf("digest verify through the cluster: %s%s is %q, want the swapped %s in its manifest", v, n, seen[v+n], swapped)
					}
				}
			}
		}
		kubeadmInNode(t, c, name, "upgrade", "plan", KubeVersion)
		kubeadmInNode(t, c, name, "config", "images", "list", "--config", "/etc/kubernetes/kubeadm.yaml")
		// The rollback through the cluster, as a kubeadm user with only
		// the admin kubeconfig would: devk's node agent in each control
		// plane, on kubeadm's /etc/kubernetes, under load.
		remoteSwap(t, c, env, copied, kubeconfig, cps, "--rollback", "apiserver")
		if left := devkObjectsLeft(t, ctx, cs); len(left) > 0 {
			t.Errorf("devk left on the cluster: %v", left)
		}
		// Byte for byte but for the stamp devk writes on every manifest
		// it writes (staticpod.WrittenAnnotation: the kubelet must see a
		// new pod, not the one it just terminated).
		stamp := regexp.MustCompile(`(?m)^ +` + regexp.QuoteMeta(staticpod.WrittenAnnotation) + `: .*\n`)
		for _, n := range cps {
			if now, _ := os.ReadFile(apiManifest(t, n)); !bytes.Equal(stamp.ReplaceAll(now, nil), manifests[n]) {
				t.Errorf("%s: after --rollback kube-apiserver.yaml is not kubeadm's:\n%s\nwas:\n%s", n, now, manifests[n])
			}
		}
		// Serving again, the version it had before the swap (--rollback
		// verified the digests; the images up built from the tree with
		// the patched kubeadm say -dirty, as the swapped one does).
		eventually(t, ctx, "kubeadm's apiserver serving again", func() error {
			v, err := cs.Discovery().ServerVersion()
			if err != nil || v.String() != was.String() || v.BuildDate != was.BuildDate {
				return fmt.Errorf("%v %v, want %v: %w", v, err, was, errNotYet)
			}
			return nil
		})
		// The tree's own apiserver is the last pushed again, for the
		// tests after this one that swap the shared cluster.
		if err := os.WriteFile(configGo, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		MustDevkEnv(t, c.Tree, c.Env, "build", "apiserver", "--push", "-q")
	})

	// devk run and devk debug on kubeadm's scheduler (node 0's): its
	// manifest names kubeadm's paths (/etc/kubernetes/scheduler.conf),
	// which the foreground scheduler finds in the node's mount namespace;
	// Ctrl-C puts kubeadm's pod back, verified by digest; under Delve
	// waiting before main, the test's own client continues it; --stop
	// puts kubeadm's container back byte for byte.
	step(t, "run and debug kubeadm's scheduler", func(t *testing.T) {
		nf, err := paths.Node(cfg, cps[0])
		if err != nil {
			t.Fatal(err)
		}
		m := swap.ManifestFor(filepath.Dir(nf.ManifestPath("kube-scheduler")), "kube-scheduler")
		image := manifestImage(t, m.Path)
		b := startRun(t, c, "scheduler", "--name", name, "-o", "json")
		eventually(t, ctx, "devk run to start kubeadm's scheduler", func() error {
			if b.ended() {
				t.Fatalf("devk run ended early (%v):\n%s", b.err, b.stderr.String())
			}
			j, err := m.InProgress()
			if err != nil || j == nil || j.Run == nil || !j.Run.Process.Running() {
				return fmt.Errorf("no journal of a running scheduler yet (%v)", err)
			}
			return nil
		})
		if err := b.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if err := b.wait(t); err != nil {
			t.Fatalf("devk run after Ctrl-C: %v\n%s", err, b.stderr.String())
		}
		var r runResult
		if err := json.Unmarshal([]byte(b.stdout.String()), &r); err != nil || r.Exit == nil || !r.Exit.Stopped || r.PutBack == nil || len(r.PutBack.Checks) == 0 {
			t.Fatalf("devk run -o json on kubeadm's scheduler (%v): %s\n%s", err, b.stdout.String(), b.stderr.String())
		}
		for _, check := range r.PutBack.Checks {
			if !check.OK {
				t.Errorf("after devk run, check %s: want %s, got %s", check.Check, check.Want, check.Got)
			}
		}
		if got := manifestImage(t, m.Path); got != image {
			t.Errorf("after devk run kubeadm's manifest names %s, want %s", got, image)
		}
		devk(t, "digest", "verify", "scheduler")

		before := manifestContainer(t, m.Path)
		d := debugJSON(t, devk, "scheduler", "--stop-at-start")
		if !d.WaitsAtStart || d.Address == "" {
			t.Fatalf("devk debug scheduler --stop-at-start on kubeadm's: %+v", d)
		}
		dlvSession(t, ctx, delveClient(t), d.Address, d.InitFile, "quit -c\n")
		eventually(t, ctx, "digest verify of kubeadm's scheduler under the debugger", func() error {
			if r := Devk(t, c.Tree, c.Env, "digest", "verify", "scheduler", "--name", name); r.Err != nil {
				return fmt.Errorf("%v\n%s", r.Err, r.Stdout)
			}
			return nil
		})
		devk(t, "debug", "--stop", "scheduler")
		if got := manifestContainer(t, m.Path); got != before {
			t.Errorf("after debug --stop kubeadm's scheduler container is\n%s\nwant\n%s", got, before)
		}
	})

	// A worker's join killed while kubeadm join starts the kubelet, then
	// node add again: the node joins.
	worker := name + "-worker2"
	step(t, "node add killed in kubeadm join", func(t *testing.T) {
		if r := atPoint(t, c.Tree, c.Env, "kubeadm/join/kubelet-start", "kill", "node", "add", worker, "--name", name); !killedBySignal(r.Err, syscall.SIGKILL) {
			t.Fatalf("not killed in kubeadm join: %v\n%s", r.Err, r.Stderr)
		}
		devk(t, "node", "add", worker)
		eventually(t, ctx, "node "+worker+" Ready", func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{})
			if err != nil || !nodeReady(n) {
				return fmt.Errorf("%v", err)
			}
			return nil
		})
	})

	// Every node's logs, the kubelet's config and flags as kubeadm wrote
	// them, nothing missing.
	step(t, "export logs", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "logs")
		var res struct{ Missing []string }
		if r := devk(t, "export", "logs", dir, "-o", "json"); json.Unmarshal([]byte(r.Stdout), &res) != nil || len(res.Missing) > 0 {
			t.Errorf("export logs of a kubeadm cluster: missing %q\n%s", res.Missing, r.Stdout)
		}
		for _, n := range cfg.NodeNames() {
			for _, f := range []string{"kubelet.log", "kubelet-config.yaml", "kubeadm-flags.env"} {
				if fi, err := os.Stat(filepath.Join(dir, n, f)); err != nil || fi.Size() == 0 {
					t.Errorf("export logs: %s/%s: %v", n, f, err)
				}
			}
		}
		for _, n := range cps {
			if m, _ := filepath.Glob(filepath.Join(dir, n, "containers", "kube-system_kube-apiserver-"+n+"_kube-apiserver_*.log")); len(m) == 0 {
				t.Errorf("export logs: no kube-apiserver log of %s", n)
			}
		}
	})

	// node remove as a kubeadm user removes a node: kubeadm reset in it
	// (a control plane's etcd member goes), then devk's teardown.
	step(t, "node remove runs kubeadm reset", func(t *testing.T) {
		for _, n := range []string{worker, cps[2]} {
			var res struct {
				Phases []struct {
					Phase   string
					Changed bool
				}
			}
			r := devk(t, "node", "remove", n, "-o", "json")
			if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
				t.Fatalf("node remove -o json: %v\n%s", err, r.Stdout)
			}
			reset := false
			for _, p := range res.Phases {
				reset = reset || (p.Phase == "kubeadm-reset" && p.Changed)
				if p.Phase == "etcd" {
					t.Logf("%s: node remove's etcd phase after kubeadm reset changed something: %v", n, p.Changed)
				}
			}
			if !reset {
				t.Errorf("node remove %s ran no kubeadm reset: %+v", n, res.Phases)
			}
			if _, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err == nil {
				t.Errorf("node %s is still there after node remove", n)
			}
		}
		if got := etcdMemberNames(t, ctx, cfg, paths); !slices.Equal(got, cps[:2]) {
			t.Errorf("etcd members after a control plane's removal: %v, want %v", got, cps[:2])
		}
		if r := devk(t, "status"); strings.Contains(r.Stdout, cps[2]) {
			t.Errorf("devk status still shows %s after its removal:\n%s", cps[2], r.Stdout)
		}
		kubeadmAcceptsEventually(t, ctx, c, name, "after the removals")
	})

	step(t, "the host's kubeadm paths", func(t *testing.T) {
		if now := hostPathState(t); fmt.Sprint(now) != fmt.Sprint(before) {
			t.Errorf("the host's kubeadm paths changed while up: %v, were %v", now, before)
		}
		devk(t, "down")
		downed()
		if now := hostPathState(t); fmt.Sprint(now) != fmt.Sprint(before) {
			t.Errorf("the host's kubeadm paths changed by down: %v, were %v", now, before)
		}
		if _, err := os.Stat(filepath.Join(c.Home, "clusters", name)); !os.IsNotExist(err) {
			t.Errorf("the cluster's directory after down: %v", err)
		}
	})
}

// kubeadmInitDone is the line kubeadm init prints when it is done, and
// kubeadmPatchedMark what the test's patch adds to it.
const (
	kubeadmInitDone    = "Your Kubernetes control-plane has initialized successfully!"
	kubeadmPatchedMark = " (devk e2e: a patched kubeadm)"
)

// kubeadmInitSource is the file of the tree's kubeadm that prints
// kubeadmInitDone.
func kubeadmInitSource(t *testing.T, tree string) string {
	t.Helper()
	found := ""
	filepath.WalkDir(filepath.Join(tree, "cmd", "kubeadm", "app", "cmd"), func(f string, d fs.DirEntry, err error) error {
		if err != nil || found != "" || d.IsDir() || !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
			return err
		}
		if data, err := os.ReadFile(f); err == nil && bytes.Contains(data, []byte(kubeadmInitDone)) {
			found = f // cmd/kubeadm/app/cmd/phases/init/showjoincommand.go in v1.34
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no file of the tree's kubeadm prints %q", kubeadmInitDone)
	}
	return found
}

// replaceIn replaces old by new in path until the returned func or the
// test's cleanup puts the file back as it was (what a killed run left is
// undone first).
func replaceIn(t *testing.T, path, old, new string) (restore func()) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	orig := bytes.ReplaceAll(data, []byte(new), []byte(old))
	if !bytes.Contains(orig, []byte(old)) {
		t.Fatalf("%s does not hold %q", path, old)
	}
	restore = func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(restore)
	if err := os.WriteFile(path, bytes.Replace(orig, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return restore
}

// noNetNS checks that cluster name has no network namespace: a refused
// up made none.
func noNetNS(t *testing.T, name string) {
	t.Helper()
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "devk-"+name+"-") {
		t.Errorf("a refused up of cluster %s made network namespaces:\n%s", name, out)
	}
}

// kubeadmAcceptsEventually waits until the node's kubeadm accepts the
// cluster (`kubeadm upgrade plan`) after what changed it: its health
// check runs a Job and gives it 15 s, which a restarted or newly elected
// scheduler may need first.
func kubeadmAcceptsEventually(t *testing.T, ctx context.Context, c *SharedCluster, name, after string) {
	t.Helper()
	eventually(t, ctx, "kubeadm upgrade plan "+after, func() error {
		r := Devk(t, c.Tree, c.Env, "node", "exec", "--name", name, name+"-control-plane", "--", "kubeadm", "upgrade", "plan", KubeVersion)
		if r.Err != nil {
			return fmt.Errorf("%v\n%s", r.Err, r.Stderr)
		}
		return nil
	})
}

// kubeadmInNode runs the tree's kubeadm in cluster name's first
// control-plane node, and returns its stdout.
func kubeadmInNode(t *testing.T, c *SharedCluster, name string, args ...string) string {
	t.Helper()
	r := MustDevkEnv(t, c.Tree, c.Env, append([]string{"node", "exec", "--name", name, name + "-control-plane", "--", "kubeadm"}, args...)...)
	return r.Stdout
}

// sameCertsAsKubeadm checks that devk certs check-expiration lists the
// certificates kubeadm certs check-expiration lists in the node, with the
// same expiry, and returns them by kubeadm's name.
func sameCertsAsKubeadm(t *testing.T, c *SharedCluster, name string) map[string]time.Time {
	t.Helper()
	var theirs struct {
		Certificates []struct {
			Name           string    `json:"name"`
			ExpirationDate time.Time `json:"expirationDate"`
			Missing        bool      `json:"missing"`
		} `json:"certificates"`
	}
	out := kubeadmInNode(t, c, name, "certs", "check-expiration", "-o", "json")
	if err := json.Unmarshal([]byte(out), &theirs); err != nil || len(theirs.Certificates) == 0 {
		t.Fatalf("kubeadm certs check-expiration -o json: %v\n%s", err, out)
	}
	var ours expirationReport
	r := MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "--name", name, "--node", name+"-control-plane", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &ours); err != nil {
		t.Fatal(err)
	}
	devkDates := map[string]time.Time{}
	for _, crt := range ours.Certificates {
		devkDates[crt.Name] = crt.NotAfter
	}
	kubeadmDates := map[string]time.Time{}
	for _, crt := range theirs.Certificates {
		if crt.Missing {
			continue
		}
		kubeadmDates[crt.Name] = crt.ExpirationDate
		if got, ok := devkDates[crt.Name]; !ok || !got.Equal(crt.ExpirationDate) {
			t.Errorf("%s: kubeadm says it expires %s, devk says %s (listed: %v)", crt.Name, crt.ExpirationDate, got, ok)
		}
	}
	if len(devkDates) != len(kubeadmDates) {
		t.Errorf("devk lists %d certificates, kubeadm %d:\ndevk: %v\nkubeadm: %v", len(devkDates), len(kubeadmDates), devkDates, kubeadmDates)
	}
	t.Logf("devk and kubeadm agree on %d certificates", len(kubeadmDates))
	return kubeadmDates
}
