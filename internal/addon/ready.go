package addon

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// RolledOut reports whether the controller has rolled out the current
// spec to every pod, as `kubectl rollout status` decides: it saw the
// spec's generation, every desired pod is of the current template and
// available, and no pod of an older template is left. Else it says what
// the rollout is waiting for.
func (s *State) RolledOut() (bool, string) {
	switch {
	case s.ObservedGeneration < s.Generation:
		return false, fmt.Sprintf("the controller to observe generation %d (it has seen %d)", s.Generation, s.ObservedGeneration)
	case s.Updated != s.Desired:
		return false, fmt.Sprintf("%d of %d pods to be updated", s.Desired-s.Updated, s.Desired)
	case s.Available != s.Desired:
		return false, fmt.Sprintf("%d of %d pods to be available", s.Desired-s.Available, s.Desired)
	case s.Total != s.Desired:
		return false, fmt.Sprintf("%d old pods to go", s.Total-s.Desired)
	}
	return true, ""
}

// PodReady says whether the pod's Ready condition is true.
func PodReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ContainerReady says whether the addon's container in pod runs and is
// ready.
func (w Workload) ContainerReady(pod *corev1.Pod) bool {
	st := w.ContainerStatus(pod)
	return st != nil && st.Ready && st.State.Running != nil
}

// NotReady says how the addon's container in pod is not ready yet
// ("container coredns: waiting ContainerCreating"); empty when it is.
func (w Workload) NotReady(pod *corev1.Pod) string {
	if w.ContainerReady(pod) {
		return ""
	}
	st := w.ContainerStatus(pod)
	if st == nil {
		return "no status for container " + w.Container + " yet"
	}
	return describeContainer(*st)
}

// failureReasons are the waiting reasons of a container that will not
// run: a crash loop, an image the kubelet cannot pull or use.
var failureReasons = map[string]bool{
	"CrashLoopBackOff": true, "ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "CreateContainerError": true, "CreateContainerConfigError": true, "RunContainerError": true,
}

// Failing says why the addon's container in pod will not run (it
// crash-loops, cannot get its image, exited with an error); empty when
// it runs or may still start.
func (w Workload) Failing(pod *corev1.Pod) string {
	st := w.ContainerStatus(pod)
	if st == nil {
		return ""
	}
	if wt := st.State.Waiting; wt != nil && failureReasons[wt.Reason] {
		return describeContainer(*st)
	}
	for _, t := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
		if t != nil && t.ExitCode != 0 {
			return describeContainer(*st)
		}
	}
	return ""
}

// DescribeNotReady says, for each of pods (the workload's) that is not
// ready, where it is stuck: unscheduled, a container waiting (and why)
// or restarting; and what to run next (kubectl is a kubectl command line
// for the workload's namespace).
func (s *State) DescribeNotReady(pods []corev1.Pod, kubectl string) string {
	if len(pods) == 0 {
		return fmt.Sprintf("\n  no pod has label %s yet: see `%s describe %s %s`", s.Selector, kubectl, strings.ToLower(string(s.Kind)), s.Name)
	}
	var b strings.Builder
	for _, p := range pods {
		if PodReady(&p) {
			continue
		}
		node := p.Spec.NodeName
		if node == "" {
			node = "no node"
		}
		fmt.Fprintf(&b, "\n  pod %s: %s on %s", p.Name, p.Status.Phase, node)
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, "\n    not scheduled: %s %s", cond.Reason, cond.Message)
			}
		}
		for _, cst := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if !cst.Ready {
				fmt.Fprintf(&b, "\n    %s", describeContainer(cst))
			}
		}
		fmt.Fprintf(&b, "\n    see `%s describe pod %s` and `%s logs %s`", kubectl, p.Name, kubectl, p.Name)
	}
	return b.String()
}

// describeContainer says how a container is: its state, and how its
// last run ended when it was restarted ("container coredns: waiting
// CrashLoopBackOff; restarted 4 times, last terminated Error (exit 1)").
func describeContainer(st corev1.ContainerStatus) string {
	s := "container " + st.Name + ": " + containerState(st.State, st.Ready)
	if st.RestartCount > 0 || st.LastTerminationState.Terminated != nil {
		s += fmt.Sprintf("; restarted %d times, last %s", st.RestartCount, containerState(st.LastTerminationState, false))
	}
	return s
}

// containerState says what state s is: waiting, terminated or running
// (ready says whether its readiness probe passes).
func containerState(s corev1.ContainerState, ready bool) string {
	switch {
	case s.Waiting != nil:
		return strings.TrimSpace("waiting " + s.Waiting.Reason + " " + s.Waiting.Message)
	case s.Terminated != nil:
		return strings.TrimSpace(fmt.Sprintf("terminated %s (exit %d) %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message))
	case s.Running != nil && ready:
		return "running"
	case s.Running != nil:
		return "running, not ready (its readiness probe fails)"
	}
	return "not started"
}

// PodNotReadyOn says why the workload's pod on node is not ready ("" when
// it is).
func (s *State) PodNotReadyOn(ctx context.Context, cs kubernetes.Interface, node string) string {
	pods, err := s.Pods(ctx, cs)
	if err != nil {
		return err.Error()
	}
	var stuck *corev1.Pod
	for i := range pods {
		if pods[i].Spec.NodeName != node {
			continue
		}
		if PodReady(&pods[i]) {
			return ""
		}
		stuck = &pods[i]
	}
	if stuck == nil {
		return "no " + s.Component + " pod on the node yet"
	}
	return fmt.Sprintf("%s pod %s not Ready (%s)", s.Component, stuck.Name, cmp.Or(s.NotReady(stuck), string(stuck.Status.Phase)))
}
