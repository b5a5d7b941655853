package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/build"
	"github.com/devk/devk/certs"
	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/etcdwatch/etcdtest"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/output"
	"github.com/devk/devk/pki"
)

// kubeadmDir writes kubeadm's layout (the certificate set, no
// kubeconfigs, an empty manifests dir) under a temporary directory.
func kubeadmDir(t *testing.T) CertsTask {
	t.Helper()
	dir := t.TempDir()
	f := CertsTask{PKIDir: filepath.Join(dir, "pki"), KubeconfigDir: dir, ManifestsDir: filepath.Join(dir, "manifests")}
	cfg := pki.Config{NodeName: "cp1", ServiceIP: net.ParseIP("10.96.0.1"), AdvertiseIP: net.ParseIP("10.250.0.2"), DNSDomain: "cluster.local"}
	for _, s := range pki.Specs(cfg) {
		if _, err := pki.Ensure(f.PKIDir, s, time.Now(), true); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(f.ManifestsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRunCerts: the agent's certs task writes one line whose result is
// the report certs.Inspect gives on the same files, through JSON (as the
// client reads it from the pod's log).
func TestRunCerts(t *testing.T) {
	f := kubeadmDir(t)
	var out bytes.Buffer
	if err := Run(context.Background(), Task{Kind: KindCerts, Certs: &f}, nil, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("the agent wrote %d lines, want 1:\n%s", n, out.String())
	}
	var line Line
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || line.Error != "" {
		t.Fatalf("line %q: %v", out.String(), err)
	}
	var got certs.Report
	if err := json.Unmarshal(line.Result, &got); err != nil {
		t.Fatal(err)
	}
	n := layout.Kubeadm(f.KubeconfigDir)
	n.ManifestsDir = f.ManifestsDir
	want, err := certs.Inspect(n, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Certs) != len(want.Certs) || len(got.CAs) != len(want.CAs) || len(got.Certs) < 10 {
		t.Fatalf("the agent's report has %d certificates and %d CAs, certs.Inspect's %d and %d", len(got.Certs), len(got.CAs), len(want.Certs), len(want.CAs))
	}
	for i, c := range want.Certs {
		g := got.Certs[i]
		if g.Name != c.Name || g.Path != c.Path || !g.NotAfter.Equal(c.NotAfter) || g.Missing != c.Missing || (time.Duration(g.Residual)-time.Duration(c.Residual)).Abs() > 2*time.Second {
			t.Errorf("certificate %d: the agent's %+v, certs.Inspect's %+v", i, g.Entry, c.Entry)
		}
	}
}

// TestRunError: a task that fails writes its error as the line, and Run
// returns it (the agent's exit status).
func TestRunError(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := Run(context.Background(), Task{Kind: KindCerts, Certs: &CertsTask{PKIDir: dir, KubeconfigDir: dir, ManifestsDir: dir}}, nil, &out)
	if err == nil {
		t.Fatal("the agent read certificates from an empty directory")
	}
	var line Line
	if jerr := json.Unmarshal(out.Bytes(), &line); jerr != nil || line.Error != err.Error() || line.Result != nil {
		t.Fatalf("line %q for error %v", out.String(), err)
	}
}

func TestValidateAndMounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    Task
		want string
	}{
		{"unknown", Task{Kind: "shell"}, `agent task "shell": devk's agent has no such task`},
		{"no dirs", Task{Kind: KindCerts}, "no directories"},
		{"relative", Task{Kind: KindCerts, Certs: &CertsTask{PKIDir: "pki", KubeconfigDir: "/etc/kubernetes", ManifestsDir: "/etc/kubernetes/manifests"}}, `pkiDir "pki" is not a clean absolute path`},
		{"climbing", Task{Kind: KindCerts, Certs: &CertsTask{PKIDir: "/etc/kubernetes/../pki", KubeconfigDir: "/etc/kubernetes", ManifestsDir: "/etc/kubernetes/manifests"}}, "is not a clean absolute path"},
		{"root", Task{Kind: KindCerts, Certs: &CertsTask{PKIDir: "/", KubeconfigDir: "/etc/kubernetes", ManifestsDir: "/etc/kubernetes/manifests"}}, "is not a clean absolute path"},
	} {
		if err := tc.t.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	kubeadm := Task{Kind: KindCerts, Certs: &CertsTask{PKIDir: "/etc/kubernetes/pki", KubeconfigDir: "/etc/kubernetes", ManifestsDir: "/etc/kubernetes/manifests"}}
	if got := kubeadm.Mounts(); !slices.Equal(got, []Mount{{Path: "/etc/kubernetes"}}) {
		t.Errorf("kubeadm's layout mounts %v, want /etc/kubernetes read-only alone", got)
	}
	devk := Task{Kind: KindCerts, Certs: &CertsTask{PKIDir: "/h/clusters/x/pki", KubeconfigDir: "/h/clusters/x", ManifestsDir: "/h/clusters/x-manifests"}}
	if got := devk.Mounts(); !slices.Equal(got, []Mount{{Path: "/h/clusters/x"}, {Path: "/h/clusters/x-manifests"}}) {
		t.Errorf("a sibling with a common prefix: %v", got)
	}
}

// staticBinary builds a tiny static program (CGO_ENABLED=0).
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module devk.test/static\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "static")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestImage: the agent image of one binary has one digest whatever the
// cache (a function of the binary), holds it at BinaryPath and runs
// `devk agent`; a dynamically linked binary is refused with the fix.
func TestImage(t *testing.T) {
	bin := staticBinary(t)
	a, err := Image(t.TempDir(), bin, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Image(t.TempDir(), bin, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("one binary, two digests: %s and %s", da, db)
	}
	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{BinaryPath}) || !slices.Equal(cf.Config.Cmd, []string{"agent"}) || !cf.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("entrypoint %v, cmd %v, created %v", cf.Config.Entrypoint, cf.Config.Cmd, cf.Created)
	}
	layers, err := a.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}

	dynamic := ""
	for _, p := range []string{"/bin/true", "/usr/bin/true", "/bin/sh"} {
		if _, err := os.Stat(p); err == nil {
			dynamic = p
			break
		}
	}
	if dynamic == "" {
		t.Fatal("no dynamically linked program found to refuse")
	}
	if err := RequireStatic(dynamic); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("RequireStatic(%s) = %v, want the CGO_ENABLED=0 fix", dynamic, err)
	}
	if _, err := Image(t.TempDir(), dynamic, "v1.0.0"); err == nil {
		t.Errorf("an image of the dynamic %s was made", dynamic)
	}
}

