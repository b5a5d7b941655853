package status

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/internal/testutil"
)

// The images of the status tests' static pods, by digest as up writes
// them.
const (
	statusEtcdImage      = "127.0.0.1:5000/etcd@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	statusAPIServerImage = "127.0.0.1:5000/kube-apiserver@sha256:aaaaaaaaaaaa0000000000000000000000000000000000000000000000000000"
	statusSwappedImage   = "127.0.0.1:5000/kube-apiserver@sha256:bbbbbbbbbbbb0000000000000000000000000000000000000000000000000000"
	statusCMImage        = "127.0.0.1:5000/kube-controller-manager@sha256:cccccccccccc0000000000000000000000000000000000000000000000000000"
	statusSchedImage     = "127.0.0.1:5000/kube-scheduler@sha256:dddddddddddd0000000000000000000000000000000000000000000000000000"
	statusCoreDNSImage   = "127.0.0.1:5000/coredns@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	statusKubeProxyImage = "127.0.0.1:5000/kube-proxy@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	statusOldProxyImage  = "127.0.0.1:5000/kube-proxy@sha256:eeeeeeeeeeee0000000000000000000000000000000000000000000000000000"
)

// statusCluster is a cluster in home of node 0 (st-control-plane), a
// second control-plane node (st-cp2, as a control-plane join will make
// one) and a worker (st-worker), with the addons' images.
func statusCluster(t *testing.T, home string) *cluster.Cluster {
	t.Helper()
	cfg := layout.NewConfig("st")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct{ name, role string }{{"st-cp2", layout.RoleControlPlane}, {"st-worker", layout.RoleWorker}} {
		if _, err := cfg.AddNode(n.name, n.role, nil); err != nil {
			t.Fatal(err)
		}
	}
	cfg.OwnRuntime = true
	cfg.Images = map[string]string{addons.CoreDNS: statusCoreDNSImage, addons.KubeProxy: statusKubeProxyImage}
	p := layout.HomeFiles(home).Cluster("st")
	cfg.CRISocket = p.FirstNode().ContainerdSocket()
	return &cluster.Cluster{Config: cfg, Files: p, Home: home}
}

