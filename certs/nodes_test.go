package certs

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	certutil "k8s.io/client-go/util/cert"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// sharedCAs are the CA files a joining control-plane node downloads
// (kubeadm's download-certs; cluster/controlplanejoin.go).
var sharedCAs = []string{pki.CAName, "front-proxy-ca", "etcd/ca"}

// fixtureNodes makes a cluster's control-plane nodes as devk lays them
// out: the first one's files by fixturePKI (every certificate and the
// four kubeconfigs), each other node's as a control-plane join makes
// them: the first node's CAs copied, its own certificates issued from
// them for its own name and address, its admin, controller-manager and
// scheduler kubeconfigs (no super-admin.conf), and an API server
// manifest naming its files.
func fixtureNodes(t *testing.T, issued time.Time, names ...string) []layout.ControlPlaneNode {
	t.Helper()
	first := fixturePKI(t, issued)
	nodes := []layout.ControlPlaneNode{{Name: names[0], Node: first}}
	for i, name := range names[1:] {
		dir := t.TempDir()
		f := layout.Node{PKIDir: filepath.Join(dir, "pki"), Kubeconfig: filepath.Join(dir, AdminConf), ManifestsDir: filepath.Join(dir, "manifests")}
		for _, ca := range sharedCAs {
			for _, p := range []func(string, string) string{pki.CertPath, pki.KeyPath} {
				data, err := os.ReadFile(p(first.PKIDir, ca))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(p(f.PKIDir, ca)), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p(f.PKIDir, ca), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		cfg := pki.Config{NodeName: name, ServiceIP: net.ParseIP("10.96.0.1"), AdvertiseIP: net.ParseIP(fmt.Sprintf("10.250.0.%d", i+3)), DNSDomain: "cluster.local"}
		for _, s := range pki.Specs(cfg) {
			if s.IsCA() {
				continue
			}
			if _, err := pki.Ensure(f.PKIDir, s, issued, true); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range pki.KubeconfigSpecs(name) {
			if k.Name == "admin" || k.Name == "controller-manager" || k.Name == "scheduler" {
				writeKubeconfig(t, f, k, issued)
			}
		}
		if err := os.MkdirAll(f.ManifestsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeManifest(t, f, "kube-apiserver", "--tls-cert-file="+pki.CertPath(f.PKIDir, "apiserver"), "--tls-private-key-file="+pki.KeyPath(f.PKIDir, "apiserver"),
			"--proxy-client-cert-file="+pki.CertPath(f.PKIDir, "front-proxy-client"), "--advertise-address="+cfg.AdvertiseIP.String())
		nodes = append(nodes, layout.ControlPlaneNode{Name: name, Node: f})
	}
	return nodes
}

func serialOf(t *testing.T, path string) string {
	t.Helper()
	crts, err := certutil.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return crts[0].SerialNumber.Text(16)
}

// TestCheckExpirationNodes: every control-plane node's own certificates
// and its copy of the CAs, node by node, each row naming its node;
// super-admin.conf only where it is (the first node), not missing on the
// others; what expires is named <node>/<name>; a node without a PKI is
// an error that names it.
func TestCheckExpirationNodes(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := fixtureNodes(t, issued, "cp1", "cp2", "cp3")
	if err := os.Remove(filepath.Join(filepath.Dir(nodes[2].Node.Kubeconfig), "scheduler.conf")); err != nil {
		t.Fatal(err)
	}
	r, err := InspectNodes(nodes, issued.Add(300*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Nodes) != 3 || r.Nodes[1].Name != "cp2" || r.Nodes[1].Files != (Files{PKIDir: nodes[1].Node.PKIDir, KubeconfigDir: filepath.Dir(nodes[1].Node.Kubeconfig), ManifestsDir: nodes[1].Node.ManifestsDir}) {
		t.Errorf("report's nodes %+v", r.Nodes)
	}
	var order []string
	count := map[string]int{}
	apiserver := map[string]string{}
	for _, c := range r.Certs {
		if len(order) == 0 || order[len(order)-1] != c.Node {
			order = append(order, c.Node)
		}
		count[c.Node]++
		n := nodes[slices.IndexFunc(nodes, func(n layout.ControlPlaneNode) bool { return n.Name == c.Node })]
		if !strings.HasPrefix(c.Path, filepath.Dir(n.Node.Kubeconfig)+"/") {
			t.Errorf("%s of %s read from %s, not the node's own files", c.Name, c.Node, c.Path)
		}
		if c.Name == "super-admin.conf" && c.Node != "cp1" {
			t.Errorf("super-admin.conf listed on %s, which joined (missing %v)", c.Node, c.Missing)
		}
		if c.Name == "apiserver" {
			apiserver[c.Node] = c.Serial
			if !c.Renewable {
				t.Errorf("%s's apiserver not renewable from its copy of the CA: %s", c.Node, c.Why)
			}
		}
	}
	if !slices.Equal(order, []string{"cp1", "cp2", "cp3"}) {
		t.Errorf("rows in node order %v, want cp1, cp2, cp3 each together", order)
	}
	if count["cp1"] != 13 || count["cp2"] != 12 || count["cp3"] != 12 {
		t.Errorf("rows per node %v, want 13 on the first (super-admin.conf), 12 on the others", count)
	}
	if apiserver["cp1"] == apiserver["cp2"] || apiserver["cp2"] == apiserver["cp3"] || apiserver["cp2"] != serialOf(t, pki.CertPath(nodes[1].Node.PKIDir, "apiserver")) {
		t.Errorf("apiserver serials %v: want each node's own file", apiserver)
	}
	cas := map[string]int{}
	for _, ca := range r.CAs {
		cas[ca.Node]++
		if ca.Missing || ca.External {
			t.Errorf("%s's %s: missing %v, external %v", ca.Node, ca.Name, ca.Missing, ca.External)
		}
	}
	if cas["cp1"] != 3 || cas["cp2"] != 3 || cas["cp3"] != 3 {
		t.Errorf("CAs per node %v, want each node's three", cas)
	}
	if exp := r.ExpiringWithin(30 * 24 * time.Hour); !slices.Equal(exp, []string{"cp3/scheduler.conf"}) {
		t.Errorf("expiring within 30d: %v, want only cp3's missing scheduler.conf", exp)
	}
	if exp := r.ExpiringWithin(90 * 24 * time.Hour); len(exp) != 13+12+12 || !slices.Contains(exp, "cp2/apiserver") {
		t.Errorf("expiring within 90d: %v, want every node's every certificate", exp)
	}

	empty := layout.ControlPlaneNode{Name: "cp4", Node: layout.Node{PKIDir: t.TempDir()}}
	if _, err := InspectNodes(append(nodes, empty), time.Now()); err == nil || !strings.Contains(err.Error(), "node cp4: ") || !strings.Contains(err.Error(), "no ca.crt") {
		t.Errorf("a node without a PKI: %v", err)
	}
}

// TestRenewPlanAcrossNodes: every node's selection is checked before any
// node changes (a certificate node 3 cannot renew stops the renewal
// before node 1's runtime is even asked), a name only some nodes have is
// renewed where it is, and a name none has is an error.
func TestRenewPlanAcrossNodes(t *testing.T) {
	nodes := fixtureNodes(t, time.Now(), "cp1", "cp2", "cp3")
	var rns []RenewNode
	for _, n := range nodes {
		n.Node.CRISocket = filepath.Join(t.TempDir(), "none.sock")
		rns = append(rns, RenewNode{ControlPlaneNode: n})
	}
	plan := func(names ...string) ([]*nodeRenewal, error) {
		j := &RenewJob{RenewOptions: RenewOptions{Nodes: rns, Names: names, Now: time.Now}}
		return j.plan()
	}
	p, err := plan("super-admin.conf")
	if err != nil {
		t.Fatal(err)
	}
	if len(p[0].selected) != 1 || len(p[1].selected) != 0 || !slices.Equal(p[2].absent, []string{"super-admin.conf"}) {
		t.Errorf("super-admin.conf: selected %d, %d, %d (absent on cp3: %v); want the first node's alone", len(p[0].selected), len(p[1].selected), len(p[2].selected), p[2].absent)
	}
	if p, err = plan("apiserver", "admin.conf"); err != nil {
		t.Fatal(err)
	}
	for _, n := range p {
		if len(n.selected) != 2 || n.selected[0].Path != pki.CertPath(n.Node.PKIDir, "apiserver") {
			t.Errorf("%s: selected %+v, want its own apiserver and admin.conf", n.Name, n.selected)
		}
	}

	// Node 3's front-proxy CA is external there (its key not copied).
	if err := os.Remove(pki.KeyPath(nodes[2].Node.PKIDir, "front-proxy-ca")); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{}
	for _, n := range nodes {
		before[n.Name] = serialOf(t, pki.CertPath(n.Node.PKIDir, "front-proxy-client"))
	}
	_, err = Renew(context.Background(), RenewOptions{Nodes: rns, Names: []string{"front-proxy-client"}, Timeout: time.Second}, phase.Options{})
	if err == nil || !strings.Contains(err.Error(), "node cp3: front-proxy-client cannot be renewed here: its CA front-proxy-ca is external") {
		t.Errorf("renew with node 3's CA external: %v, want node 3 named before node 1 is touched", err)
	}
	for _, n := range nodes {
		if got := serialOf(t, pki.CertPath(n.Node.PKIDir, "front-proxy-client")); got != before[n.Name] {
			t.Errorf("%s's front-proxy-client changed", n.Name)
		}
	}
	_, err = Renew(context.Background(), RenewOptions{Nodes: rns, Names: []string{"scheduler-server"}}, phase.Options{})
	for _, want := range []string{"node cp1: ", "renew needs the cluster running", "not renewed on cp2, cp3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("renew with the first node's runtime down: %v, want it to say %q", err, want)
		}
	}
	for _, n := range nodes {
		for _, f := range []string{pki.ControllerManagerServer, pki.SchedulerServer} {
			os.Remove(pki.CertPath(n.Node.PKIDir, f))
		}
	}
	_, err = Renew(context.Background(), RenewOptions{Nodes: rns, Names: []string{pki.SchedulerServer}}, phase.Options{})
	if err == nil || !strings.Contains(err.Error(), `no certificate "scheduler-server" on any of cp1, cp2, cp3`) {
		t.Errorf("renew of a certificate no node has: %v", err)
	}
}

// fakeRuntime is a node's containerd and kubelet as renew sees them,
// served over gRPC on a unix socket as the real CRI is: the unit tests
// cannot run containerd and a kubelet (root, images, a cluster; the e2e
// suite runs the real ones). Its static pods each have a ready sandbox
// and a running container; like the kubelet, it makes a removed static
// pod's sandbox again at once (unless noRecreate).
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	node       string
	log        *eventLog
	noRecreate bool

	mu        sync.Mutex
	next      int
	sandboxes map[string]string // id -> pod (mirror) name
	running   map[string]string // container id -> sandbox id
}

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf(format, args...))
}

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func startFakeRuntime(t *testing.T, node string, log *eventLog, pods ...string) (*fakeRuntime, string) {
	t.Helper()
	f := &fakeRuntime{node: node, log: log, sandboxes: map[string]string{}, running: map[string]string{}}
	for _, p := range pods {
		f.start(kube.MirrorPodName(p, node))
	}
	sock := filepath.Join(t.TempDir(), "cri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return f, sock
}

// start runs a pod: a new sandbox and its container.
func (f *fakeRuntime) start(pod string) {
	f.next++
	sb, ct := fmt.Sprintf("sb%d", f.next), fmt.Sprintf("ct%d", f.next)
	f.sandboxes[sb], f.running[ct] = pod, sb
}

func (f *fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "0"}, nil
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for id, pod := range f.sandboxes {
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata:    &runtimeapi.PodSandboxMetadata{Name: pod, Namespace: "kube-system", Uid: id},
			Labels:      map[string]string{cri.LabelPodNamespace: "kube-system", cri.LabelPodName: pod},
			Annotations: map[string]string{"kubernetes.io/config.source": "file"}})
	}
	return resp, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListContainersResponse{}
	for id, sb := range f.running {
		pod := f.sandboxes[sb]
		if want := req.GetFilter().GetLabelSelector()[cri.LabelPodName]; want != "" && want != pod {
			continue
		}
		resp.Containers = append(resp.Containers, &runtimeapi.Container{Id: id, PodSandboxId: sb, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Labels: map[string]string{cri.LabelPodName: pod, cri.LabelPodNamespace: "kube-system"}})
	}
	return resp, nil
}

