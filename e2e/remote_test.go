//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/syncbuf"
)

// agentRegistry is where the tests push devk's node agent image: devk's
// registry of the shared home, which every node pulls from.
const agentRegistry = "127.0.0.1:5000"

// (This file sorts after cluster_test.go on purpose: its shared cluster
// must not start before TestClusterBadInput holds the registry's port.)

// strangerEnv is the environment of a devk that knows a cluster only by
// a copy of kubeconfig: an empty DEVK_HOME, $KUBECONFIG that copy, and
// docker's credentials for the registry the nodes pull from (the shared
// home's registry credential, as a user would log in to theirs).
func strangerEnv(t *testing.T, c *SharedCluster, kubeconfig string) (env []string, copied string) {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	copied = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(copied, data, 0o600); err != nil {
		t.Fatal(err)
	}
	secret, err := image.LoadCredential(layout.HomeFiles(c.Home).RegistryCredential())
	if err != nil {
		t.Fatal(err)
	}
	docker := filepath.Join(dir, "docker")
	auth := base64.StdEncoding.EncodeToString([]byte(image.RegistryUser + ":" + secret))
	if err := os.MkdirAll(docker, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(docker, "config.json"), []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, agentRegistry, auth)), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"DEVK_HOME=" + filepath.Join(dir, "home"), "KUBECONFIG=" + copied, "DOCKER_CONFIG=" + docker}, copied
}

// expiration is check-expiration's -o json, as much as the tests read.
type expiration struct {
	Nodes []struct {
		Name  string `json:"node"`
		Files struct {
			PKIDir string `json:"pkiDir"`
		} `json:"files"`
	} `json:"nodes"`
	Certs []struct {
		Node, Name, Path string
		NotAfter         time.Time
	} `json:"certificates"`
	CAs []struct {
		Node, Name string
		NotAfter   time.Time
	} `json:"certificateAuthorities"`
}

// rows are a report's certificates and CAs as node/name@notAfter.
func (e expiration) rows() []string {
	var out []string
	for _, c := range e.Certs {
		out = append(out, c.Node+"/"+c.Name+"@"+c.NotAfter.UTC().Format(time.RFC3339))
	}
	for _, c := range e.CAs {
		out = append(out, c.Node+"/ca:"+c.Name+"@"+c.NotAfter.UTC().Format(time.RFC3339))
	}
	slices.Sort(out)
	return out
}

func parseExpiration(t *testing.T, r Result) expiration {
	t.Helper()
	var e expiration
	if err := json.Unmarshal([]byte(r.Stdout), &e); err != nil || len(e.Certs) == 0 {
		t.Fatalf("check-expiration -o json: %v\n%s%s", err, r.Stdout, r.Stderr)
	}
	return e
}

// certsThroughCluster checks that `devk certs check-expiration` from a
// devk that has only a copy of the cluster's kubeconfig (strangerEnv)
// reads, through devk's node agent on each control-plane node, exactly
// what the devk that made the cluster reads from its files (local),
// says it runs through the cluster, and leaves no agent pod behind. It
// returns the report.
func certsThroughCluster(t *testing.T, c *SharedCluster, kubeconfig string, local expiration) expiration {
	t.Helper()
	env, copied := strangerEnv(t, c, kubeconfig)
	r := MustDevkEnv(t, c.Tree, env, "certs", "check-expiration", "--kubeconfig", copied, "--registry", agentRegistry, "-o", "json")
	if !strings.Contains(r.Stderr, "through the cluster: kubeconfig "+copied) {
		t.Errorf("the mode line is missing:\n%s", r.Stderr)
	}
	got := parseExpiration(t, r)
	if want := local.rows(); !slices.Equal(got.rows(), want) {
		t.Errorf("through the cluster devk read %d rows, on this machine %d:\n%s\nwant\n%s", len(got.rows()), len(want), strings.Join(got.rows(), "\n"), strings.Join(want, "\n"))
	}
	t.Logf("through the cluster: %d certificates and %d CAs on %d nodes, as on this machine", len(got.Certs), len(got.CAs), len(got.Nodes))
	pods := run(t, c.Tree, nil, c.KubectlPath(), "--kubeconfig", kubeconfig, "get", "pods", "-n", "devk-system", "-o", "name")
	if pods.Err != nil || strings.TrimSpace(pods.Stdout) != "" {
		t.Errorf("agent pods left in devk-system (%v):\n%s%s", pods.Err, pods.Stdout, pods.Stderr)
	}
	return got
}

