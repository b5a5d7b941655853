// Package status is `devk status`: what a cluster's processes, nodes,
// static pods, addons and load balancer are doing, read without changing
// anything.
package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/cluster/internal/joinnode"
	"github.com/devk/devk/cluster/internal/kwok"
	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/registry"
)

// Status is what `devk status` shows of a cluster.
type Status struct {
	Name      string `json:"name"`
	Dir       string `json:"dir"`
	Version   string `json:"version,omitempty"`
	Node      string `json:"node"`
	NodeReady bool   `json:"nodeReady"`
	// NodeIP is the node's address on devk's bridge, NetNS its network
	// namespace.
	NodeIP    string    `json:"nodeIP"`
	NetNS     string    `json:"netns,omitempty"`
	Processes []Process `json:"processes"`
	// Components are node 0's static pods (Nodes[0].Components,
	// kept here as before clusters had more nodes).
	Components  []Component          `json:"components"`
	LastRun     []layout.PhaseTiming `json:"lastRun,omitempty"`
	NodeMessage string               `json:"nodeMessage,omitempty"`
	// Nodes are every node of the cluster, node 0 first.
	Nodes []Node `json:"nodes"`
	// LoadBalancer is the HAProxy in front of the API servers (a cluster
	// with more than one control-plane node).
	LoadBalancer *LoadBalancer `json:"loadBalancer,omitempty"`
	// FakeNodes are kwok's nodes (a cluster with some).
	FakeNodes *FakeNodes `json:"fakeNodes,omitempty"`
}

// FakeNodes counts kwok's fake nodes and their pods.
type FakeNodes struct {
	// Want is how many cluster.json records; Registered and Ready how
	// many Node objects there are and how many are Ready.
	Want       int `json:"want"`
	Registered int `json:"registered"`
	Ready      int `json:"ready"`
	// Pods are the pods bound to fake nodes, Running those kwok runs.
	Pods    int    `json:"pods"`
	Running int    `json:"running"`
	Message string `json:"message,omitempty"`
}

// LoadBalancer is what HAProxy says of each API server.
type LoadBalancer struct {
	// Endpoint is the control-plane endpoint it listens on.
	Endpoint string `json:"endpoint"`
	// Servers are the API servers by node, as HAProxy's runtime API
	// reports them; empty with Message when it does not answer.
	Servers []LoadBalancerServer `json:"servers,omitempty"`
	Message string               `json:"message,omitempty"`
}

// LoadBalancerServer is one API server behind the load balancer.
type LoadBalancerServer struct {
	Node string `json:"node"`
	// Status is HAProxy's: UP, DOWN, DRAIN, MAINT.
	Status string `json:"status"`
	// Sessions are the connections it carries now.
	Sessions int64 `json:"sessions"`
	// Message, for a server taken out (DRAIN, MAINT), says why it may be
	// and what puts it back.
	Message string `json:"message,omitempty"`
}

// Node is one node of the cluster.
type Node struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	IP      string `json:"ip"`
	PodCIDR string `json:"podCIDR,omitempty"`
	// Joining says a `devk node add` of it has not finished.
	Joining bool `json:"joining,omitempty"`
	// Leaving says a `devk node remove` of it has not finished.
	Leaving bool `json:"leaving,omitempty"`
	Ready   bool `json:"ready"`
	// Kubelet is the version its kubelet reports.
	Kubelet string `json:"kubeletVersion,omitempty"`
	// Containerd and KubeletRunning say whether devk's processes for the
	// node run.
	Containerd     bool   `json:"containerdRunning"`
	KubeletRunning bool   `json:"kubeletRunning"`
	Message        string `json:"message,omitempty"`
	// Components are the node's static pods (nodeComponents): every
	// control-plane one on a control-plane node, none on a worker.
	Components []Component `json:"components,omitempty"`
	// Addons are the addons' pods (internal/addon's Workloads) on the
	// node.
	Addons []Addon `json:"addons,omitempty"`
	// RuntimeMessage says why the node's runtime was not read, and what
	// to do: its components' and addons' containers are then unknown.
	RuntimeMessage string `json:"runtimeMessage,omitempty"`
}

