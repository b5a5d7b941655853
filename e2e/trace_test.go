//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/syncbuf"
)

// traceResult is what `devk trace -o json` prints (the fields the test reads).
type traceResult struct {
	ExitCode int
	Settled  bool
	Requests []struct {
		User, UserAgent, Client, Verb, Resource, Namespace, Name string
		Code                                                     int
		FromCommand                                              bool
		Etcd                                                     []int64
		Body                                                     any
	}
	Etcd []struct {
		Key, Type, Resource, Namespace, Name, Request, Diff string
		Revision                                            int64
	}
	Nodes []struct {
		Node     string
		IPTables struct {
			Added, Removed []struct{ Table, Chain, Rule string }
		}
		Error string
	}
	Events []struct{ Namespace, Object, Reason string }
}

// traceWorkload is a NodePort Service, a 2-replica Deployment behind it
// and a Secret whose value must never show.
const (
	traceNodePort = "30777"
	traceSecret   = "devk-e2e-trace-secret-value"
)

func traceWorkload(image string) string {
	return `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, nodePort: ` + traceNodePort + `}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: ` + image + `
        args: [netexec, --http-port=8080]
---
apiVersion: v1
kind: Secret
metadata: {name: web, namespace: default}
stringData: {password: ` + traceSecret + `}
`
}

