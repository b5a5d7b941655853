package status

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/kube"
)

// Through is what `devk status` shows of a cluster devk reaches only
// through its API (named name, at server): each node as the API says
// (role, address, pod subnet, Ready, kubelet version), its static pods
// from their mirror pods and its addons' pods, each container as its
// kubelet reports it (the image the pod names, the image it runs, state,
// readiness, restarts). What only a devk cluster of this machine has
// (supervised processes, HAProxy, phase times) is not there.
func Through(ctx context.Context, cs kubernetes.Interface, name, server string) (*Status, error) {
	st := &Status{Name: name, Dir: server}
	if v, err := kube.ServerVersion(cs); err == nil {
		st.Version = v
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the nodes: %w", err)
	}
	slices.SortStableFunc(nodes.Items, func(a, b corev1.Node) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	api := readStatusAPI(ctx, cs)
	if api.err != nil {
		return nil, fmt.Errorf("list kube-system's pods: %w", api.err)
	}
	for _, n := range nodes.Items {
		st.Nodes = append(st.Nodes, throughNode(n, api))
	}
	if len(st.Nodes) > 0 {
		first := st.Nodes[0]
		st.Node, st.NodeReady, st.NodeIP, st.NodeMessage, st.Components = first.Name, first.Ready, first.IP, first.Message, first.Components
	}
	return st, nil
}

// throughNode is node n as the API says, with its kube-system pods.
func throughNode(n corev1.Node, api statusAPI) Node {
	out := Node{Name: n.Name, Role: "worker", PodCIDR: n.Spec.PodCIDR, Kubelet: n.Status.NodeInfo.KubeletVersion}
	if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
		out.Role = "control-plane"
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.IP = a.Address
			break
		}
	}
	out.Message = "no Ready condition"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready, out.Message = c.Status == corev1.ConditionTrue, c.Reason+": "+c.Message
		}
	}
	if out.Ready {
		out.Message = ""
	}
	var names []string
	for name, p := range api.pods {
		if p.Spec.NodeName == n.Name {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		p := api.pods[name]
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror && len(p.Spec.Containers) > 0 {
			c := p.Spec.Containers[0]
			out.Components = append(out.Components, podComponent(p, c.Name, c.Name, c.Image))
			continue
		}
		for _, w := range addon.Workloads {
			if p.Namespace == w.Namespace && strings.HasPrefix(p.Name, w.Name+"-") {
				out.Addons = append(out.Addons, Addon{Pod: p.Name, Component: podComponent(p, w.Component, w.Container, api.named(p.Name, w))})
			}
		}
	}
	return out
}

// podComponent is container of pod p as a status row named name, the
// image its pod or workload names being named.
func podComponent(p *corev1.Pod, name, container, named string) Component {
	c := Component{Name: name, Manifest: named, State: "absent"}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name != container {
			continue
		}
		c.Running, c.Restarts = s.ImageID, uint32(s.RestartCount)
		switch {
		case s.State.Running != nil:
			c.State = "running"
		case s.State.Waiting != nil:
			c.State = "waiting: " + s.State.Waiting.Reason
		case s.State.Terminated != nil:
			c.State = "exited"
		}
	}
	if addon.PodReady(p) {
		c.Healthy = true
	} else {
		c.Problem = "pod " + p.Name + " is not Ready"
	}
	return c
}