// Process is one supervised process.
type Process struct {
	Name    string `json:"name"`
	PID     int    `json:"pid,omitempty"`
	Running bool   `json:"running"`
	Log     string `json:"log"`
}

// Component is one control-plane static pod of a node (and, in an
// Addon, one addon pod).
type Component struct {
	Name string `json:"name"`
	// Manifest is the image the static pod manifest names.
	Manifest string `json:"manifestImage,omitempty"`
	// Running is the image the runtime reports for the running container
	// (CRI imageRef).
	Running string `json:"runningImage,omitempty"`
	// Version is the gitVersion a running control-plane component
	// reports (the API server's /version, the controller-manager's and
	// scheduler's kubernetes_build_info metric); empty for etcd and the
	// addons, whose image says it.
	Version string `json:"version,omitempty"`
	// Emulates is the version (MAJOR.MINOR) it emulates, when not its
	// own (compatibility versions): the API server's /version says it,
	// the controllers' manifests give --emulated-version.
	Emulates string `json:"emulates,omitempty"`
	State    string `json:"state"`
	Healthy  bool   `json:"healthy"`
	Problem  string `json:"problem,omitempty"`
	Restarts uint32 `json:"restarts"`
}

// Addon is one pod of an addon on a node. Its Manifest is the image
// the addon's workload names in its pod template; Healthy is the pod's
// readiness as its kubelet reports it.
type Addon struct {
	Component
	// Pod is the pod's name (kube-proxy-x7k2p).
	Pod string `json:"pod"`
}

// checkTimeout bounds each of status's health checks, its read of
// kube-system's pods, and its look at each node's runtime.
const checkTimeout = 3 * time.Second

