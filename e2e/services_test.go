//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/internal/layout"
)

// TestServicesDNSAndStreams runs real workloads on the shared cluster,
// with the tree's own agnhost built and pushed by devk: a Deployment of
// two replicas behind a NodePort Service; from another pod, the Service
// answers by name (CoreDNS, kube-proxy) and kubernetes.default resolves;
// the NodePort answers from the host at the node's address; kubectl
// logs, exec and port-forward work; `devk etcd diff` of a nodePort patch
// shows exactly the Service and the node-port allocation changing; and a
// second cluster runs beside it with a workload and goes without
// touching it.
func TestServicesDNSAndStreams(t *testing.T) {
	c := Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	k := func(t *testing.T, args ...string) string {
		t.Helper()
		r := c.Kubectl(t, args...)
		if r.Err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
		}
		return r.Stdout
	}

	img := agnhost(t, c)
	webAndClient(t, ctx, c, c.Kubeconfig, img, "NodePort")

	// kubectl logs: netexec's start line.
	step(t, "kubectl logs", func(t *testing.T) {
		if logs := k(t, "logs", "deployment/web"); !strings.Contains(logs, "Started HTTP server on port 8080") {
			t.Errorf("kubectl logs deployment/web:\n%s", logs)
		}
	})

	// port-forward to the client; its netexec dials the Service by name,
	// which answers with a web pod's hostname.
	step(t, "port-forward", func(t *testing.T) {
		port := portForward(t, ctx, c.KubectlPath(), c.Kubeconfig, "pod/client", 8080)
		dial := httpGet(t, "http://127.0.0.1:"+port+"/dial?request=hostname&host=web&port=80&protocol=http&tries=1")
		if !strings.Contains(dial, `"web-`) {
			t.Errorf("through port-forward, the client's dial of Service web answered %q", dial)
		}
	})

	// The NodePort from the host, at the node's address on devk's bridge
	// (never a pod address: the host has no route to those).
	cfg, _, err := layout.Open(c.Home, "")
	if err != nil {
		t.Fatal(err)
	}
	cs := clientFor(t, c.Kubeconfig)
	var nodePort, newPort int32
	step(t, "NodePort from the host", func(t *testing.T) {
		route, err := exec.Command("ip", "route", "get", cfg.FirstNode().IP).Output()
		if err != nil || !strings.Contains(string(route), "dev "+cfg.Network.HostBridge) {
			t.Fatalf("the host's route to the node %s is not devk's bridge: %s (%v)", cfg.FirstNode().IP, route, err)
		}
		svc, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodePort = svc.Spec.Ports[0].NodePort
		if got := httpGet(t, fmt.Sprintf("http://%s:%d/hostname", cfg.FirstNode().IP, nodePort)); !strings.HasPrefix(got, "web-") {
			t.Errorf("NodePort %d at the node answered %q", nodePort, got)
		}
	})

	// devk etcd diff of a nodePort change: the Service and the node-port
	// allocation, nothing else.
	step(t, "etcd diff of a nodePort change", func(t *testing.T) {
		newPort = nodePort + 1
		if newPort > 32767 {
			newPort = 30000
		}
		patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/ports/0/nodePort","value":%d}]`, newPort)
		d := MustDevkEnv(t, c.Tree, c.Env, "etcd", "diff", "--", c.KubectlPath(), "--kubeconfig", c.Kubeconfig, "patch", "svc", "web", "--type=json", "-p", patch)
		changed := regexp.MustCompile(`(?m)^--- (/registry/\S+) @`).FindAllStringSubmatch(d.Stdout, -1)
		var keys []string
		for _, ch := range changed {
			keys = append(keys, ch[1])
		}
		if strings.Join(keys, " ") != "/registry/ranges/servicenodeports /registry/services/specs/default/web" {
			t.Errorf("devk etcd diff of a nodePort patch changed %v, want the node-port allocation and the Service:\n%s", keys, d.Stdout)
		}
		if !strings.Contains(d.Stdout, "+  - nodePort: "+strconv.Itoa(int(newPort))) {
			t.Errorf("the diff does not show the new nodePort %d:\n%s", newPort, d.Stdout)
		}
		if got := httpGet(t, fmt.Sprintf("http://%s:%d/hostname", cfg.FirstNode().IP, newPort)); !strings.HasPrefix(got, "web-") {
			t.Errorf("the new NodePort %d answered %q", newPort, got)
		}
	})

	// devk's rule for the kubernetes Service before kube-proxy comes after
	// kube-proxy's jump to its Service rules in the node's nat table, so
	// it never takes what kube-proxy handles.
	step(t, "kube-proxy's Service rules come before devk's", func(t *testing.T) {
		nat := MustDevkEnv(t, c.Tree, c.Env, "node", "exec", cfg.FirstNode().Name, "--", "iptables", "-t", "nat", "-S", "PREROUTING").Stdout
		kubeProxy, devk := strings.Index(nat, "-j KUBE-SERVICES"), strings.Index(nat, "devk: the kubernetes Service")
		if kubeProxy < 0 || devk < 0 || kubeProxy > devk {
			t.Errorf("node %s's nat PREROUTING: want kube-proxy's jump to KUBE-SERVICES before devk's rule for the kubernetes Service:\n%s", cfg.FirstNode().Name, nat)
		}
	})

	// A second cluster beside the first, with a workload; down it, and
	// the first still serves.
	step(t, "second cluster", func(t *testing.T) {
		downed := false
		t.Cleanup(func() {
			if !downed {
				Devk(t, c.Tree, c.Env, "down", "--name", "second")
			}
		})
		MustDevkEnv(t, c.Tree, c.Env, "up", "--name", "second")
		cfg2, p2, err := layout.Open(c.Home, "second")
		if err != nil {
			t.Fatal(err)
		}
		if cfg2.Network.Subnet == cfg.Network.Subnet || cfg2.FirstNode().IP == cfg.FirstNode().IP {
			t.Fatalf("the second cluster shares the first's subnet %s", cfg.Network.Subnet)
		}
		k2 := func(args ...string) Result {
			return run(t, c.Tree, nil, c.KubectlPath(), append([]string{"--kubeconfig", p2.FirstNode().Kubeconfig("admin")}, args...)...)
		}
		if r := k2("create", "deployment", "web2", "--image="+img, "--", "/agnhost", "netexec", "--http-port=8080"); r.Err != nil {
			t.Fatalf("%v\n%s", r.Err, r.Stderr)
		}
		if r := k2("rollout", "status", "deployment/web2", "--timeout=120s"); r.Err != nil {
			t.Fatalf("the second cluster's workload: %v\n%s", r.Err, r.Stderr)
		}
		MustDevkEnv(t, c.Tree, c.Env, "down", "--name", "second")
		downed = true
		if got := httpGet(t, fmt.Sprintf("http://%s:%d/hostname", cfg.FirstNode().IP, newPort)); !strings.HasPrefix(got, "web-") {
			t.Errorf("after the second cluster went, the first's NodePort answered %q", got)
		}
		k(t, "get", "nodes")
	})
}

