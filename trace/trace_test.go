package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/etcdwatch/etcdtest"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/output"
	"github.com/devk/devk/internal/syncbuf"
	"github.com/devk/devk/phase"
)

// The traced command of TestRun is this test binary again (the helper
// below), told by these variables what to write where.
const (
	envHelper = "DEVK_TRACE_TEST_HELPER"
	envEtcd   = "DEVK_TRACE_TEST_ETCD"
	envAudit  = "DEVK_TRACE_TEST_AUDIT"
	envNetNS  = "DEVK_TRACE_TEST_NETNS"

	hostIP = "10.250.0.1"
	nodeIP = "10.250.0.2"
)

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) != "" {
		if err := helper(); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		// a failing command: devk trace exits with its code
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// auditLine is one line as the API server's JSON log backend writes it.
// received is when the API server received the request: before its
// etcd write.
func auditLine(received time.Time, id, verb, ua, ip string, ref *auditv1.ObjectReference, code int32, rv, respName string) []byte {
	now := metav1.NewMicroTime(received)
	ev := auditv1.Event{
		TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "audit.k8s.io/v1"},
		Level:    auditv1.LevelRequestResponse, AuditID: types.UID(id), Stage: auditv1.StageResponseComplete,
		Verb: verb, User: authnv1.UserInfo{Username: "u-" + id}, SourceIPs: []string{ip}, UserAgent: ua,
		ObjectRef: ref, ResponseStatus: &metav1.Status{Code: code},
		RequestReceivedTimestamp: now, StageTimestamp: metav1.NewMicroTime(now.Add(3 * time.Millisecond)),
	}
	if rv != "" {
		body, _ := json.Marshal(map[string]any{"kind": "X", "metadata": map[string]string{"name": respName, "resourceVersion": rv}})
		ev.ResponseObject = &runtime.Unknown{Raw: body}
	}
	line, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	return append(line, '\n')
}

// helper is a command that does what `kubectl create` and the
// controllers after it would: etcd writes, the API server's audit lines
// for them, and (a second after it exits) a kube-proxy rule in the node.
func helper() error {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv(envEtcd)}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	log, err := os.OpenFile(os.Getenv(envAudit), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer log.Close()
	put := func(key string, obj runtime.Object) (string, error) {
		resp, err := cli.Put(ctx, key, string(etcdtest.MustEncode(obj)))
		if err != nil {
			return "", err
		}
		return fmt.Sprint(resp.Header.Revision), nil
	}
	steps := []struct {
		key  string
		obj  runtime.Object
		line func(received time.Time, rv string) []byte
	}{
		{"/registry/services/specs/default/web", etcdtest.Service("default", "web", 1), func(received time.Time, rv string) []byte {
			return auditLine(received, "svc", "create", "kubectl/v1.34.4 (linux/amd64) kubernetes/abc", hostIP,
				&auditv1.ObjectReference{Resource: "services", Namespace: "default", Name: "web", APIVersion: "v1"}, 201, rv, "web")
		}},
		{"/registry/endpointslices/default/web-x7k2p", etcdtest.EndpointSlice("default", "web-x7k2p", 1), func(received time.Time, rv string) []byte {
			return auditLine(received, "slice", "create", "kube-controller-manager/v1.34.4 (linux/amd64) kubernetes/abc/endpointslice-controller", nodeIP,
				&auditv1.ObjectReference{Resource: "endpointslices", APIGroup: "discovery.k8s.io", Namespace: "default", APIVersion: "v1"}, 201, rv, "web-x7k2p")
		}},
		{"/registry/pods/default/web-abc", etcdtest.Pod("default", "web-abc", 1), func(received time.Time, _ string) []byte {
			return auditLine(received, "bind", "create", "kube-scheduler/v1.34.4 (linux/amd64) kubernetes/abc/scheduler", nodeIP,
				&auditv1.ObjectReference{Resource: "pods", Namespace: "default", Name: "web-abc", APIVersion: "v1", Subresource: "binding"}, 201, "", "")
		}},
		{"/registry/secrets/default/db", etcdtest.Secret("default", "db", 1), nil},
		{"/registry/leases/kube-node-lease/devk-worker", etcdtest.Lease("kube-node-lease", "devk-worker", 1), nil},
		// the endpoint reconciler's TTL key (an Endpoints there; any value will do)
		{"/registry/masterleases/" + nodeIP, etcdtest.ConfigMap("", nodeIP, 1), nil},
	}
	for _, s := range steps {
		received := time.Now()
		rv, err := put(s.key, s.obj)
		if err != nil {
			return err
		}
		if s.line != nil {
			if _, err := log.Write(s.line(received, rv)); err != nil {
				return err
			}
		}
	}
	// kube-proxy's rule comes after the command has exited
	later := exec.Command("sh", "-c", `sleep 1; exec nsenter --net="$0" -- iptables -t nat -A KUBE-NODEPORTS -p tcp --dport 30080 -j ACCEPT`, os.Getenv(envNetNS))
	return later.Start()
}