// Get looks at a cluster without changing anything.
func Get(ctx context.Context, o cluster.Options) (*Status, error) {
	c, err := cluster.Open(o)
	if err != nil {
		return nil, err
	}
	if !c.Exists() {
		return nil, c.NoCluster()
	}
	st := &Status{Name: c.Config.Name, Dir: c.FirstNode().Files.Dir, Version: c.Config.KubeVersion, Node: c.Config.FirstNode().Name, LastRun: c.Config.LastRun,
		NodeIP: c.Config.FirstNode().IP, NetNS: c.Config.FirstNode().NetNSPath()}
	procs := []string{"containerd", "kubelet", registry.ProcessName}
	if c.Config.Spec.FakeNodes.Total() > 0 {
		procs = append(procs, kwok.ProcessName)
	}
	for _, reg := range c.LoopbackRegistries() {
		procs = append(procs, registry.ForwarderName(reg))
	}
	if c.Config.HA() {
		procs = append(procs, loadbalancer.ProcessName)
		st.LoadBalancer = loadBalancerStatus(ctx, c)
	}
	for _, name := range procs {
		pp := c.FirstNode().Files.Supervised
		switch name {
		case registry.ProcessName:
			pp = c.RegistryPaths().Supervised
		case loadbalancer.ProcessName:
			pp = c.Files.LoadBalancer().Supervised
		}
		ps := Process{Name: name, Log: pp.LogFile(name)}
		ps.PID, ps.Running = pp.Procs().Running(name)
		if name == "containerd" && !c.Config.OwnRuntime {
			ps.Log = "not devk's: " + c.Config.CRISocket
			ps.Running = cri.Answers(ctx, c.Config.CRISocket) == nil
		}
		if name == registry.ProcessName && !c.Config.OwnRegistry {
			ps.Log = "not devk's: " + c.Config.Registry
			ps.Running = registry.Answers(ctx, c.Config.Registry)
		}
		st.Processes = append(st.Processes, ps)
	}
	cs, cerr := c.Client()
	health := map[string]error{}
	for _, ch := range c.Checks(c.FirstNode()) {
		if cerr != nil {
			health[ch.Name] = cerr
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		health[ch.Name] = ch.Check(cctx, cs)
		cancel()
	}
	st.NodeReady = health["node"] == nil
	if err := health["node"]; err != nil {
		st.NodeMessage = err.Error()
	}
	st.Nodes = nodeStatuses(ctx, c, cs, cerr, health)
	if want := c.Config.Spec.FakeNodes.Total(); want > 0 {
		st.FakeNodes = fakeStatus(ctx, cs, cerr, want)
	}
	st.Components = st.Nodes[0].Components
	return st, nil
}

// WriteTimings prints phase times as a table, each line after indent:
// the phase, its time, and whether it was skipped (why) or failed.
func WriteTimings(w io.Writer, timings []layout.PhaseTiming, indent string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, t := range timings {
		switch {
		case t.Skipped != "":
			fmt.Fprintf(tw, "%s%s\t-\tskipped (%s)\n", indent, t.Phase, t.Skipped)
		case t.Failed:
			fmt.Fprintf(tw, "%s%s\t%.3fs\tFAILED\n", indent, t.Phase, t.Seconds)
		default:
			fmt.Fprintf(tw, "%s%s\t%.3fs\t\n", indent, t.Phase, t.Seconds)
		}
	}
	tw.Flush()
}

// nodeStatuses are every node's role, address, readiness and kubelet
// version (from its Node, when the API answers), devk's processes, and
// the images its static pods and addon pods run, read through the node's
// own runtime. health is node 0's checks (c.Checks), by name; another
// node's pods are as healthy as their kubelet reports them.
func nodeStatuses(ctx context.Context, c *cluster.Cluster, cs kubernetes.Interface, cerr error, health map[string]error) []Node {
	ns, err := c.AllNodes()
	if err != nil {
		ns = []cluster.Node{c.FirstNode()} // cluster.json was validated: every node's dir resolves
	}
	var objs map[string]corev1.Node
	if cerr == nil {
		lctx, cancel := context.WithTimeout(ctx, checkTimeout)
		if list, err := cs.CoreV1().Nodes().List(lctx, metav1.ListOptions{}); err == nil {
			objs = map[string]corev1.Node{}
			for _, n := range list.Items {
				objs[n.Name] = n
			}
		} else {
			cerr = err
		}
		cancel()
	}
	api := statusAPI{err: cerr}
	if cerr == nil {
		api = readStatusAPI(ctx, cs)
	}
	var out []Node
	for _, n := range ns {
		s := Node{Name: n.Name(), Role: n.Net.Role, IP: n.IP(), PodCIDR: n.Net.PodCIDR, Joining: n.Net.Joining, Leaving: n.Net.Leaving}
		_, s.Containerd = n.Files.Procs().Running("containerd")
		_, s.KubeletRunning = n.Files.Procs().Running("kubelet")
		switch obj, ok := objs[n.Name()]; {
		case cerr != nil:
			s.Message = "the API server does not answer: " + cerr.Error()
		case !ok:
			s.Message = "no Node object"
		default:
			s.Kubelet = obj.Status.NodeInfo.KubeletVersion
			s.Message = joinnode.NotReady(&obj, time.Time{})
			s.Ready = s.Message == ""
		}
		problem := func(pod string) error { return api.ready(kube.MirrorPodName(pod, n.Name())) }
		if n.Name() == c.Config.FirstNode().Name {
			problem = func(pod string) error { return health[pod] }
		}
		var cts []cri.Container
		cts, s.RuntimeMessage = runtimeContainers(ctx, c, n)
		s.Components = nodeComponents(n, cts, problem)
		componentVersions(ctx, c, n, s.Components)
		s.Addons = nodeAddons(cts, api)
		out = append(out, s)
	}
	return out
}

// runtimeContainers are the kube-system containers on node n's own
// runtime, the newest of each pod's container (newestPerContainer) with
// the imageRef its status reports; or, when the runtime cannot be read,
// why, and what to do. The whole look (the runtime's first answer, the
// list, the statuses) is bounded by checkTimeout: a node whose
// containerd is stopped or stuck costs status that long, not a hang.
func runtimeContainers(ctx context.Context, c *cluster.Cluster, n cluster.Node) ([]cri.Container, string) {
	socket := c.Config.NodeCRISocket(n.Net, n.Files)
	if socket == "" {
		return nil, fmt.Sprintf("cluster.json names no CRI socket for node %s: `devk up%s` records it", n.Name(), c.NameFlag())
	}
	rt, err := cri.Dial(socket)
	if err != nil {
		return nil, err.Error()
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if _, err := rt.Version(ctx); err != nil {
		return nil, runtimeDown(c, n, socket, err)
	}
	all, err := rt.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem})
	if err != nil {
		return nil, fmt.Sprintf("%v: see containerd's log %s", err, n.Files.LogFile("containerd"))
	}
	cts := newestPerContainer(all)
	for i := range cts {
		// The list gives the image ID on containerd 1.6; the status
		// gives the repo digest the kubelet reports.
		if s, err := rt.ContainerStatus(ctx, cts[i].ID); err == nil && s.ImageRef != "" {
			cts[i].ImageRef = s.ImageRef
		}
	}
	return cts, ""
}