// webAndClient runs agnhost's netexec as Deployment web (two replicas)
// behind Service web of type svcType, and as Pod client, on the cluster
// of kubeconfig; then, from the client, it connects to the Service by its
// short and full names and to the API server's Service by its cluster
// domain name (CoreDNS and kube-proxy at work), and to an address of the
// service range that no Service has (refused). kube-proxy programs a new
// Service's endpoints within its sync period (it rejects connections
// until then): the first may be refused.
func webAndClient(t *testing.T, ctx context.Context, c *SharedCluster, kubeconfig, img, svcType string) {
	t.Helper()
	manifests := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: %[1]q, args: [netexec, --http-port=8080]}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: %[2]s
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default}
spec:
  containers: [{name: client, image: %[1]q, args: [netexec, --http-port=8080]}]
`, img, svcType)
	kubectl := func(t *testing.T, args ...string) Result {
		t.Helper()
		return run(t, c.Tree, nil, c.KubectlPath(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	}
	step(t, "workloads", func(t *testing.T) {
		r := run(t, c.Tree, nil, "sh", "-c", fmt.Sprintf("%s --kubeconfig %s apply -f - <<'EOF'\n%sEOF", c.KubectlPath(), kubeconfig, manifests))
		if r.Err != nil {
			t.Fatalf("kubectl apply: %v\n%s", r.Err, r.Stderr)
		}
		for _, args := range [][]string{{"rollout", "status", "deployment/web", "--timeout=180s"}, {"wait", "--for=condition=Ready", "pod/client", "--timeout=180s"}} {
			if r := kubectl(t, args...); r.Err != nil {
				t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
			}
		}
	})
	step(t, "Services by name from a pod", func(t *testing.T) {
		for _, target := range []string{"web:80", "web.default.svc.cluster.local:80", "kubernetes.default.svc.cluster.local:443"} {
			eventually(t, ctx, "a connection from pod client to "+target, func() error {
				if r := kubectl(t, "exec", "client", "--", "/agnhost", "connect", target, "--timeout=5s"); r.Err != nil {
					return fmt.Errorf("%v: %s%s", r.Err, r.Stdout, r.Stderr)
				}
				return nil
			})
		}
	})
	// An address in the service range that no Service has: kube-proxy
	// leaves it alone, and devk's rule in the node refuses it at once
	// (without the rule it would go to the host and time out).
	step(t, "an unserved service address is refused", func(t *testing.T) {
		_, svcNet, err := net.ParseCIDR(layout.DefaultServiceCIDR)
		if err != nil {
			t.Fatal(err)
		}
		unserved := make(net.IP, 4)
		for i, b := range svcNet.IP.To4() {
			unserved[i] = b | ^svcNet.Mask[i]
		}
		unserved[3]-- // the range's last address but one
		r := kubectl(t, "exec", "client", "--", "/agnhost", "connect", unserved.String()+":80", "--timeout=5s")
		if r.Err == nil || !strings.Contains(r.Stdout+r.Stderr, "REFUSED") {
			t.Errorf("a connection from pod client to %s:80 (no Service) was not refused: %v\n%s%s", unserved, r.Err, r.Stdout, r.Stderr)
		}
	})
}

// agnhost is the tree's agnhost, built and pushed by devk like any
// component, by digest.
func agnhost(t *testing.T, c *SharedCluster) string {
	t.Helper()
	b := MustDevkEnv(t, c.Tree, c.Env, "build", "./test/images/agnhost", "--push", "-o", "json")
	var built struct {
		Images []struct{ Component, Ref string }
	}
	if err := json.Unmarshal([]byte(b.Stdout), &built); err != nil || len(built.Images) != 1 || !strings.Contains(built.Images[0].Ref, "/agnhost@sha256:") {
		t.Fatalf("devk build ./test/images/agnhost --push -o json: %v\n%s", err, b.Stdout)
	}
	return built.Images[0].Ref
}

// portForward runs `kubectl port-forward target :port` until the test
// ends and returns the local port it forwards from.
func portForward(t *testing.T, ctx context.Context, kubectl, kubeconfig, target string, port int) string {
	t.Helper()
	pf := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "port-forward", target, ":"+strconv.Itoa(port))
	out, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pf.Process.Kill(); pf.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> ` + strconv.Itoa(port)).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("kubectl port-forward %s printed %q (%v)", target, line, err)
	}
	return m[1]
}

// httpGet is the body of a GET, failing the test on any error.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	var last error
	for range 10 { // kube-proxy programs a new port within a sync
		resp, err := client.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return string(body)
			}
			err = fmt.Errorf("%s: %v", resp.Status, rerr)
		}
		last = err
		time.Sleep(time.Second)
	}
	t.Fatalf("GET %s: %v", url, last)
	return ""
}
