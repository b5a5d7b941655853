package cluster

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
)

// Status is what `devk status` shows of a cluster.
type Status struct {
	Name      string `json:"name"`
	Dir       string `json:"dir"`
	Version   string `json:"version,omitempty"`
	Node      string `json:"node"`
	NodeReady bool   `json:"nodeReady"`
	// NodeIP is the node's address on devk's bridge, NetNS its network
	// namespace (empty for a cluster made before nodes had one).
	NodeIP      string               `json:"nodeIP"`
	NetNS       string               `json:"netns,omitempty"`
	Processes   []ProcessStatus      `json:"processes"`
	Components  []ComponentStatus    `json:"components"`
	LastRun     []layout.PhaseTiming `json:"lastRun,omitempty"`
	NodeMessage string               `json:"nodeMessage,omitempty"`
	// Nodes are every node of the cluster, node 0 first.
	Nodes []NodeStatus `json:"nodes"`
}

// NodeStatus is one node of the cluster.
type NodeStatus struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	IP      string `json:"ip"`
	PodCIDR string `json:"podCIDR,omitempty"`
	// Joining says a `devk node add` of it has not finished.
	Joining bool `json:"joining,omitempty"`
	Ready   bool `json:"ready"`
	// Kubelet is the version its kubelet reports.
	Kubelet string `json:"kubeletVersion,omitempty"`
	// Containerd and KubeletRunning say whether devk's processes for the
	// node run.
	Containerd     bool   `json:"containerdRunning"`
	KubeletRunning bool   `json:"kubeletRunning"`
	Message        string `json:"message,omitempty"`
}

// ProcessStatus is one supervised process.
type ProcessStatus struct {
	Name    string `json:"name"`
	PID     int    `json:"pid,omitempty"`
	Running bool   `json:"running"`
	Log     string `json:"log"`
}

// ComponentStatus is one control-plane static pod.
type ComponentStatus struct {
	Name string `json:"name"`
	// Manifest is the image the static pod manifest names.
	Manifest string `json:"manifestImage,omitempty"`
	// Running is the image the runtime reports for the running container
	// (CRI imageRef).
	Running  string `json:"runningImage,omitempty"`
	State    string `json:"state"`
	Healthy  bool   `json:"healthy"`
	Problem  string `json:"problem,omitempty"`
	Restarts uint32 `json:"restarts"`
}

// GetStatus looks at a cluster without changing anything.
func GetStatus(ctx context.Context, o Options) (*Status, error) {
	c, err := Open(o)
	if err != nil {
		return nil, err
	}
	if !c.Exists() {
		return nil, c.noCluster()
	}
	st := &Status{Name: c.Config.Name, Dir: c.Dir, Version: c.Config.KubeVersion, Node: c.Config.NodeName, LastRun: c.Config.LastRun,
		NodeIP: c.Config.AdvertiseIP, NetNS: c.Config.ControlPlane().NetNSPath()}
	if !c.Config.HasNodeNetwork() {
		st.NetNS = ""
	}
	procs := []string{"containerd", "kubelet", "registry"}
	for _, reg := range c.loopbackRegistries() {
		procs = append(procs, forwarderName(reg))
	}
	for _, name := range procs {
		pp := c.Paths
		if name == "registry" {
			pp = c.registryPaths()
		}
		ps := ProcessStatus{Name: name, Log: pp.LogFile(name)}
		ps.PID, ps.Running = pp.Procs().Running(name)
		if name == "containerd" && !c.Config.OwnRuntime {
			ps.Log = "not devk's: " + c.Config.CRISocket
			if rt, err := cri.Dial(c.Config.CRISocket); err == nil {
				_, verr := rt.Version(ctx)
				ps.Running = verr == nil
				rt.Close()
			}
		}
		if name == "registry" && !c.Config.OwnRegistry {
			ps.Log = "not devk's: " + c.Config.Registry
			ps.Running = registryAnswers(ctx, c.Config.Registry)
		}
		st.Processes = append(st.Processes, ps)
	}
	var rt *cri.Client
	if c.Config.CRISocket != "" {
		if r, err := cri.Dial(c.Config.CRISocket); err == nil {
			if _, err := r.Version(ctx); err == nil {
				rt = r
				defer r.Close()
			} else {
				r.Close()
			}
		}
	}
	cs, cerr := c.Client()
	health := map[string]error{}
	for _, ch := range checks() {
		if cerr != nil {
			health[ch.Name] = cerr
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, statusCheckTimeout)
		health[ch.Name] = ch.Check(cctx, c, cs)
		cancel()
	}
	st.NodeReady = health["node"] == nil
	if err := health["node"]; err != nil {
		st.NodeMessage = err.Error()
	}
	st.Nodes = c.nodeStatuses(ctx, cs, cerr)
	for _, sp := range StaticPods {
		cst := ComponentStatus{Name: sp.Name, State: "absent"}
		cst.Manifest, _ = staticpod.Image(c.ManifestPath(sp.Name), sp.Name)
		if rt != nil {
			// Newest first: the pod's current container.
			cts, err := rt.Containers(ctx, cri.Filter{PodName: kube.MirrorPodName(sp.Name, c.Config.NodeName), PodNamespace: metav1.NamespaceSystem, Container: sp.Name})
			if err == nil && len(cts) > 0 {
				ct := cts[0]
				cst.State, cst.Restarts, cst.Running = ct.StateName(), ct.Attempt, ct.ImageRef
				// The list gives the image ID on containerd 1.6; the
				// status gives the repo digest the kubelet reports.
				if s, err := rt.ContainerStatus(ctx, ct.ID); err == nil && s.ImageRef != "" {
					cst.Running = s.ImageRef
				}
			}
		}
		if err := health[sp.Name]; err != nil {
			cst.Problem = err.Error()
		} else {
			cst.Healthy = true
		}
		st.Components = append(st.Components, cst)
	}
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
// version (from its Node, when the API answers) and devk's processes.
func (c *Cluster) nodeStatuses(ctx context.Context, cs kubernetes.Interface, cerr error) []NodeStatus {
	ns, err := c.nodes()
	if err != nil {
		return nil
	}
	var objs map[string]corev1.Node
	if cerr == nil {
		lctx, cancel := context.WithTimeout(ctx, statusCheckTimeout)
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
	var out []NodeStatus
	for _, n := range ns {
		s := NodeStatus{Name: n.Name(), Role: n.Net.Role, IP: n.IP(), PodCIDR: n.Net.PodCIDR, Joining: n.Net.Joining}
		_, s.Containerd = n.Procs().Running("containerd")
		_, s.KubeletRunning = n.Procs().Running("kubelet")
		switch obj, ok := objs[n.Name()]; {
		case cerr != nil:
			s.Message = "the API server does not answer: " + cerr.Error()
		case !ok:
			s.Message = "no Node object"
		default:
			s.Kubelet = obj.Status.NodeInfo.KubeletVersion
			s.Message = nodeNotReady(&obj, time.Time{})
			s.Ready = s.Message == ""
		}
		out = append(out, s)
	}
	return out
}