// runtimeDown says why node n's runtime at socket did not answer (err,
// from cri's Version) and what to do: devk's containerd (every node's but
// an outside runtime's of node 0) is started by `devk up`; an outside
// runtime's error says to start it.
func runtimeDown(c *cluster.Cluster, n cluster.Node, socket string, err error) string {
	if n.Name() == c.Config.FirstNode().Name && !c.Config.OwnRuntime {
		return err.Error()
	}
	log := n.Files.LogFile("containerd")
	if _, running := n.Files.Procs().Running("containerd"); !running {
		return fmt.Sprintf("containerd is not running: `devk up%s` starts it again (its log: %s)", c.NameFlag(), log)
	}
	cause := errors.Unwrap(err)
	if cause == nil {
		cause = err
	}
	return fmt.Sprintf("containerd runs but did not answer on %s within %s (%v): see its log %s", socket, checkTimeout, cause, log)
}

// newestPerContainer keeps, of cts (newest first, as cri's Containers
// lists them), the newest container of each pod's container name: the
// one a pod runs now, or ran last.
func newestPerContainer(cts []cri.Container) []cri.Container {
	type key struct{ pod, container string }
	seen := map[key]bool{}
	var out []cri.Container
	for _, ct := range cts {
		k := key{ct.PodNamespace + "/" + ct.PodName, ct.Name}
		if !seen[k] {
			seen[k] = true
			out = append(out, ct)
		}
	}
	return out
}

// containerOf is pod's container named container among cts
// (newestPerContainer's), nil when there is none.
func containerOf(cts []cri.Container, namespace, pod, container string) *cri.Container {
	for i, ct := range cts {
		if ct.PodNamespace == namespace && ct.PodName == pod && ct.Name == container {
			return &cts[i]
		}
	}
	return nil
}

// componentStatus is one row of status: name, the image its manifest (or
// workload) names, its newest container ct (nil: none, "absent") and why
// it is not healthy (nil: it is).
func componentStatus(name, manifest string, ct *cri.Container, problem error) Component {
	cst := Component{Name: name, Manifest: manifest, State: "absent"}
	if ct != nil {
		cst.State, cst.Restarts, cst.Running = ct.StateName(), ct.Attempt, ct.ImageRef
	}
	if problem != nil {
		cst.Problem = problem.Error()
	} else {
		cst.Healthy = true
	}
	return cst
}

// nodeComponents are node n's static pods: for each, the image its
// manifest in n's manifests dir names and the newest container of its
// pod (<pod>-<node>) among cts (newestPerContainer's list of the node's
// kube-system containers; nil when its runtime was not read). A
// control-plane node shows every one of cluster.StaticPods (absent when it has
// neither manifest nor container), a worker only those it has: none, as
// devk makes one. problem says why a pod is not healthy (nil: it is).
func nodeComponents(n cluster.Node, cts []cri.Container, problem func(pod string) error) []Component {
	var out []Component
	for _, sp := range cluster.StaticPods {
		manifest, _ := staticpod.Image(n.Files.ManifestPath(sp.Name), sp.Name)
		ct := containerOf(cts, metav1.NamespaceSystem, kube.MirrorPodName(sp.Name, n.Name()), sp.Name)
		if !n.Net.IsControlPlane() && manifest == "" && ct == nil {
			continue
		}
		out = append(out, componentStatus(sp.Name, manifest, ct, problem(sp.Name)))
	}
	return out
}