// TestRun traces a real command against a real etcd, an audit log
// written as the API server writes it, and a network namespace with
// real iptables rules: the join of requests and writes, the command's
// requests marked, leases and Secret data left out, a rule written a
// second after the exit waited for, and the command's exit code.
func TestRun(t *testing.T) {
	ns := testNetNS(t)
	inNS(t, ns, "-t", "nat", "-N", "KUBE-NODEPORTS")
	srv, _ := etcdtest.StartT(t)
	audit := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(audit, auditLine(time.Now(), "old", "create", "kubectl/v1", hostIP,
		&auditv1.ObjectReference{Resource: "configmaps", Namespace: "default", Name: "before", APIVersion: "v1"}, 201, "1", "before"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envHelper, "1")
	t.Setenv(envEtcd, srv.Endpoint)
	t.Setenv(envAudit, audit)
	t.Setenv(envNetNS, ns)
	var cmdOut bytes.Buffer
	o := Options{
		Command: []string{os.Args[0], "-test.run=^$"}, CommandOut: &cmdOut,
		Settle: 1500 * time.Millisecond, For: 20 * time.Second,
		Source: &Source{AuditLogs: []string{audit}, Nodes: []Node{{Name: "devk-control-plane", NetNS: ns, IP: nodeIP}},
			Etcd: etcdwatch.ConnOptions{Endpoints: []string{srv.Endpoint}, Home: "/nonexistent", KubeadmDir: "/nonexistent"}},
	}
	res, err := Run(context.Background(), o, phase.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, cmdOut.String())
	}
	if res.ExitCode != 3 {
		t.Errorf("exit code %d, want the command's 3\n%s", res.ExitCode, cmdOut.String())
	}
	if !res.Settled || res.End.Sub(res.Exit) < 2*time.Second {
		t.Errorf("settled %v %s after the exit: the rule came a second after it, then %s of quiet", res.Settled, res.End.Sub(res.Exit), o.Settle)
	}
	byID := map[string]Request{}
	for _, r := range res.Requests {
		byID[r.AuditID] = r
	}
	if _, ok := byID["old"]; ok {
		t.Error("a line written before the trace is in it")
	}
	rev := map[string]int64{}
	for _, w := range res.Etcd {
		rev[w.Key] = w.Revision
		if w.Resource == "leases" || w.Resource == masterLeases {
			t.Errorf("a lease: %+v", w)
		}
		if w.Resource == "secrets" && (strings.Contains(w.Diff, "c2VjcmV0") || !strings.Contains(w.Diff, "redacted")) {
			t.Errorf("the Secret's data shows:\n%s", w.Diff)
		}
	}
	for id, key := range map[string]string{"svc": "/registry/services/specs/default/web", "slice": "/registry/endpointslices/default/web-x7k2p", "bind": "/registry/pods/default/web-abc"} {
		r, ok := byID[id]
		if !ok {
			t.Errorf("request %s missing: %+v", id, res.Requests)
			continue
		}
		if len(r.Etcd) != 1 || r.Etcd[0] != rev[key] {
			t.Errorf("request %s made %v, want %s's revision %d", id, r.Etcd, key, rev[key])
		}
	}
	if !byID["svc"].FromCommand || byID["slice"].FromCommand {
		t.Errorf("the command's request is marked %v, the controller's %v", byID["svc"].FromCommand, byID["slice"].FromCommand)
	}
	if len(res.Nodes) != 1 || len(res.Nodes[0].IPTables.Added) != 1 || res.Nodes[0].IPTables.Added[0].Chain != "KUBE-NODEPORTS" ||
		!strings.Contains(res.Nodes[0].IPTables.Added[0].Rule, "--dport 30080") {
		t.Errorf("nodes: %+v", res.Nodes)
	}
	var text bytes.Buffer
	if err := WriteText(&text, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(exit 3)", "kubectl CREATE v1/services default/web → 201", "[command]",
		"etcd ADDED /registry/endpointslices/default/web-x7k2p", "iptables -t nat KUBE-NODEPORTS", "+ -A KUBE-NODEPORTS -p tcp"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, text.String())
		}
	}
	var doc bytes.Buffer
	if err := output.Write(&doc, output.JSON, res); err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(doc.Bytes(), &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"requests", "etcd", "nodes", "events"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("the JSON has no %q", k)
		}
	}
	t.Logf("%s", text.String())
}