// writeManifests writes node n's manifests of pods, by up's renderer,
// naming images.
func writeManifests(t *testing.T, c *cluster.Cluster, n cluster.Node, images map[string]string) {
	t.Helper()
	if err := os.MkdirAll(n.Files.Manifests(), 0o755); err != nil {
		t.Fatal(err)
	}
	for pod, img := range images {
		data, err := controlplane.Manifest(pod, controlplane.ManifestInput{Config: c.Config, Node: n.Net, Files: n.Files, Image: img})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(n.Files.ManifestPath(pod), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// kubeletContainer is a container as the kubelet makes it and cri's
// Containers reports it: named and labelled after its pod, age minutes
// old.
func kubeletContainer(id, pod, container string, state runtimeapi.ContainerState, attempt uint32, imageRef string, age int) cri.Container {
	return cri.Container{ID: id, Name: container, PodName: pod, PodNamespace: metav1.NamespaceSystem, State: state,
		Attempt: attempt, ImageRef: imageRef, CreatedAt: time.Now().Add(-time.Duration(age) * time.Minute)}
}

// newestFirst sorts cts as cri's Containers lists them.
func newestFirst(cts ...cri.Container) []cri.Container {
	for i := 1; i < len(cts); i++ {
		for k := i; k > 0 && cts[k].CreatedAt.After(cts[k-1].CreatedAt); k-- {
			cts[k], cts[k-1] = cts[k-1], cts[k]
		}
	}
	return cts
}

// statusPod is a kube-system pod as the API server has it: ready or not
// as its kubelet reported.
func statusPod(name, node string, ready bool, mirror bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
	if mirror {
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	}
	return p
}

func componentByName(cs []Component, name string) *Component {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// TestNodeRows: each node's rows come from its own manifests and its own
// runtime's containers: node 0's components with the health of devk's
// own checks, another control-plane node's with its mirror pods'
// readiness, a worker's addon pods alone; the newest container of each
// pod, "(differs)" material where it runs another image than its
// manifest names. The containers are the lists cri's Containers returns
// (a real containerd with kubelet-made containers needs root, a kubelet
// and a cluster: the e2e suite reads a real one); the API server is
// client-go's fake with the addons applied by up's own code (a real one
// needs etcd and the apiserver binary).
func TestNodeRows(t *testing.T) {
	c := statusCluster(t, t.TempDir())
	ns, err := c.AllNodes()
	if err != nil {
		t.Fatal(err)
	}
	n0, cp2, worker := ns[0], ns[1], ns[2]
	writeManifests(t, c, n0, map[string]string{"etcd": statusEtcdImage, "kube-apiserver": statusAPIServerImage,
		"kube-controller-manager": statusCMImage, "kube-scheduler": statusSchedImage})
	writeManifests(t, c, cp2, map[string]string{"etcd": statusEtcdImage, "kube-apiserver": statusAPIServerImage})

	cs := fake.NewClientset()
	// The addons as up's phases apply them (cluster/internal/addons'
	// tests check the objects).
	for name, apply := range map[string]func(context.Context, kubernetes.Interface, layout.Config, string, *addons.Count) error{
		addons.KubeProxy: addons.ApplyKubeProxy, addons.CoreDNS: addons.ApplyCoreDNS} {
		if err := apply(context.Background(), cs, c.Config, c.Config.Images[name], &addons.Count{}); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
	}
	for _, p := range []*corev1.Pod{
		statusPod(kube.MirrorPodName("etcd", "st-cp2"), "st-cp2", true, true),
		statusPod(kube.MirrorPodName("kube-apiserver", "st-cp2"), "st-cp2", false, true),
		statusPod("kube-proxy-a1b2c", "st-control-plane", true, false),
		statusPod("kube-proxy-q9z4m", "st-worker", false, false),
		statusPod("coredns-7c9f-x2v4q", "st-worker", true, false),
	} {
		if _, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	api := readStatusAPI(context.Background(), cs)
	if api.err != nil || api.images[addons.KubeProxy] != statusKubeProxyImage || api.images[addons.CoreDNS] != statusCoreDNSImage {
		t.Fatalf("the API's view: images %v, %v", api.images, api.err)
	}

	running, exited := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED
	cp0 := "st-control-plane"
	node0Containers := newestPerContainer(newestFirst(
		kubeletContainer("e0", kube.MirrorPodName("etcd", cp0), "etcd", running, 0, statusEtcdImage, 30),
		// The apiserver's first container exited; its restart runs a
		// swapped-in image its manifest does not name.
		kubeletContainer("a0", kube.MirrorPodName("kube-apiserver", cp0), "kube-apiserver", exited, 0, statusAPIServerImage, 30),
		kubeletContainer("a1", kube.MirrorPodName("kube-apiserver", cp0), "kube-apiserver", running, 1, statusSwappedImage, 5),
		kubeletContainer("c0", kube.MirrorPodName("kube-controller-manager", cp0), "kube-controller-manager", running, 0, statusCMImage, 30),
		kubeletContainer("p0", "kube-proxy-a1b2c", "kube-proxy", running, 0, statusKubeProxyImage, 20),
		// Another node's static pod of the same name and a pod that is
		// no addon: not node 0's rows.
		kubeletContainer("x0", kube.MirrorPodName("etcd", "st-cp2"), "etcd", running, 0, statusEtcdImage, 30),
		kubeletContainer("m0", "metrics-server-5d9f-k2j4h", "metrics-server", running, 0, "r/metrics-server@sha256:1", 10),
	))
	health := map[string]error{"kube-scheduler": errors.New("connection refused")}
	comps := nodeComponents(n0, node0Containers, func(pod string) error { return health[pod] })
	want := []Component{
		{Name: "etcd", Manifest: statusEtcdImage, Running: statusEtcdImage, State: "running", Healthy: true},
		{Name: "kube-apiserver", Manifest: statusAPIServerImage, Running: statusSwappedImage, State: "running", Healthy: true, Restarts: 1},
		{Name: "kube-controller-manager", Manifest: statusCMImage, Running: statusCMImage, State: "running", Healthy: true},
		{Name: "kube-scheduler", Manifest: statusSchedImage, State: "absent", Problem: "connection refused"},
	}
	if len(comps) != len(want) {
		t.Fatalf("node 0's components: %+v", comps)
	}
	for i := range want {
		if comps[i] != want[i] {
			t.Errorf("node 0's %s:\n got %+v\nwant %+v", want[i].Name, comps[i], want[i])
		}
	}
	if got := nodeAddons(node0Containers, api); len(got) != 1 || got[0].Pod != "kube-proxy-a1b2c" || got[0].Manifest != statusKubeProxyImage ||
		got[0].Running != statusKubeProxyImage || !got[0].Healthy || got[0].State != "running" {
		t.Errorf("node 0's addons: %+v", got)
	}

	// The second control plane: its own manifests (no controller-manager
	// or scheduler yet), its own containers, its mirror pods' readiness.
	cp2Containers := newestPerContainer(newestFirst(
		kubeletContainer("e1", kube.MirrorPodName("etcd", "st-cp2"), "etcd", running, 0, statusEtcdImage, 10),
		kubeletContainer("a2", kube.MirrorPodName("kube-apiserver", "st-cp2"), "kube-apiserver", running, 0, statusAPIServerImage, 10),
	))
	comps = nodeComponents(cp2, cp2Containers, func(pod string) error { return api.ready(kube.MirrorPodName(pod, cp2.Name())) })
	if len(comps) != len(cluster.StaticPods) {
		t.Fatalf("a control-plane node shows every static pod: %+v", comps)
	}
	if e := componentByName(comps, "etcd"); !e.Healthy || e.Running != statusEtcdImage || e.Manifest != statusEtcdImage {
		t.Errorf("st-cp2's etcd: %+v", e)
	}
	if a := componentByName(comps, "kube-apiserver"); a.Healthy || a.Problem != "pod kube-apiserver-st-cp2 is not Ready" || a.State != "running" {
		t.Errorf("st-cp2's apiserver, whose mirror pod is not Ready: %+v", a)
	}
	if s := componentByName(comps, "kube-scheduler"); s.State != "absent" || s.Manifest != "" || s.Healthy ||
		s.Problem != "the API server has no pod kube-scheduler-st-cp2" {
		t.Errorf("st-cp2's scheduler, with neither manifest nor pod: %+v", s)
	}

	// The worker: no static pods; its kube-proxy restarted (the newest
	// container counts) and runs an older image than the DaemonSet names.
	workerContainers := newestPerContainer(newestFirst(
		kubeletContainer("p1", "kube-proxy-q9z4m", "kube-proxy", exited, 2, statusKubeProxyImage, 15),
		kubeletContainer("p2", "kube-proxy-q9z4m", "kube-proxy", exited, 3, statusOldProxyImage, 1),
		kubeletContainer("d1", "coredns-7c9f-x2v4q", "coredns", running, 0, statusCoreDNSImage, 15),
	))
	if comps := nodeComponents(worker, workerContainers, func(string) error { return nil }); comps != nil {
		t.Errorf("a worker has no static pods: %+v", comps)
	}
	workerAddons := nodeAddons(workerContainers, api)
	if len(workerAddons) != 2 || workerAddons[0].Name != addons.KubeProxy || workerAddons[1].Name != addons.CoreDNS {
		t.Fatalf("the worker's addons, kube-proxy first: %+v", workerAddons)
	}
	if p := workerAddons[0]; p.Pod != "kube-proxy-q9z4m" || p.State != "exited" || p.Restarts != 3 || p.Running != statusOldProxyImage ||
		p.Manifest != statusKubeProxyImage || p.Healthy || p.Problem != "pod kube-proxy-q9z4m is not Ready" {
		t.Errorf("the worker's kube-proxy: %+v", p)
	}
	if d := workerAddons[1]; d.Pod != "coredns-7c9f-x2v4q" || d.Running != statusCoreDNSImage || d.Manifest != statusCoreDNSImage || !d.Healthy {
		t.Errorf("the worker's coredns: %+v", d)
	}

	// The API server does not answer: the rows are the runtime's, the
	// health unknown and said so.
	down := statusAPI{err: errors.New("connection refused")}
	if got := nodeAddons(workerContainers, down); len(got) != 2 || got[0].Manifest != "" || got[0].Healthy ||
		got[0].Problem != "the API server does not answer: connection refused" || got[0].Running != statusOldProxyImage {
		t.Errorf("addons without the API: %+v", got)
	}
	// The runtime was not read: node 0 shows its manifests, absent, as
	// before status read more nodes; a worker shows nothing.
	comps = nodeComponents(n0, nil, func(string) error { return nil })
	if len(comps) != len(cluster.StaticPods) || comps[0].State != "absent" || comps[0].Manifest != statusEtcdImage {
		t.Errorf("node 0 without its runtime: %+v", comps)
	}
	if comps := nodeComponents(worker, nil, func(string) error { return nil }); comps != nil || nodeAddons(nil, api) != nil {
		t.Errorf("a worker without its runtime: %+v", comps)
	}
}

// hangingSocket is a unix socket at path that accepts connections and
// never answers, as a stuck containerd's.
func hangingSocket(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
}

// TestStatusContainersRuntimeDown: a node whose runtime does not answer
// gives a message that says what to do, within checkTimeout, with
// the real CRI client on real sockets: one nobody listens on, and one
// that accepts and never answers. The "containerd" that runs is a sleep
// started by supervise as devk starts containerd (the real one would
// answer).
func TestStatusContainersRuntimeDown(t *testing.T) {
	// A short home: a unix socket's path has at most 107 bytes.
	home, err := os.MkdirTemp("", "st")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	c := statusCluster(t, home)
	c.Config.Name = "st2" // so the message names --name
	ns, err := c.AllNodes()
	if err != nil {
		t.Fatal(err)
	}
	worker := ns[2]
	ctx := context.Background()
	bound := checkTimeout + time.Second

	t0 := time.Now()
	cts, msg := runtimeContainers(ctx, c, worker)
	if cts != nil || msg != "containerd is not running: `devk up --name st2` starts it again (its log: "+worker.Files.LogFile("containerd")+")" {
		t.Errorf("a worker whose containerd is stopped: %v, %q", cts, msg)
	}
	if took := time.Since(t0); took > bound {
		t.Errorf("a stopped containerd took status %s", took)
	}

	hangingSocket(t, worker.Files.ContainerdSocket())
	if _, _, err := worker.Files.Procs().Start(supervise.Process{Name: "containerd", Argv: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { worker.Files.Procs().Stop(context.Background(), "containerd", 0) })
	t0 = time.Now()
	cts, msg = runtimeContainers(ctx, c, worker)
	if cts != nil || !strings.HasPrefix(msg, "containerd runs but did not answer on "+worker.Files.ContainerdSocket()+" within 3s (") ||
		!strings.HasSuffix(msg, "see its log "+worker.Files.LogFile("containerd")) {
		t.Errorf("a worker whose containerd is stuck: %v, %q", cts, msg)
	}
	if took := time.Since(t0); took > bound {
		t.Errorf("a stuck containerd took status %s, more than checkTimeout", took)
	}

	// Node 0 on a runtime that is not devk's: cri's own message, which
	// says to start it or pass --cri-socket.
	c.Config.OwnRuntime = false
	c.Config.CRISocket = filepath.Join(home, "outside.sock")
	hangingSocket(t, c.Config.CRISocket)
	t0 = time.Now()
	if cts, msg := runtimeContainers(ctx, c, c.FirstNode()); cts != nil || !strings.Contains(msg, "CRI runtime at "+c.Config.CRISocket+" does not answer") ||
		!strings.Contains(msg, "--cri-socket") {
		t.Errorf("an outside runtime that does not answer: %v, %q", cts, msg)
	}
	if took := time.Since(t0); took > bound {
		t.Errorf("a stuck outside runtime took status %s", took)
	}
}

// TestGetNodesDown: a cluster of three nodes whose API server and
// runtimes are all down still has a status: every node, each with why
// its runtime was not read, and node 0's components (absent) at the top
// as before.
func TestGetNodesDown(t *testing.T) {
	home := t.TempDir()
	c := statusCluster(t, home)
	c.Config.Ports.APIServer = testutil.FreePort(t)
	if err := c.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	writeManifests(t, c, c.FirstNode(), map[string]string{"etcd": statusEtcdImage})
	t0 := time.Now()
	st, err := Get(context.Background(), cluster.Options{Home: home, Name: "st"})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 3*(checkTimeout+time.Second) {
		t.Errorf("status took %s", took)
	}
	if len(st.Nodes) != 3 {
		t.Fatalf("nodes: %+v", st.Nodes)
	}
	for _, n := range st.Nodes {
		if !strings.HasPrefix(n.RuntimeMessage, "containerd is not running: `devk up --name st` starts it again") {
			t.Errorf("node %s: runtime message %q", n.Name, n.RuntimeMessage)
		}
		if len(n.Addons) != 0 {
			t.Errorf("node %s: addons without a runtime: %+v", n.Name, n.Addons)
		}
	}
	if len(st.Components) != len(cluster.StaticPods) || st.Components[0].Manifest != statusEtcdImage || st.Components[0].State != "absent" ||
		st.Components[0].Healthy || len(st.Nodes[0].Components) != len(cluster.StaticPods) {
		t.Errorf("node 0's components: %+v", st.Components)
	}
	if len(st.Nodes[1].Components) != len(cluster.StaticPods) || st.Nodes[2].Components != nil {
		t.Errorf("st-cp2's components %+v, the worker's %+v", st.Nodes[1].Components, st.Nodes[2].Components)
	}
}

// TestTakenOutMessage: status says what to run for a server taken out,
// by why it may be out.
func TestTakenOutMessage(t *testing.T) {
	c := &cluster.Cluster{Config: layout.Config{Name: "ha", Network: layout.Network{Nodes: []layout.NodeNet{
		{Name: "ha-control-plane", Role: layout.RoleControlPlane},
		{Name: "ha-control-plane2", Role: layout.RoleControlPlane},
		{Name: "ha-control-plane3", Role: layout.RoleControlPlane, Leaving: true},
	}}}}
	for _, tc := range []struct{ node, status, want string }{
		{"ha-control-plane", "UP", ""},
		{"ha-control-plane", "DOWN", ""},
		{"ha-control-plane2", "DRAIN", "`devk up --name ha` (or the next `devk swap`) puts it back"},
		{"ha-control-plane2", "MAINT", "`devk up --name ha` (or the next `devk swap`) puts it back"},
		{"ha-control-plane3", "MAINT", "node ha-control-plane3 is being removed; `devk node remove --name ha ha-control-plane3` finishes it"},
	} {
		got := takenOutMessage(c, tc.node, tc.status)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s: %q, want %q", tc.node, tc.status, got, tc.want)
		}
	}
}

// TestNodeKubeProxyNamed: the kube-proxy pod of a node that runs its own
// tree's (addons.NodeKubeProxy) is shown beside the image its own
// DaemonSet names, not the cluster's kube-proxy's.
func TestNodeKubeProxyNamed(t *testing.T) {
	c := statusCluster(t, t.TempDir())
	const oldImage = "127.0.0.1:5000/kube-proxy@sha256:4444444444444444444444444444444444444444444444444444444444444444"
	cfg := c.Config
	cfg.Network.Nodes = slices.Clone(cfg.Network.Nodes)
	cfg.Network.Nodes[2].KubeProxyImage = oldImage
	old := cfg.Network.Nodes[2].Name
	cs := fake.NewClientset()
	if err := addons.ApplyKubeProxy(context.Background(), cs, cfg, statusKubeProxyImage, &addons.Count{}); err != nil {
		t.Fatal(err)
	}
	own := addons.NodeKubeProxy(old)
	for _, p := range []struct{ pod, ds string }{{"kube-proxy-a1b2c", addons.KubeProxy}, {own.Name + "-k4m2x", own.Name}} {
		pod := statusPod(p.pod, old, true, false)
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: p.ds, Controller: ptr.To(true)}}
		if _, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	api := readStatusAPI(context.Background(), cs)
	w, _ := addon.Lookup(addons.KubeProxy)
	for pod, want := range map[string]string{"kube-proxy-a1b2c": statusKubeProxyImage, own.Name + "-k4m2x": oldImage, "kube-proxy-gone": statusKubeProxyImage} {
		if got := api.named(pod, w); got != want {
			t.Errorf("pod %s: named %s, want %s", pod, got, want)
		}
	}
	// The nodes' own DaemonSets not read (the list failed): such a pod
	// names no image rather than the cluster's DaemonSet's.
	delete(api.images, own.Name)
	if got := api.named(own.Name+"-k4m2x", w); got != "" {
		t.Errorf("pod of %s, its DaemonSet not read: named %s, want none", own.Name, got)
	}
}