// TestAnyCluster: `devk certs check-expiration`, `devk digest verify`,
// `devk etcd get|ls|diff|watch` (a nodePort patch made here: the Service
// and the allocation; a ConfigMap streamed as it is made), `devk stacks` and `devk status` on the shared cluster from a devk that has only a copy of its admin
// kubeconfig run through the cluster (devk's node agent, pushed to the
// registry the nodes pull from) and read what the devk that made it
// reads; the cluster's own kubeconfig in its own home runs on this
// machine, and through the cluster with --via-cluster; credentials that
// may only view are refused, every missing permission named, and nothing
// is made.
func TestAnyCluster(t *testing.T) {
	c := Cluster(t)
	local := parseExpiration(t, MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "-o", "json"))

	step(t, "a copy of the kubeconfig in an empty home", func(t *testing.T) {
		got := certsThroughCluster(t, c, c.Kubeconfig, local)
		cfg, p, err := layout.Open(c.Home, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Nodes) != 1 || got.Nodes[0].Name != cfg.FirstNode().Name || got.Nodes[0].Files.PKIDir != p.FirstNode().PKI() {
			t.Errorf("nodes %+v, want %s with its files at %s", got.Nodes, cfg.FirstNode().Name, p.FirstNode().PKI())
		}
	})

	step(t, "digest verify through the cluster", func(t *testing.T) {
		views := func(r Result) (bool, map[string]string) {
			var reps []struct {
				Match        bool
				Observations []struct{ Source, Digest string }
			}
			if err := json.Unmarshal([]byte(r.Stdout), &reps); err != nil || len(reps) != 1 {
				t.Fatalf("digest verify -o json: %v\n%s%s", err, r.Stdout, r.Stderr)
			}
			out := map[string]string{}
			for _, o := range reps[0].Observations {
				out[o.Source] = o.Digest
			}
			return reps[0].Match, out
		}
		localMatch, local := views(Devk(t, c.Tree, c.Env, "digest", "verify", "apiserver", "-o", "json"))
		env, copied := strangerEnv(t, c, c.Kubeconfig)
		r := Devk(t, c.Tree, env, "digest", "verify", "apiserver", "--kubeconfig", copied, "--registry", agentRegistry, "-o", "json")
		if !strings.Contains(r.Stderr, "through the cluster: kubeconfig "+copied) {
			t.Errorf("the mode line is missing:\n%s", r.Stderr)
		}
		match, got := views(r)
		cfg, _, err := layout.Open(c.Home, "")
		if err != nil {
			t.Fatal(err)
		}
		node := cfg.FirstNode().Name
		checked := 0
		for _, src := range []string{"pushed", "registry", "manifest", "cri", "mirror-pod"} {
			remote := src
			if src == "manifest" || src == "cri" || src == "mirror-pod" {
				remote += "@" + node
			}
			if got[remote] == "" || got[remote] != local[src] {
				t.Errorf("%s: through the cluster %q, on this machine (%s) %q", remote, got[remote], src, local[src])
			}
			checked++
		}
		if match != localMatch || !match {
			t.Errorf("through the cluster match=%v, on this machine match=%v:\n%s", match, localMatch, r.Stdout)
		}
		t.Logf("digest verify through the cluster: %d views agree with this machine's (%s)", checked, got["manifest@"+node])
	})

	step(t, "etcd through the cluster", func(t *testing.T) {
		env, copied := strangerEnv(t, c, c.Kubeconfig)
		type got struct {
			Key         string
			ModRevision int64
			Value       json.RawMessage
		}
		read := func(r Result) got {
			var g got
			if err := json.Unmarshal([]byte(r.Stdout), &g); err != nil || g.Key == "" || len(g.Value) < 100 {
				t.Fatalf("etcd get -o json: %v\n%s%s", err, r.Stdout, r.Stderr)
			}
			return g
		}
		local := read(MustDevkEnv(t, c.Tree, c.Env, "etcd", "get", "svc/default/kubernetes", "-o", "json"))
		r := MustDevkEnv(t, c.Tree, env, "etcd", "get", "svc/default/kubernetes", "--kubeconfig", copied, "--registry", agentRegistry, "-o", "json")
		through := read(r)
		if through.Key != local.Key || through.ModRevision != local.ModRevision || string(through.Value) != string(local.Value) {
			t.Errorf("etcd get through the cluster:\n%s\non this machine:\n%+v", r.Stdout, local)
		}
		if !strings.Contains(r.Stderr, "through the cluster: kubeconfig "+copied) {
			t.Errorf("the mode line is missing:\n%s", r.Stderr)
		}
		keys := func(r Result) []string {
			var ls struct{ Keys []struct{ Key string } }
			if err := json.Unmarshal([]byte(r.Stdout), &ls); err != nil || len(ls.Keys) == 0 {
				t.Fatalf("etcd ls -o json: %v\n%s%s", err, r.Stdout, r.Stderr)
			}
			var out []string
			for _, k := range ls.Keys {
				out = append(out, k.Key)
			}
			return out
		}
		want := keys(MustDevkEnv(t, c.Tree, c.Env, "etcd", "ls", "svc", "-o", "json"))
		if gotKeys := keys(MustDevkEnv(t, c.Tree, env, "etcd", "ls", "svc", "--kubeconfig", copied, "--registry", agentRegistry, "-o", "json")); !slices.Equal(gotKeys, want) {
			t.Errorf("etcd ls svc through the cluster %v, on this machine %v", gotKeys, want)
		}
		t.Logf("etcd through the cluster: %s at mod revision %d and %d service keys, as on this machine", local.Key, local.ModRevision, len(want))
		// Its agent pod is gone when the command returns, not still
		// being deleted: the kubelet's last writes for it would land in
		// the diff below.
		if left := c.Kubectl(t, "get", "pods", "-n", "devk-system", "-l", "devk.dev/task=etcd", "-o", "name").Stdout; strings.TrimSpace(left) != "" {
			t.Errorf("agent pods still there after devk etcd ls through the cluster returned: %s", left)
		}

		// diff: the node's agent reads the revision, kubectl runs here
		// with the copy, the agent prints what changed since: a nodePort
		// patch is the Service and the node-port allocation, nothing else.
		kubectl := []string{c.KubectlPath(), "--kubeconfig", copied}
		const svc = "e2e-through"
		if r := run(t, c.Tree, nil, kubectl[0], append(kubectl[1:], "create", "service", "nodeport", svc, "--tcp=80:80")...); r.Err != nil {
			t.Fatalf("kubectl create service: %v\n%s", r.Err, r.Stderr)
		}
		t.Cleanup(func() { run(t, c.Tree, nil, kubectl[0], append(kubectl[1:], "delete", "service", svc)...) })
		patch := `[{"op":"replace","path":"/spec/ports/0/nodePort","value":30123}]`
		r = MustDevkEnv(t, c.Tree, env, append([]string{"etcd", "diff", "--kubeconfig", copied, "--registry", agentRegistry, "-o", "json", "--"},
			append(kubectl, "patch", "service", svc, "--type=json", "-p", patch)...)...)
		var d struct {
			FromRevision, ToRevision int64
			Changes                  []struct{ Key, Type string }
		}
		if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil {
			t.Fatalf("etcd diff -o json through the cluster: %v\n%s%s", err, r.Stdout, r.Stderr)
		}
		var changed []string
		for _, ch := range d.Changes {
			changed = append(changed, ch.Key)
		}
		if slices.Sort(changed); !slices.Equal(changed, []string{"/registry/ranges/servicenodeports", "/registry/services/specs/default/" + svc}) || d.ToRevision <= d.FromRevision {
			t.Errorf("etcd diff of a nodePort patch through the cluster changed %v (revisions %d to %d), want the node-port allocation and the Service:\n%s", changed, d.FromRevision, d.ToRevision, r.Stdout)
		}

		// watch: the node's agent streams each change as it comes; Ctrl-C
		// ends it and deletes its pod.
		w := exec.Command(devkBin, "etcd", "watch", "cm/default", "--kubeconfig", copied, "--registry", agentRegistry)
		var wout, werr syncbuf.Buffer
		w.Dir, w.Env, w.Stdout, w.Stderr = c.Tree, append(os.Environ(), env...), &wout, &werr
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Wait() }()
		t.Cleanup(func() { _ = w.Process.Kill() })
		ctx := context.Background()
		eventually(t, ctx, "the watch through the cluster to start", func() error {
			if !strings.Contains(werr.String(), "watching /registry/configmaps/default/ from revision") {
				return fmt.Errorf("not watching yet:\n%s", werr.String())
			}
			return nil
		})
		const cm = "e2e-through-watch"
		if r := run(t, c.Tree, nil, kubectl[0], append(kubectl[1:], "create", "configmap", cm, "--from-literal=seen=through-the-cluster")...); r.Err != nil {
			t.Fatalf("kubectl create configmap: %v\n%s", r.Err, r.Stderr)
		}
		t.Cleanup(func() { run(t, c.Tree, nil, kubectl[0], append(kubectl[1:], "delete", "configmap", cm)...) })
		eventually(t, ctx, "the watch through the cluster to print the new ConfigMap", func() error {
			if !strings.Contains(wout.String(), cm) || !strings.Contains(wout.String(), "through-the-cluster") {
				return fmt.Errorf("not printed yet:\n%s", wout.String())
			}
			return nil
		})
		if err := w.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("the watch through the cluster did not end on Ctrl-C:\n%s", werr.String())
		}
		eventually(t, ctx, "the watch's agent pod to be gone", func() error {
			if left := c.Kubectl(t, "get", "pods", "-n", "devk-system", "-l", "devk.dev/task=etcd", "-o", "name").Stdout; strings.TrimSpace(left) != "" {
				return fmt.Errorf("agent pods left: %s", left)
			}
			return nil
		})
		t.Logf("etcd watch through the cluster printed %d bytes for the new ConfigMap", len(wout.String()))
	})

	step(t, "stacks through the API", func(t *testing.T) {
		env, copied := strangerEnv(t, c, c.Kubeconfig)
		for _, comp := range []string{"apiserver", "kubelet"} {
			r := MustDevkEnv(t, c.Tree, env, "stacks", comp, "--kubeconfig", copied, "-o", "json")
			var res struct {
				URL        string
				Goroutines int
				Groups     []struct{ Frames []struct{ Path string } }
			}
			if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || res.Goroutines < 10 || len(res.Groups) == 0 {
				t.Fatalf("stacks %s through the API: %v\n%.2000s%s", comp, err, r.Stdout, r.Stderr)
			}
			mapped := 0
			for _, g := range res.Groups {
				for _, f := range g.Frames {
					if strings.HasPrefix(f.Path, "staging/") || strings.HasPrefix(f.Path, "pkg/") || strings.HasPrefix(f.Path, "cmd/") {
						mapped++
					}
				}
			}
			if mapped == 0 {
				t.Errorf("stacks %s through the API: no frame mapped into the tree", comp)
			}
			t.Logf("stacks %s through the API: %d goroutines from %s, %d frames in the tree", comp, res.Goroutines, res.URL, mapped)
		}
	})

	step(t, "status through the API", func(t *testing.T) {
		env, copied := strangerEnv(t, c, c.Kubeconfig)
		r := MustDevkEnv(t, c.Tree, env, "status", "--kubeconfig", copied, "-o", "json")
		var st struct {
			Nodes []struct {
				Name       string
				Ready      bool
				Components []struct {
					Name    string
					Running string `json:"runningImage"`
				}
				Addons []struct{ Pod string }
			}
		}
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || len(st.Nodes) == 0 {
			t.Fatalf("status through the API: %v\n%s%s", err, r.Stdout, r.Stderr)
		}
		n := st.Nodes[0]
		var running []string
		for _, c := range n.Components {
			if c.Running != "" {
				running = append(running, c.Name)
			}
		}
		slices.Sort(running)
		if !n.Ready || !slices.Equal(running, []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}) || len(n.Addons) < 2 {
			t.Errorf("status through the API: node %s Ready %v, static pods running %v, %d addon pods:\n%s", n.Name, n.Ready, running, len(n.Addons), r.Stdout)
		}
		if text := MustDevkEnv(t, c.Tree, env, "status", "--kubeconfig", copied).Stdout; !strings.Contains(text, "through its API") || !strings.Contains(text, "kube-apiserver") {
			t.Errorf("status through the API, as text:\n%s", text)
		}
	})

	step(t, "its own kubeconfig", func(t *testing.T) {
		r := MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "--kubeconfig", c.Kubeconfig, "-o", "json")
		if !strings.Contains(r.Stderr, `on this machine: devk cluster \"devk\"`) { // a JSON progress event
			t.Errorf("with the cluster's own kubeconfig devk did not run on this machine:\n%s", r.Stderr)
		}
		r = MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "--kubeconfig", c.Kubeconfig, "--via-cluster", "--registry", agentRegistry, "-o", "json")
		if !strings.Contains(r.Stderr, "(--via-cluster)") || !slices.Equal(parseExpiration(t, r).rows(), local.rows()) {
			t.Errorf("--via-cluster:\n%s", r.Stderr)
		}
	})

	step(t, "credentials that may only view", func(t *testing.T) {
		k := func(args ...string) Result {
			t.Helper()
			r := c.Kubectl(t, args...)
			if r.Err != nil {
				t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), r.Err, r.Stderr)
			}
			return r
		}
		k("create", "serviceaccount", "devk-viewer", "-n", "default")
		k("create", "clusterrolebinding", "devk-viewer", "--clusterrole=view", "--serviceaccount=default:devk-viewer")
		t.Cleanup(func() {
			c.Kubectl(t, "delete", "clusterrolebinding", "devk-viewer")
			c.Kubectl(t, "delete", "serviceaccount", "devk-viewer", "-n", "default")
		})
		token := strings.TrimSpace(k("create", "token", "devk-viewer", "-n", "default").Stdout)
		viewer := filepath.Join(t.TempDir(), "viewer.conf")
		raw := k("config", "view", "--raw", "--minify", "--flatten").Stdout
		if err := os.WriteFile(viewer, []byte(raw), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"config", "set-credentials", "devk-viewer", "--token=" + token},
			{"config", "set-context", "--current", "--user=devk-viewer"},
		} {
			if r := run(t, c.Tree, nil, c.KubectlPath(), append([]string{"--kubeconfig", viewer}, args...)...); r.Err != nil {
				t.Fatalf("%v\n%s", r.Err, r.Stderr)
			}
		}
		before := k("get", "pods", "-n", "devk-system", "-o", "name").Stdout
		env, copied := strangerEnv(t, c, viewer)
		r := Devk(t, c.Tree, env, "certs", "check-expiration", "--kubeconfig", copied, "--registry", agentRegistry)
		for _, want := range []string{"your credentials (system:serviceaccount:default:devk-viewer) may not: ", "create pods in namespace devk-system", "get nodes/proxy", "ask for cluster-admin"} {
			if r.Err == nil || !strings.Contains(r.Stderr, want) {
				t.Errorf("a viewer's check-expiration (%v) does not say %q:\n%s", r.Err, want, r.Stderr)
			}
		}
		// A swap asks for its agents' account and RBAC too.
		r = Devk(t, c.Tree, env, "swap", "apiserver", "--kubeconfig", copied, "--registry", agentRegistry)
		for _, want := range []string{"create pods in namespace devk-system", "create serviceaccounts in namespace devk-system", "create clusterroles.rbac.authorization.k8s.io"} {
			if r.Err == nil || !strings.Contains(r.Stderr, want) {
				t.Errorf("a viewer's swap (%v) does not say %q:\n%s", r.Err, want, r.Stderr)
			}
		}
		// --load asks for the loader's ConfigMap, attach and port-forward.
		r = Devk(t, c.Tree, env, "digest", "verify", "apiserver", "--kubeconfig", copied, "--load")
		for _, want := range []string{"create configmaps in namespace devk-system", "create pods/attach in namespace devk-system", "create pods/portforward in namespace devk-system"} {
			if r.Err == nil || !strings.Contains(r.Stderr, want) {
				t.Errorf("a viewer's digest verify --load (%v) does not say %q:\n%s", r.Err, want, r.Stderr)
			}
		}
		// Both ways, or neither, is refused before anything is asked.
		for args, want := range map[string]string{"--load --registry " + agentRegistry: "give one", "": "pass --registry"} {
			r = Devk(t, c.Tree, env, append([]string{"digest", "verify", "apiserver", "--kubeconfig", copied}, strings.Fields(args)...)...)
			if r.Err == nil || !strings.Contains(r.Stderr, want) {
				t.Errorf("digest verify %s through the cluster (%v) does not say %q:\n%s", args, r.Err, want, r.Stderr)
			}
		}
		if after := k("get", "pods", "-n", "devk-system", "-o", "name").Stdout; after != before {
			t.Errorf("a refused run made pods: before %q, after %q", before, after)
		}
		if left := devkObjectsLeft(t, context.Background(), clientFor(t, c.Kubeconfig)); len(left) > 0 {
			t.Errorf("a refused run left %v", left)
		}
	})

	// What a swap through the cluster does not do is refused before
	// anything is made, saying what does it.
	// The kubelet is swapped through the cluster only where systemd runs
	// it: a devk node's kubelet runs in the node's cgroup, which the agent
	// finds and names (a real refusal, from the node: its kubelet process,
	// cgroup and PID 1), changing nothing.
	step(t, "swap through the cluster refuses what it does not swap", func(t *testing.T) {
		env, copied := strangerEnv(t, c, c.Kubeconfig)
		for comp, want := range map[string]string{"kubelet": "not in a systemd unit (PID 1 is ", "kube-proxy": "devk swaps static pods", "apiserver kubelet": "the kubelet is swapped on its own"} {
			r := Devk(t, c.Tree, env, append(append([]string{"swap"}, strings.Fields(comp)...), "--kubeconfig", copied, "--registry", agentRegistry)...)
			if r.Err == nil || !strings.Contains(r.Stderr, want) {
				t.Errorf("swap %s through the cluster (%v) does not say %q:\n%s", comp, r.Err, want, r.Stderr)
			}
			if comp == "kubelet" && !strings.Contains(r.Stderr, "devk swap kubelet --name") {
				t.Errorf("the kubelet's refusal does not say what swaps it:\n%s", r.Stderr)
			}
		}
		if left := devkObjectsLeft(t, context.Background(), clientFor(t, c.Kubeconfig)); len(left) > 0 {
			t.Errorf("the refused swaps left %v", left)
		}
		r := Devk(t, c.Tree, env, "swap", "apiserver", "--kubeconfig", copied)
		if r.Err == nil || !strings.Contains(r.Stderr, "pass --registry") {
			t.Errorf("swap through the cluster without --registry (%v):\n%s", r.Err, r.Stderr)
		}
	})

	// export logs from a copy of the kubeconfig: the objects through the
	// API, the node's manifests and container logs by its agent, read by
	// exec and checked by sha256; nothing of devk's left.
	step(t, "export logs through the cluster", func(t *testing.T) {
		env, copied := strangerEnv(t, c, c.Kubeconfig)
		dest := filepath.Join(t.TempDir(), "logs")
		r := Devk(t, c.Tree, env, "export", "logs", dest, "--kubeconfig", copied, "--registry", agentRegistry, "-o", "json")
		var res struct {
			Path                          string
			ContainerLogs, Objects, Files int
			Missing                       []string
		}
		if r.Err != nil || json.Unmarshal([]byte(r.Stdout), &res) != nil {
			t.Fatalf("export logs through the cluster: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
		}
		cfg, _, err := layout.Open(c.Home, "")
		if err != nil {
			t.Fatal(err)
		}
		node := cfg.FirstNode().Name
		logs, _ := filepath.Glob(filepath.Join(dest, node, "containers", "kube-system_kube-apiserver-"+node+"_kube-apiserver_*.log"))
		if _, err := os.Stat(filepath.Join(dest, node, "manifests", "kube-apiserver.yaml")); err != nil || len(logs) == 0 || res.ContainerLogs < 5 || res.Objects < 50 {
			t.Errorf("export through the cluster: %+v; manifest %v; API server logs %v", res, err, logs)
		}
		if !strings.Contains(r.Stderr, "through the cluster: kubeconfig "+copied) {
			t.Errorf("the mode line is missing:\n%s", r.Stderr)
		}
		t.Logf("export logs through the cluster: %d files, %d container logs, %d objects; missing %v", res.Files, res.ContainerLogs, res.Objects, res.Missing)
		if left := devkObjectsLeft(t, context.Background(), clientFor(t, c.Kubeconfig)); len(left) > 0 {
			t.Errorf("devk left on the cluster: %v", left)
		}
	})
}

