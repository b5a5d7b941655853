package clustercmd

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/cluster/status"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/internal/layout"
)

// Images as a devk cluster's manifests and runtime name them.
const (
	etcdImage      = "127.0.0.1:5000/etcd@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	apiserverImage = "127.0.0.1:5000/kube-apiserver@sha256:aaaaaaaaaaaa0000000000000000000000000000000000000000000000000000"
	swappedImage   = "127.0.0.1:5000/kube-apiserver@sha256:bbbbbbbbbbbb0000000000000000000000000000000000000000000000000000"
	proxyImage     = "127.0.0.1:5000/kube-proxy@sha256:cccccccccccc0000000000000000000000000000000000000000000000000000"
	oldProxyImage  = "127.0.0.1:5000/kube-proxy@sha256:dddddddddddd0000000000000000000000000000000000000000000000000000"
)

// oneNodeStatus is a one-node cluster's status as status.Get returns it:
// node 0's components (one running what its manifest names, one running
// another image, one absent and unhealthy), and node 0's row in Nodes
// with its addons, which a one-node cluster's text does not show.
func oneNodeStatus() *status.Status {
	comps := []status.Component{
		{Name: "etcd", Manifest: etcdImage, Running: etcdImage, State: "running", Healthy: true, Restarts: 0},
		{Name: "kube-apiserver", Manifest: apiserverImage, Running: swappedImage, Version: "v1.34.4-dirty", State: "running", Healthy: true, Restarts: 2},
		{Name: "kube-controller-manager", State: "absent", Problem: "connection refused"},
	}
	return &status.Status{
		Name: "devk", Dir: "/home/u/.devk/clusters/devk", Version: "v1.34.4", Node: "devk-control-plane", NodeReady: true,
		NodeIP: "10.250.0.2", NetNS: "/run/netns/devk-devk-control-plane",
		Processes: []status.Process{
			{Name: "containerd", PID: 101, Running: true, Log: "/home/u/.devk/clusters/devk/logs/containerd.log"},
			{Name: "kubelet", Log: "/home/u/.devk/clusters/devk/logs/kubelet.log"},
		},
		Components: comps,
		LastRun:    []layout.PhaseTiming{{Phase: "preflight", Seconds: 0.012}},
		Nodes: []status.Node{{Name: "devk-control-plane", Role: layout.RoleControlPlane, IP: "10.250.0.2", Ready: true,
			Containerd: true, Components: comps,
			Addons: []status.Addon{{Pod: "kube-proxy-x7k2p", Component: status.Component{Name: "kube-proxy", Manifest: proxyImage, Running: proxyImage, State: "running", Healthy: true}}}}},
	}
}

// statusHead is how oneNodeStatus's text begins, with one node or more:
// the cluster, node 0 and the supervised processes.
var statusHead = []string{
	"cluster devk (v1.34.4) in /home/u/.devk/clusters/devk",
	"node devk-control-plane at 10.250.0.2: Ready",
	"network namespace /run/netns/devk-devk-control-plane",
	"",
	"PROCESS     STATE    PID  LOG",
	"containerd  running  101  /home/u/.devk/clusters/devk/logs/containerd.log",
	"kubelet     stopped  -    /home/u/.devk/clusters/devk/logs/kubelet.log",
	"",
}

func statusText(st *status.Status) string {
	var out bytes.Buffer
	printStatus(&cli.Options{Stdout: &out}, st)
	return out.String()
}

// TestPrintStatusOneNode: a one-node cluster's text is what it was
// before status read every node (the text below is the old printStatus's
// output for this status).
func TestPrintStatusOneNode(t *testing.T) {
	want := strings.Join(slices.Concat(statusHead, []string{
		"COMPONENT                VERSION        STATE    HEALTHY  RESTARTS  MANIFEST                     RUNNING",
		"etcd                     -              running  yes      0         etcd@0123456789ab            etcd@0123456789ab",
		"kube-apiserver           v1.34.4-dirty  running  yes      2         kube-apiserver@aaaaaaaaaaaa  kube-apiserver@bbbbbbbbbbbb (differs)",
		"kube-controller-manager  -              absent   no       0         -                            -",
		"",
		"last run:",
		"  preflight  0.012s  ",
		"",
	}), "\n")
	if got := statusText(oneNodeStatus()); got != want {
		t.Errorf("one node's status text changed:\n%s\nwant:\n%s", got, want)
	}
}