// componentVersions fills the Version of node n's running API server,
// controller-manager and scheduler, each read within checkTimeout (one
// that does not answer keeps none).
func componentVersions(ctx context.Context, c *cluster.Cluster, n cluster.Node, comps []Component) {
	admin := c.FirstNode().Files.Kubeconfig("admin")
	base := func(port int) string { return "https://" + n.IP() + ":" + strconv.Itoa(port) }
	for i := range comps {
		if comps[i].State != cri.StateRunning {
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, checkTimeout)
		switch comps[i].Name {
		case "kube-apiserver":
			if v, err := kube.EndpointVersionInfo(vctx, base(c.Config.Ports.APIServer)); err == nil {
				comps[i].Version, comps[i].Emulates = v.GitVersion, kube.Emulates(v)
			}
		case "kube-controller-manager":
			base, netns := c.Config.Controller(n.Net, c.Config.Ports.ControllerManager)
			comps[i].Version, _ = kube.MetricsVersion(vctx, admin, base, netns, checkTimeout)
			comps[i].Emulates = emulatedFlag(n, comps[i].Name)
		case "kube-scheduler":
			base, netns := c.Config.Controller(n.Net, c.Config.Ports.Scheduler)
			comps[i].Version, _ = kube.MetricsVersion(vctx, admin, base, netns, checkTimeout)
			comps[i].Emulates = emulatedFlag(n, comps[i].Name)
		}
		cancel()
	}
}

// emulatedFlag is the --emulated-version static pod name's manifest on
// node n gives its container ("" for none).
func emulatedFlag(n cluster.Node, name string) string {
	pod := controlplane.InstalledPod(n.Files.ManifestPath(name))
	if pod == nil {
		return ""
	}
	return staticpod.Flags(pod, name)[config.EmulatedVersionFlag]
}

// nodeAddons are the addons' pods among a node's kube-system containers
// cts (newestPerContainer's): a pod of workload w (internal/addon's
// Workloads, in that order; each one's pods by name) is one named <w>-…
// whose container w.Container is. Each has the image api says the
// workload names and the pod's readiness as the API server has it.
func nodeAddons(cts []cri.Container, api statusAPI) []Addon {
	var out []Addon
	for _, w := range addon.Workloads {
		first := len(out)
		for i, ct := range cts {
			if ct.PodNamespace != w.Namespace || ct.Name != w.Container || !strings.HasPrefix(ct.PodName, w.Name+"-") {
				continue
			}
			out = append(out, Addon{Pod: ct.PodName, Component: componentStatus(w.Component, api.named(ct.PodName, w), &cts[i], api.ready(ct.PodName))})
		}
		slices.SortFunc(out[first:], func(a, b Addon) int { return strings.Compare(a.Pod, b.Pod) })
	}
	return out
}

// statusAPI is what status reads of kube-system from the API server for
// the nodes' rows: the pods by name, whose readiness their kubelets report
// (a static pod's on its mirror pod), and the image each addon's
// workload names, by the workload's name (nodes' own kube-proxy
// DaemonSets too). err says why there is none.
type statusAPI struct {
	pods   map[string]*corev1.Pod
	images map[string]string
	err    error
}