// TestTrace is `devk trace` on a 3-node cluster beside the shared one:
// kubectl create of a NodePort Service and a 2-replica Deployment shows
// kubectl's POSTs (marked as the command's), the controller-manager's
// ReplicaSet and Pods, the scheduler's bindings, the EndpointSlice
// controller's slice, their etcd keys with revisions joined to them, and
// on every node the KUBE-NODEPORTS lines naming the nodePort, with no
// Secret data anywhere; the delete of the Service removes those lines on
// every node; --follow prints another client's write within a second; a
// failing command's exit code is devk's with the trace printed; a cluster
// whose audit log is off is refused with how to turn it on.
func TestTrace(t *testing.T) {
	c := Cluster(t)
	const name = "trace"
	devk, _ := besideShared(t, c, name)
	devk(t, "up", "--nodes", "3")
	kubeconfig := filepath.Join(c.Home, "clusters", name, "admin.conf")
	kubectl := []string{c.KubectlPath(), "--kubeconfig", kubeconfig}
	dir := t.TempDir()
	workload := filepath.Join(dir, "web.yaml")
	if err := os.WriteFile(workload, []byte(traceWorkload(agnhost(t, c))), 0o600); err != nil {
		t.Fatal(err)
	}
	trace := func(t *testing.T, args ...string) (traceResult, Result) {
		t.Helper()
		r := Devk(t, c.Tree, c.Env, append([]string{"trace", "--name", name, "-o", "json"}, args...)...)
		var res traceResult
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			t.Fatalf("devk trace -o json: %v\nstdout:\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
		}
		if strings.Contains(r.Stdout, traceSecret) {
			t.Errorf("the Secret's value is in the trace")
		}
		return res, r
	}
	nodePortLines := func(rules []struct{ Table, Chain, Rule string }) int {
		n := 0
		for _, r := range rules {
			if r.Table == "nat" && r.Chain == "KUBE-NODEPORTS" && strings.Contains(r.Rule, "--dport "+traceNodePort) {
				n++
			}
		}
		return n
	}

	step(t, "create", func(t *testing.T) {
		res, r := trace(t, append([]string{"--"}, append(kubectl, "create", "-f", workload)...)...)
		if r.Err != nil || res.ExitCode != 0 || !res.Settled {
			t.Fatalf("exit %v (%d), settled %v\n%s", r.Err, res.ExitCode, res.Settled, r.Stderr)
		}
		revs := map[int64]string{}
		for _, e := range res.Etcd {
			revs[e.Revision] = e.Key
		}
		found := map[string]bool{}
		for _, q := range res.Requests {
			key := q.Client + " " + q.Verb + " " + q.Resource
			switch {
			case q.Client == "kubectl" && q.Verb == "create" && q.FromCommand &&
				(q.Resource == "v1/services" || q.Resource == "apps/v1/deployments" || q.Resource == "v1/secrets"):
				found[q.Resource] = true
			case strings.Contains(q.Client, "deployment-controller") && q.Verb == "create" && q.Resource == "apps/v1/replicasets":
				found["replicaset"] = true
			case strings.Contains(q.Client, "replicaset-controller") && q.Verb == "create" && q.Resource == "v1/pods":
				found["pods"] = true
			case strings.HasPrefix(q.Client, "kube-scheduler") && q.Resource == "v1/pods/binding":
				found["binding"] = true
			case strings.Contains(q.Client, "endpointslice-controller") && q.Verb == "create" && q.Resource == "discovery.k8s.io/v1/endpointslices":
				found["endpointslice"] = true
			default:
				continue
			}
			if q.Code >= 300 {
				t.Errorf("%s: code %d", key, q.Code)
			}
			if q.Resource != "v1/secrets" && len(q.Etcd) == 0 {
				t.Errorf("%s %s/%s: no etcd write joined to it", key, q.Namespace, q.Name)
			}
			for _, rev := range q.Etcd {
				if revs[rev] == "" {
					t.Errorf("%s: revision %d is not among the etcd writes", key, rev)
				}
			}
		}
		for _, want := range []string{"v1/services", "apps/v1/deployments", "v1/secrets", "replicaset", "pods", "binding", "endpointslice"} {
			if !found[want] {
				t.Errorf("no %s request", want)
			}
		}
		if len(res.Nodes) != 3 {
			t.Fatalf("%d nodes, want 3", len(res.Nodes))
		}
		for _, n := range res.Nodes {
			if n.Error != "" || nodePortLines(n.IPTables.Added) == 0 {
				t.Errorf("node %s: no KUBE-NODEPORTS line for %s added (%s): %+v", n.Node, traceNodePort, n.Error, n.IPTables.Added)
			}
		}
	})

	step(t, "delete", func(t *testing.T) {
		res, r := trace(t, append([]string{"--"}, append(kubectl, "delete", "svc", "web")...)...)
		if r.Err != nil {
			t.Fatalf("%v\n%s", r.Err, r.Stderr)
		}
		for _, n := range res.Nodes {
			if nodePortLines(n.IPTables.Removed) == 0 {
				t.Errorf("node %s: no KUBE-NODEPORTS line for %s removed: %+v", n.Node, traceNodePort, n.IPTables.Removed)
			}
		}
	})

	step(t, "follow", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errOut syncbuf.Buffer
		cmd := exec.CommandContext(ctx, devkBin, "trace", "--follow", "--no-nodes", "--name", name)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = c.Tree, append(os.Environ(), c.Env...), &out, &errOut
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); cmd.Wait() }()
		time.Sleep(3 * time.Second)
		r := run(t, c.Tree, nil, kubectl[0], append(kubectl[1:], "create", "configmap", "traced", "--from-literal=a=b")...)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		done := time.Now()
		for !strings.Contains(out.String(), "/registry/configmaps/default/traced") {
			if time.Since(done) > time.Second {
				t.Fatalf("--follow did not print the write within a second\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	step(t, "a failing command", func(t *testing.T) {
		res, r := trace(t, append([]string{"--"}, append(kubectl, "get", "pod", "nosuch")...)...)
		var ee *exec.ExitError
		if !errors.As(r.Err, &ee) || ee.ExitCode() != 1 || res.ExitCode != 1 {
			t.Errorf("devk exited %v, the trace says %d: want kubectl's 1", r.Err, res.ExitCode)
		}
	})

	step(t, "audit off", func(t *testing.T) {
		off := filepath.Join(dir, "audit-off.yaml")
		if err := os.WriteFile(off, []byte("apiVersion: devk.dev/v1alpha1\nkind: Cluster\naudit:\n  enabled: false\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		devk(t, "up", "--config", off)
		r := Devk(t, c.Tree, c.Env, "trace", "--name", name, "--", "true")
		if r.Err == nil || !strings.Contains(r.Stderr, "audit.enabled: false") || !strings.Contains(r.Stderr, "devk up --config") {
			t.Errorf("devk trace on a cluster without an audit log: %v\n%s", r.Err, r.Stderr)
		}
	})
}