// TestBadInput: the errors before anything is traced.
func TestBadInput(t *testing.T) {
	home := t.TempDir()
	missing := filepath.Join(t.TempDir(), "audit.log")
	tests := []struct {
		name    string
		o       Options
		wantErr string
	}{
		{"no command", Options{Settle: time.Second, For: time.Minute}, "give the command to trace after --"},
		{"command and --follow", Options{Command: []string{"true"}, Follow: true, Live: os.Stdout, Settle: time.Second, For: time.Minute}, "not both"},
		{"settle longer than for", Options{Command: []string{"true"}, Settle: time.Minute, For: time.Second}, "could never settle"},
		{"no cluster", Options{Command: []string{"true"}, Home: home, Name: "nope", Settle: time.Second, For: time.Minute}, "nope"},
		{"no audit log yet", Options{Command: []string{"true"}, Settle: time.Second, For: time.Minute, Source: &Source{AuditLogs: []string{missing}}},
			"the next `devk up`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.o, phase.Options{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	t.Run("audit off", func(t *testing.T) {
		cfg := layout.NewConfig("off")
		if err := cfg.PlaceAmong(nil, nil); err != nil {
			t.Fatal(err)
		}
		no := false
		cfg.Spec.Audit.Enabled = &no
		files := layout.HomeFiles(home).Cluster("off")
		if err := os.MkdirAll(files.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(cfg)
		if err := os.WriteFile(files.ConfigFile(), data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ClusterSource(home, "off")
		if !errors.Is(err, ErrNoAudit) || !strings.Contains(err.Error(), "audit.enabled: false") || !strings.Contains(err.Error(), "devk up --config") {
			t.Fatalf("error %v", err)
		}
	})
}

// TestFollow: --follow prints a write another client makes, with the
// client, within a second.
func TestFollow(t *testing.T) {
	srv, cli := etcdtest.StartT(t)
	audit := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(audit, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var live syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Options{Follow: true, Live: &live, Settle: DefaultSettle, For: DefaultFor, NoNodes: true,
			Source: &Source{AuditLogs: []string{audit},
				Etcd: etcdwatch.ConnOptions{Endpoints: []string{srv.Endpoint}, Home: "/nonexistent", KubeadmDir: "/nonexistent"}}}, phase.Options{})
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(time.Second) // following from now on
	start := time.Now()
	resp, err := cli.Put(context.Background(), "/registry/configmaps/default/x", string(etcdtest.MustEncode(etcdtest.ConfigMap("default", "x", 1))))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(audit, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(auditLine(start, "cm", "create", "kubectl/v1.34.4 (linux/amd64) kubernetes/abc", hostIP,
		&auditv1.ObjectReference{Resource: "configmaps", Namespace: "default", Name: "x", APIVersion: "v1"}, 201, fmt.Sprint(resp.Header.Revision), "x"))
	f.Close()
	want := fmt.Sprintf("etcd ADDED /registry/configmaps/default/x (revision %d) by kubectl", resp.Header.Revision)
	for !strings.Contains(live.String(), want) {
		if time.Since(start) > time.Second {
			t.Fatalf("not printed within a second:\n%s", live.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(live.String(), "kubectl CREATE v1/configmaps default/x → 201") {
		t.Errorf("the request is not printed:\n%s", live.String())
	}
}