// readStatusAPI reads kube-system's pods and the addons' workloads,
// within checkTimeout.
func readStatusAPI(ctx context.Context, cs kubernetes.Interface) statusAPI {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	list, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return statusAPI{err: err}
	}
	api := statusAPI{pods: map[string]*corev1.Pod{}, images: map[string]string{}}
	for i := range list.Items {
		api.pods[list.Items[i].Name] = &list.Items[i]
	}
	for _, w := range addon.Workloads {
		if s, err := addon.Get(ctx, cs, w); err == nil && s != nil {
			api.images[w.Name] = s.Image()
		}
	}
	if own, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: addons.NodeKubeProxySelector}); err == nil {
		for _, ds := range own.Items {
			if cts := ds.Spec.Template.Spec.Containers; len(cts) > 0 {
				api.images[ds.Name] = cts[0].Image
			}
		}
	}
	return api
}

// named is the image the workload of pod (one of w's) names: its
// controller's when that is another DaemonSet (a node's own kube-proxy,
// addons.NodeKubeProxy), "" when that one's was not read; else w's.
func (a statusAPI) named(pod string, w addon.Workload) string {
	if p := a.pods[pod]; p != nil {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == string(addon.DaemonSet) && ref.Name != w.Name {
			return a.images[ref.Name]
		}
	}
	return a.images[w.Name]
}

// ready says why the kube-system pod named pod is not ready by its
// kubelet's report, nil when it is.
func (a statusAPI) ready(pod string) error {
	if a.err != nil {
		return fmt.Errorf("the API server does not answer: %w", a.err)
	}
	p, ok := a.pods[pod]
	switch {
	case !ok:
		return fmt.Errorf("the API server has no pod %s", pod)
	case !addon.PodReady(p):
		return fmt.Errorf("pod %s is not Ready", pod)
	}
	return nil
}

// loadBalancerStatus asks HAProxy, within checkTimeout, how each
// API server is.
func loadBalancerStatus(ctx context.Context, c *cluster.Cluster) *LoadBalancer {
	lb := c.LoadBalancer()
	out := &LoadBalancer{Endpoint: lb.Config.Frontend}
	sctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	stats, err := lb.API().Stats(sctx)
	if err != nil {
		out.Message = fmt.Sprintf("HAProxy does not answer (%v): `devk up%s` starts it again; its log: %s", err, c.NameFlag(), lb.Procs.LogFile(loadbalancer.ProcessName))
		return out
	}
	for _, s := range stats {
		if s.Proxy == loadbalancer.BackendName && s.Server != "BACKEND" {
			out.Servers = append(out.Servers, LoadBalancerServer{Node: s.Server, Status: s.Status, Sessions: s.Sessions, Message: takenOutMessage(c, s.Server, s.Status)})
		}
	}
	return out
}

// takenOutMessage says, for an API server HAProxy gives no new
// connections because devk took it out, why it may be and what to run.
func takenOutMessage(c *cluster.Cluster, node, status string) string {
	if !loadbalancer.TakenOut(status) {
		return ""
	}
	if n, _, err := c.Config.FindNode(node); err == nil && n.Leaving {
		return fmt.Sprintf("out of load balancing: node %s is being removed; `devk node remove%s %s` finishes it", node, c.NameFlag(), node)
	}
	return fmt.Sprintf("out of load balancing: a swap or node removal stopped before it put the server back; `devk up%s` (or the next `devk swap`) puts it back", c.NameFlag())
}

// fakeStatus counts the fake nodes and the pods bound to them.
func fakeStatus(ctx context.Context, cs kubernetes.Interface, cerr error, want int) *FakeNodes {
	f := &FakeNodes{Want: want}
	if cerr != nil {
		f.Message = "the API server does not answer: " + cerr.Error()
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kwok.Selector, ResourceVersion: "0"})
	if err != nil {
		f.Message = err.Error()
		return f
	}
	fake := map[string]bool{}
	for i := range nodes.Items {
		fake[nodes.Items[i].Name] = true
		if joinnode.NotReady(&nodes.Items[i], time.Time{}) == "" {
			f.Ready++
		}
	}
	f.Registered = len(nodes.Items)
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		f.Message = err.Error()
		return f
	}
	for _, p := range pods.Items {
		if fake[p.Spec.NodeName] {
			f.Pods++
			if p.Status.Phase == corev1.PodRunning {
				f.Running++
			}
		}
	}
	return f
}