// TestDigestTask: a digest task is checked before a pod is made, and
// mounts its manifests and its runtime socket's directory, read-only.
func TestDigestTask(t *testing.T) {
	ok := DigestTask{ManifestsDir: "/etc/kubernetes/manifests", CRISocket: "/run/containerd/containerd.sock", NodeName: "cp1", Binaries: []string{"kube-apiserver", "etcd"}}
	if err := (Task{Kind: KindDigest, Digest: &ok}).Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (Task{Kind: KindDigest, Digest: &ok}).Mounts(); !slices.Equal(got, []Mount{{Path: "/etc/kubernetes/manifests"}, {Path: "/run/containerd"}}) {
		t.Errorf("host paths %v", got)
	}
	for name, mutate := range map[string]func(*DigestTask){
		"not a static pod": func(d *DigestTask) { d.Binaries = []string{"kubectl"} },
		"node name":        func(d *DigestTask) { d.NodeName = "../x" },
		"socket":           func(d *DigestTask) { d.CRISocket = "run/containerd.sock" },
	} {
		d := ok
		d.Binaries = slices.Clone(ok.Binaries)
		mutate(&d)
		if err := (Task{Kind: KindDigest, Digest: &d}).Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, d)
		}
	}
}

// TestRunEtcd: the etcd task reads a TLS etcd with the API server's
// client certificate, as the node's API server does, and returns what
// `devk etcd get` and `ls` print.
func TestRunEtcd(t *testing.T) {
	dir := t.TempDir()
	for _, sp := range pki.Specs(pki.Config{NodeName: "cp1", AdvertiseIP: net.ParseIP("127.0.0.1"), ServiceIP: net.ParseIP("10.96.0.1"), DNSDomain: "cluster.local"}) {
		if sp.Name == "etcd/ca" || sp.Name == "etcd/server" || sp.Name == "apiserver-etcd-client" {
			if _, err := pki.Ensure(dir, sp, time.Now(), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv, err := etcdtest.StartTLS(t.TempDir(), &etcdtest.TLS{CA: pki.CertPath(dir, "etcd/ca"), Cert: pki.CertPath(dir, "etcd/server"), Key: pki.KeyPath(dir, "etcd/server")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn := layout.Etcd{Endpoints: []string{srv.Endpoint}, CACert: pki.CertPath(dir, "etcd/ca"), Cert: pki.CertPath(dir, "apiserver-etcd-client"), Key: pki.KeyPath(dir, "apiserver-etcd-client")}
	e := EtcdTask{Conn: conn, Format: output.JSON}
	cli, err := etcdwatch.Connect(context.Background(), etcdwatch.ConnOptions{Endpoints: conn.Endpoints, CACert: conn.CACert, Cert: conn.Cert, Key: conn.Key, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}, Data: map[string]string{"a": "from-the-node"}}
	if _, err := cli.Put(context.Background(), "/registry/configmaps/default/x", string(etcdtest.MustEncode(cm))); err != nil {
		t.Fatal(err)
	}
	cli.Close()

	task := Task{Kind: KindEtcd, Etcd: &e}
	if !task.HostNetwork() {
		t.Error("the etcd task's pod is not in the node's network, where etcd listens on loopback")
	}
	run := func(verb, target string) string {
		t.Helper()
		e.Verb, e.Target = verb, target
		var out bytes.Buffer
		if err := Run(context.Background(), task, nil, &out); err != nil {
			t.Fatalf("%s %s: %v\n%s", verb, target, err, out.String())
		}
		var line Line
		var r EtcdResult
		if err := json.Unmarshal(out.Bytes(), &line); err != nil || json.Unmarshal(line.Result, &r) != nil {
			t.Fatalf("line %q: %v", out.String(), err)
		}
		return r.Output
	}
	if got := run("get", "cm/default/x"); !strings.Contains(got, `"from-the-node"`) || !strings.Contains(got, `"key":"/registry/configmaps/default/x"`) {
		t.Errorf("get printed %s", got)
	}
	if got := run("ls", "cm"); !strings.Contains(got, "/registry/configmaps/default/x") {
		t.Errorf("ls printed %s", got)
	}

	// diff: every key changed between two revisions.
	cli, err = etcdwatch.Connect(context.Background(), etcdwatch.ConnOptions{Endpoints: conn.Endpoints, CACert: conn.CACert, Cert: conn.Cert, Key: conn.Key, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	before := cli.Revision
	cm.Data["a"] = "changed-on-the-node"
	put, err := cli.Put(context.Background(), "/registry/configmaps/default/x", string(etcdtest.MustEncode(cm)))
	if err != nil {
		t.Fatal(err)
	}
	// Written after the diff's window: not in it.
	if _, err := cli.Put(context.Background(), "/registry/configmaps/default/later", string(etcdtest.MustEncode(cm))); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	e.Rev, e.UntilRev = before, put.Header.Revision
	got := run(EtcdDiff, "")
	var diff etcdwatch.DiffResult
	if err := json.Unmarshal([]byte(got), &diff); err != nil || diff.FromRevision != before || diff.ToRevision != put.Header.Revision || len(diff.Changes) != 1 || diff.Changes[0].Key != "/registry/configmaps/default/x" {
		t.Errorf("diff from %d to %d printed %s (%v); want the one key changed between", before, put.Header.Revision, got, err)
	}
	e.Rev, e.UntilRev = 0, 0
	if err := (Task{Kind: KindEtcd, Etcd: &EtcdTask{Verb: EtcdDiff, Conn: conn}}).Validate(); err == nil {
		t.Error("a diff from no revision validated")
	}
	var out bytes.Buffer
	e.Verb, e.Target = "get", "cm/default/nope"
	out.Reset()
	if err := Run(context.Background(), task, nil, &out); err == nil || !strings.Contains(out.String(), `"error"`) {
		t.Errorf("a missing key: %v, %s", err, out.String())
	}
}

// TestSwapTask: a swap task is checked before a pod is made; it mounts
// the manifests dir's parent read-write (the swap renames between the
// manifests and its journal beside them), the PKI under it read-only
// again, the runtime socket's directory read-only and devk's lock dir,
// made if missing.
func TestSwapTask(t *testing.T) {
	ok := SwapTask{ManifestsDir: "/etc/kubernetes/manifests", CRISocket: "/run/containerd/containerd.sock", NodeName: "cp1", PKIDir: "/etc/kubernetes/pki",
		Components: []string{"apiserver"}, State: &build.StateFile{}}
	task := Task{Kind: KindSwap, Swap: &ok}
	if err := task.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []Mount{{Path: "/etc/kubernetes", Write: true}, {Path: "/etc/kubernetes/pki"}, {Path: "/run/containerd"}, {Path: "/run/devk/locks", Write: true, Create: true}}
	if got := task.Mounts(); !slices.Equal(got, want) {
		t.Errorf("mounts %v, want %v", got, want)
	}
	if !task.UsesAPI() || !task.HostNetwork() {
		t.Error("a swap's agent needs the API (mirror pods) and the node's network (its probes)")
	}
	// A PKI outside the parent needs no mount.
	other := ok
	other.PKIDir = "/srv/pki"
	if got := (Task{Kind: KindSwap, Swap: &other}).Mounts(); len(got) != 3 {
		t.Errorf("a PKI outside the manifests' parent: %v", got)
	}
	for name, mutate := range map[string]func(*SwapTask){
		"no components": func(s *SwapTask) { s.Components = nil },
		"an addon":      func(s *SwapTask) { s.Components = []string{"kube-proxy"} },
		"kubectl":       func(s *SwapTask) { s.Components = []string{"kubectl"} },
		"no state":      func(s *SwapTask) { s.State = nil },
		"relative":      func(s *SwapTask) { s.ManifestsDir = "manifests" },
		"top level":     func(s *SwapTask) { s.ManifestsDir = "/manifests" },
		"socket":        func(s *SwapTask) { s.CRISocket = "/run/../containerd.sock" },
	} {
		bad := ok
		mutate(&bad)
		if err := (Task{Kind: KindSwap, Swap: &bad}).Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	rollback := ok
	rollback.State, rollback.Rollback = nil, true
	if err := (Task{Kind: KindSwap, Swap: &rollback}).Validate(); err != nil {
		t.Errorf("a rollback needs no state: %v", err)
	}
	for name, p := range map[string]PullTask{
		"a tag":    {CRISocket: "/run/containerd/containerd.sock", Refs: []string{"registry.k8s.io/pause:3.10"}},
		"no image": {CRISocket: "/run/containerd/containerd.sock"},
		"socket":   {CRISocket: "containerd.sock", Refs: []string{"r/x@sha256:" + strings.Repeat("a", 64)}},
	} {
		if err := (Task{Kind: KindPull, Pull: &p}).Validate(); err == nil {
			t.Errorf("pull, %s: accepted", name)
		}
	}
}