// TestPrintStatusNodes: a cluster of more nodes shows, after the NODE
// table, what every node runs (node 0's components among it, so not
// again in a table of their own), and for a node whose runtime was not
// read, why.
func TestPrintStatusNodes(t *testing.T) {
	st := oneNodeStatus()
	st.Nodes[0].PodCIDR, st.Nodes[0].Kubelet = "10.244.0.0/24", "v1.34.4"
	st.Nodes = append(st.Nodes,
		status.Node{Name: "devk-worker", Role: layout.RoleWorker, IP: "10.250.0.3", PodCIDR: "10.244.1.0/24", Ready: true, Kubelet: "v1.34.4",
			Containerd: true, KubeletRunning: true,
			Addons: []status.Addon{
				{Pod: "coredns-7c9f-x2v4q", Component: status.Component{Name: "coredns", State: "running", Running: "127.0.0.1:5000/coredns@sha256:eeeeeeeeeeee0000000000000000000000000000000000000000000000000000", Healthy: true}},
				{Pod: "kube-proxy-q9z4m", Component: status.Component{Name: "kube-proxy", Manifest: proxyImage, Running: oldProxyImage, State: "exited", Restarts: 3, Problem: "pod kube-proxy-q9z4m is not Ready"}},
			}},
		status.Node{Name: "devk-worker2", Role: layout.RoleWorker, IP: "10.250.0.4", Message: "no Node object",
			RuntimeMessage: "containerd is not running: `devk up` starts it again (its log: /w2/logs/containerd.log)"},
	)
	want := strings.Join(slices.Concat(statusHead, []string{
		"NODE                ROLE           IP          PODS           STATUS          KUBELET  PROCESSES",
		"devk-control-plane  control-plane  10.250.0.2  10.244.0.0/24  Ready           v1.34.4  containerd running, kubelet stopped",
		"devk-worker         worker         10.250.0.3  10.244.1.0/24  Ready           v1.34.4  containerd running, kubelet running",
		"devk-worker2        worker         10.250.0.4  -              no Node object  -        containerd stopped, kubelet stopped",
		"",
		"NODE                COMPONENT                VERSION        POD                 STATE    HEALTHY  RESTARTS  MANIFEST                     RUNNING",
		"devk-control-plane  etcd                     -              -                   running  yes      0         etcd@0123456789ab            etcd@0123456789ab",
		"devk-control-plane  kube-apiserver           v1.34.4-dirty  -                   running  yes      2         kube-apiserver@aaaaaaaaaaaa  kube-apiserver@bbbbbbbbbbbb (differs)",
		"devk-control-plane  kube-controller-manager  -              -                   absent   no       0         -                            -",
		"devk-control-plane  kube-proxy               -              kube-proxy-x7k2p    running  yes      0         kube-proxy@cccccccccccc      kube-proxy@cccccccccccc",
		"devk-worker         coredns                  -              coredns-7c9f-x2v4q  running  yes      0         -                            coredns@eeeeeeeeeeee",
		"devk-worker         kube-proxy               -              kube-proxy-q9z4m    exited   no       3         kube-proxy@cccccccccccc      kube-proxy@dddddddddddd (differs)",
		"node devk-worker2: its runtime was not read: containerd is not running: `devk up` starts it again (its log: /w2/logs/containerd.log)",
		"",
		"last run:",
		"  preflight  0.012s  ",
		"",
	}), "\n")
	if got := statusText(st); got != want {
		t.Errorf("status text of three nodes:\n%s\nwant:\n%s", got, want)
	}
}

// TestRunningImageDiffers: a running digest is marked only when the
// manifest names another digest; the same digest through another
// registry address is the same image, and a tag (kubeadm's manifests)
// cannot be compared with the runtime's digest.
func TestRunningImageDiffers(t *testing.T) {
	for _, tt := range []struct {
		manifest, running string
		differs           bool
	}{
		{apiserverImage, swappedImage, true},
		{apiserverImage, apiserverImage, false},
		{apiserverImage, "10.250.0.1:5000/kube-apiserver@" + apiserverImage[strings.Index(apiserverImage, "@")+1:], false},
		{"127.0.0.1:5000/kube-apiserver:v1.34.4", swappedImage, false},
		{apiserverImage, "", false},
	} {
		if got := strings.HasSuffix(runningImage(status.Component{Manifest: tt.manifest, Running: tt.running}), " (differs)"); got != tt.differs {
			t.Errorf("manifest %s, running %s: differs = %v, want %v", tt.manifest, tt.running, got, tt.differs)
		}
	}
}

// TestComponentVersion: the VERSION column says the version a component
// emulates when it is not its own.
func TestComponentVersion(t *testing.T) {
	for _, tc := range []struct {
		c    status.Component
		want string
	}{
		{status.Component{Version: "v1.34.4"}, "v1.34.4"},
		{status.Component{Version: "v1.34.4", Emulates: "1.33"}, "v1.34.4 (emulating 1.33)"},
		{status.Component{}, "-"},
	} {
		if got := componentVersion(tc.c); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}