func (f *fakeRuntime) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log.add("%s stop %s grace %ds", f.node, f.sandboxes[f.running[req.ContainerId]], req.Timeout)
	delete(f.running, req.ContainerId)
	return &runtimeapi.StopContainerResponse{}, nil
}

func (f *fakeRuntime) StopPodSandbox(context.Context, *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (f *fakeRuntime) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pod, ok := f.sandboxes[req.PodSandboxId]
	if !ok {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	f.log.add("%s remove %s", f.node, pod)
	delete(f.sandboxes, req.PodSandboxId)
	for ct, sb := range f.running {
		if sb == req.PodSandboxId {
			delete(f.running, ct)
		}
	}
	if !f.noRecreate {
		f.start(pod)
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// TestRenewRollsNodeByNode: renew goes through the nodes in order, each
// renewed, its API server taken out of the load balancer, stopped with
// grace and restarted, verified and put back (waiting for its checks)
// before the next node is touched; a node a killed renewal left out is
// put back first. A failure on the second node puts its previous files
// back and its API server back (without waiting), keeps the first
// node's renewed files and leaves the third node alone.
func TestRenewRollsNodeByNode(t *testing.T) {
	for _, failSecond := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail second %v", failSecond), func(t *testing.T) {
			names := []string{"cp1", "cp2", "cp3"}
			nodes := fixtureNodes(t, time.Now(), names...)
			log := &eventLog{}
			serials := func() map[string]string {
				out := map[string]string{}
				for _, n := range nodes {
					out[n.Name] = serialOf(t, pki.CertPath(n.Node.PKIDir, "front-proxy-client"))
				}
				return out
			}
			before := serials()
			renewedYet := func() string {
				var done []string
				for n, s := range serials() {
					if s != before[n] {
						done = append(done, n)
					}
				}
				slices.Sort(done)
				return strings.Join(done, ",")
			}
			// The clock moves on an hour with each node's turn (its
			// take-out): a node renewed after others signs from the
			// time its turn comes.
			var turns atomic.Int64
			t0 := time.Now()
			clock := func() time.Time { return t0.Add(time.Duration(turns.Load()) * time.Hour) }
			var rns []RenewNode
			for i, n := range nodes {
				rt, sock := startFakeRuntime(t, n.Name, log, "kube-apiserver")
				rt.noRecreate = failSecond && i == 1
				name := n.Name
				n.Node.CRISocket = sock
				n.TakeOut = func(context.Context) error {
					log.add("%s take-out (renewed: %s)", name, renewedYet())
					turns.Add(1)
					return nil
				}
				n.PutBack = func(_ context.Context, untilUp bool) error {
					log.add("%s put-back until up %v", name, untilUp)
					return nil
				}
				rns = append(rns, RenewNode{ControlPlaneNode: n})
			}
			j, err := Renew(context.Background(), RenewOptions{Nodes: rns, Names: []string{"front-proxy-client"}, Timeout: time.Second, StopGrace: 2 * time.Second, Now: clock}, phase.Options{})
			want := []string{"cp1 put-back until up false", "cp2 put-back until up false", "cp3 put-back until up false",
				"cp1 take-out (renewed: cp1)", "cp1 stop kube-apiserver-cp1 grace 2s", "cp1 remove kube-apiserver-cp1", "cp1 put-back until up true",
				"cp2 take-out (renewed: cp1,cp2)", "cp2 stop kube-apiserver-cp2 grace 2s", "cp2 remove kube-apiserver-cp2"}
			if failSecond {
				// verify times out; the rollback restarts what is left
				// (nothing: the fake kubelet made no new sandbox).
				want = append(want, "cp2 put-back until up false")
				for _, s := range []string{"node cp2: ", "not in use after 1s", "put back the previous front-proxy-client", "renewed and in use already on cp1", "not renewed on cp3"} {
					if err == nil || !strings.Contains(err.Error(), s) {
						t.Errorf("error %v, want it to say %q", err, s)
					}
				}
				after := serials()
				if after["cp1"] == before["cp1"] || after["cp2"] != before["cp2"] || after["cp3"] != before["cp3"] {
					t.Errorf("serials before %v, after %v: want cp1 renewed, cp2 put back, cp3 untouched", before, after)
				}
			} else {
				want = append(want, "cp2 put-back until up true",
					"cp3 take-out (renewed: cp1,cp2,cp3)", "cp3 stop kube-apiserver-cp3 grace 2s", "cp3 remove kube-apiserver-cp3", "cp3 put-back until up true")
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range j.Renewed {
					// x509 keeps whole seconds
					if want := t0.Add(time.Duration(i)*time.Hour + pki.CertValidity).Truncate(time.Second); !r.NotAfter.Equal(want) {
						t.Errorf("%s's %s valid until %s, want %s: signed from its own turn's time", r.Node, r.Name, r.NotAfter, want)
					}
				}
			}
			if got := log.all(); !slices.Equal(got, want) {
				t.Errorf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			var rows []string
			for _, r := range j.Renewed {
				rows = append(rows, r.Node+"/"+r.Name)
			}
			for _, r := range j.Restarted {
				rows = append(rows, r.Node+"/"+r.Pod)
			}
			wantRows := []string{"cp1/front-proxy-client", "cp2/front-proxy-client", "cp3/front-proxy-client", "cp1/kube-apiserver", "cp2/kube-apiserver", "cp3/kube-apiserver"}
			if failSecond {
				wantRows = []string{"cp1/front-proxy-client", "cp1/kube-apiserver"}
			}
			if !slices.Equal(rows, wantRows) {
				t.Errorf("renewed and restarted %v, want %v", rows, wantRows)
			}
		})
	}
}
