package addons

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
)

// Runtime is a node's container runtime, where its kube-system pods'
// containers run.
type Runtime struct {
	// Node names it in errors; Socket is its CRI socket.
	Node, Socket string
}

// Ready says why w is not ready, nil when it is. runtimes, when not nil
// (the node's kubelet was started by this run), gives the nodes'
// runtimes: the node's pods may be new while the API still holds their
// predecessors' ready statuses (after `devk down --keep-data`, or a
// reboot), so w is ready only once every container its pods report runs
// in one of them.
func Ready(ctx context.Context, cs kubernetes.Interface, w addon.Workload, runtimes func() ([]Runtime, error)) error {
	s, err := addon.Get(ctx, cs, w)
	if err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("the cluster has no %s", w)
	}
	if done, why := s.RolledOut(); !done {
		return errors.New(why)
	}
	if runtimes == nil {
		return nil
	}
	pods, err := s.Pods(ctx, cs)
	if err != nil {
		return err
	}
	// The pods run on every node, each node's in its own runtime.
	rts, err := runtimes()
	if err != nil {
		return err
	}
	var running []cri.Container
	for _, rt := range rts {
		cs, err := runningContainers(ctx, rt.Socket, metav1.NamespaceSystem)
		if err != nil {
			return fmt.Errorf("node %s: %w", rt.Node, err)
		}
		running = append(running, cs...)
	}
	return statusesCurrent(pods, running)
}

// statusesCurrent says which of a ready workload's pods is not ready
// after all, or reports a container that does not run (a status from
// before the node's runtime was emptied); pods on their way out do not
// count.
func statusesCurrent(pods []corev1.Pod, running []cri.Container) error {
	ids := map[string]bool{}
	for _, ct := range running {
		ids[ct.ID] = true
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if !addon.PodReady(&p) {
			return fmt.Errorf("pod %s is not ready (its workload's status is older)", p.Name)
		}
		for _, st := range p.Status.ContainerStatuses {
			_, id, _ := strings.Cut(st.ContainerID, "://")
			if !ids[id] {
				return fmt.Errorf("pod %s reports container %s ready, which does not run: the kubelet has not reported the pod since it started", p.Name, st.Name)
			}
		}
	}
	return nil
}

// runningContainers are the running containers of namespace's pods in
// the runtime at socket.
func runningContainers(ctx context.Context, socket, namespace string) ([]cri.Container, error) {
	rt, err := cri.Dial(socket)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	return rt.Containers(ctx, cri.Filter{PodNamespace: namespace, RunningOnly: true})
}

// DescribeNotReady is, for each of pending that ready (a last look)
// still finds not ready, why and what its pods say, kubectl (a command
// line for kube-system) in the commands it suggests; "" when all are
// ready.
func DescribeNotReady(ctx context.Context, cs kubernetes.Interface, pending []addon.Workload, ready func(context.Context, addon.Workload) error, kubectl string) string {
	var b strings.Builder
	for _, w := range pending {
		why := ready(ctx, w)
		if why == nil {
			continue
		}
		fmt.Fprintf(&b, "\n%s: %v", w, why)
		s, err := addon.Get(ctx, cs, w)
		var pods []corev1.Pod
		if err == nil && s != nil {
			pods, err = s.Pods(ctx, cs)
		}
		switch {
		case err != nil:
			fmt.Fprintf(&b, "\n  (its pods could not be listed: %v)", err)
		case s != nil: // else gone, as why says
			b.WriteString(s.DescribeNotReady(pods, kubectl))
		}
	}
	return b.String()
}