// remoteSwap runs `devk swap ARGS --kubeconfig copied --registry …` as the
// stranger env is (through the cluster), while a client reads through
// loadKubeconfig's endpoint every 20 ms unless it is "" (one control
// plane: nothing serves while its API server is swapped), and checks what
// every swap through the cluster must show: the mode line, `via:
// cluster`, one static pod per node of nodes in that order, each verified
// (every check OK, not rolled back), and no failed request. It returns
// the report.
func remoteSwap(t *testing.T, c *SharedCluster, env []string, copied, loadKubeconfig string, nodes []string, args ...string) haSwapReport {
	t.Helper()
	var l *load
	if loadKubeconfig != "" {
		l = startLoad(t, loadKubeconfig)
	}
	via := []string{"--registry", agentRegistry}
	if slices.Contains(args, "--load") {
		via = nil
	}
	r := Devk(t, c.Tree, env, append(append(append([]string{"swap"}, args...), "--kubeconfig", copied, "-o", "json"), via...)...)
	sent, failures := 0, []string(nil)
	if l != nil {
		sent, failures = l.stop()
	}
	if r.Err != nil {
		t.Fatalf("devk swap %s through the cluster: %v\n%s", strings.Join(args, " "), r.Err, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "through the cluster: kubeconfig "+copied) {
		t.Errorf("the mode line is missing:\n%s", r.Stderr)
	}
	var rep haSwapReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || rep.Via != "cluster" || len(rep.StaticPods) != len(nodes) {
		t.Fatalf("swap %s through the cluster: %v, via %q, %d static pods, want %d\n%s", strings.Join(args, " "), err, rep.Via, len(rep.StaticPods), len(nodes), r.Stdout)
	}
	checked := 0
	for i, p := range rep.StaticPods {
		for _, ch := range p.Checks {
			checked++
			if !ch.OK {
				t.Errorf("%s: check %s failed", nodes[i], ch.Name)
			}
		}
		if p.RolledBack || p.Node != nodes[i] {
			t.Errorf("swap %d through the cluster (want on %s, in that order): %+v", i, nodes[i], p)
		}
	}
	t.Logf("devk swap %s through the cluster: %d nodes, %d checks passed, in %s; %d requests meanwhile, %d failed", strings.Join(args, " "), len(nodes), checked, r.Took.Round(time.Millisecond), sent, len(failures))
	if l == nil {
		return rep
	}
	if sent < 100 {
		t.Errorf("the load sent only %d requests: it did not run", sent)
	}
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed during the swap through the cluster, e.g. %s", len(failures), sent, failures[0])
	}
	return rep
}

// devkObjectsLeft are the objects devk's agents leave on a cluster
// besides its namespace: pods and ServiceAccounts (but default) in
// devk-system, ClusterRoles and ClusterRoleBindings labelled as devk's.
func devkObjectsLeft(t *testing.T, ctx context.Context, cs *kubernetes.Clientset) []string {
	t.Helper()
	var left []string
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=devk"}
	pods, err := cs.CoreV1().Pods("devk-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		left = append(left, "pod/"+p.Name)
	}
	sas, err := cs.CoreV1().ServiceAccounts("devk-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range sas.Items {
		if sa.Name != "default" {
			left = append(left, "serviceaccount/"+sa.Name)
		}
	}
	crs, err := cs.RbacV1().ClusterRoles().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range crs.Items {
		left = append(left, "clusterrole/"+o.Name)
	}
	crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range crbs.Items {
		left = append(left, "clusterrolebinding/"+o.Name)
	}
	cms, err := cs.CoreV1().ConfigMaps("devk-system").List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range cms.Items {
		left = append(left, "configmap/"+o.Name)
	}
	return left
}
