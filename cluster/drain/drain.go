// Package drain takes a node out of the cluster through the API, as
// `kubectl drain --ignore-daemonsets` and `kubectl delete node` do:
// cordon it, evict its pods honouring PodDisruptionBudgets and wait for
// them to go, and at the end delete the Node and the pods still bound
// to it, or uncordon it. node remove's drain and node-object phases and
// devk upgrade's kubelet steps call it.
package drain

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

const (
	// timeout bounds the wait for the evicted pods to go.
	timeout = 2 * time.Minute
	// pollInterval is how often drain looks at the node's pods.
	pollInterval = 250 * time.Millisecond
	// restartWait bounds how long a call is made again while the API
	// server does not answer: a control-plane node's new kubelet may
	// restart its static pods, the API server among them, in a few
	// seconds; a cluster that is down is said to be within it.
	restartWait = 30 * time.Second
)

// answered makes call until it returns an error the API server is not
// to blame for (kube.Transient), or nil, for at most restartWait.
func answered(ctx context.Context, call func(context.Context) error) error {
	var err error
	werr := wait.PollUntilContextTimeout(ctx, pollInterval, restartWait, true, func(ctx context.Context) (bool, error) {
		err = call(ctx)
		return err == nil || !kube.Transient(err), nil
	})
	if werr != nil && err == nil {
		return werr
	}
	return err
}

// drained says whether drain moves pod p off its node: not a
// DaemonSet's (its controller would put it back; it goes with the node),
// not a mirror pod (the kubelet's static pod: it goes with the kubelet),
// not one that has finished. Drain evicts each such pod and waits until
// it is gone, terminating ones included.
func drained(p corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

// Node is `kubectl drain --ignore-daemonsets` of node name: cordon, then
// evict every pod but DaemonSets' and mirror pods through the Eviction
// API, so PodDisruptionBudgets hold, and wait until they are gone,
// reporting what it waits for to rep. A node that never registered has
// nothing to drain. upCmd is the command that starts the cluster, for
// the error of an API server that does not answer.
func Node(ctx context.Context, cs kubernetes.Interface, name, upCmd string, rep progress.Reporter) (phase.Outcome, error) {
	var n *corev1.Node
	err := answered(ctx, func(ctx context.Context) (err error) {
		n, err = cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return phase.Unchanged("no Node %s (it never registered)", name), nil
	}
	if err != nil {
		return phase.Done, fmt.Errorf("read node %s: %w (is the cluster up? `%s`)", name, err, upCmd)
	}
	cordoned := false
	if !n.Spec.Unschedulable {
		if err := patchUnschedulable(ctx, cs, name, true); err != nil {
			return phase.Done, fmt.Errorf("cordon node %s: %w", name, err)
		}
		cordoned = true
	}
	evicted := map[types.UID]bool{}
	var last string
	err = wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		evict, waiting := step(pods.Items, evicted)
		if len(waiting) == 0 {
			return true, nil
		}
		last = fmt.Sprintf("%d pods still on the node, e.g. %s/%s", len(waiting), waiting[0].Namespace, waiting[0].Name)
		for _, p := range evict {
			ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
			switch err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev); {
			case err == nil, apierrors.IsNotFound(err):
				evicted[p.UID] = true
			case apierrors.IsTooManyRequests(err):
				last = fmt.Sprintf("a PodDisruptionBudget does not allow pod %s/%s to be evicted yet", p.Namespace, p.Name)
			case kube.Transient(err):
				// The API server restarts (a control-plane node's new
				// kubelet may restart its static pods): ask again.
				last = fmt.Sprintf("the API server did not take the eviction of pod %s/%s (%v); asking again", p.Namespace, p.Name, err)
			default:
				return false, fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		rep.Progress(progress.StepOf(ctx), progress.Status{Note: "waiting: " + last})
		return false, nil
	})
	if poll.TimedOut(ctx, err) {
		return phase.Done, fmt.Errorf("drain node %s: %s after %s: delete those pods, or fix what holds them, and run it again", name, last, timeout)
	}
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(cordoned || len(evicted) > 0, "cordoned, %d pods evicted", len(evicted)), nil
}

// Uncordon is `kubectl uncordon` of node name: schedulable again.
func Uncordon(ctx context.Context, cs kubernetes.Interface, name string) (phase.Outcome, error) {
	var n *corev1.Node
	if err := answered(ctx, func(ctx context.Context) (err error) {
		n, err = cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err
	}); err != nil {
		return phase.Done, fmt.Errorf("read node %s: %w", name, err)
	}
	if !n.Spec.Unschedulable {
		return phase.Unchanged("schedulable"), nil
	}
	if err := patchUnschedulable(ctx, cs, name, false); err != nil {
		return phase.Done, fmt.Errorf("uncordon node %s: %w", name, err)
	}
	return phase.Changed("uncordoned"), nil
}

// patchUnschedulable cordons node name (or uncordons it).
func patchUnschedulable(ctx context.Context, cs kubernetes.Interface, name string, unschedulable bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, unschedulable)
	return answered(ctx, func(ctx context.Context) error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// step is one look of drain at the pods on the node: those to evict
// now (drained ones not yet evicted and not already going), and those it
// still waits for (every drained one, and every pod it evicted until the
// pod is deleted: a pod that finished after its eviction is still there
// until its kubelet deletes it).
func step(pods []corev1.Pod, evicted map[types.UID]bool) (evict, waiting []corev1.Pod) {
	for _, p := range pods {
		switch {
		case evicted[p.UID]:
			waiting = append(waiting, p)
		case drained(p):
			waiting = append(waiting, p)
			if p.DeletionTimestamp == nil {
				evict = append(evict, p)
			}
		}
	}
	return evict, waiting
}

// DeleteNode deletes Node name and the pods still bound to it (its
// DaemonSet pods, whose kubelet is gone: the pod garbage collector would
// take them only after its quarantine), at once (grace 0: nothing runs
// them any more).
func DeleteNode(ctx context.Context, cs kubernetes.Interface, name string) (phase.Outcome, error) {
	deleted := false
	switch err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); {
	case err == nil:
		deleted = true
	case !apierrors.IsNotFound(err):
		return phase.Done, fmt.Errorf("delete node %s: %w", name, err)
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return phase.Done, fmt.Errorf("list the pods of node %s: %w", name, err)
	}
	gone := 0
	for _, p := range pods.Items {
		err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return phase.Done, fmt.Errorf("delete pod %s/%s of node %s: %w", p.Namespace, p.Name, name, err)
		}
		gone++
	}
	if !deleted {
		return phase.ChangedIf(gone > 0, "no Node %s; %d pods of it deleted", name, gone), nil
	}
	return phase.Changed("deleted, and %d pods bound to it", gone), nil
}
