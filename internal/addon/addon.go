// Package addon is devk's one model of a cluster's addon workloads,
// which the packages that install, swap and verify them (cluster's addon
// phases, swap, digest, conformance's preflight) share: which workloads
// the addons are, how to read one, when its rollout is complete, why one
// of its pods is not ready, and the annotations a swap leaves on it. It
// is to addons what internal/staticpod is to static pods.
package addon

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Kind is the workload's API kind.
type Kind string

// The kinds of workload an addon runs as.
const (
	DaemonSet  Kind = "DaemonSet"
	Deployment Kind = "Deployment"
)

// Workload is one addon: the component whose image it runs (the name in
// the build catalog and in state.json) and the object that runs it.
type Workload struct {
	Component string
	Kind      Kind
	Namespace string
	Name      string
	// Container is the container whose image is the component's.
	Container string
}

// String names the object: DaemonSet kube-system/kube-proxy.
func (w Workload) String() string { return string(w.Kind) + " " + w.Namespace + "/" + w.Name }

// Workloads are the addons devk installs, in the order a swap takes them.
var Workloads = []Workload{
	{Component: "kube-proxy", Kind: DaemonSet, Namespace: metav1.NamespaceSystem, Name: "kube-proxy", Container: "kube-proxy"},
	{Component: "coredns", Kind: Deployment, Namespace: metav1.NamespaceSystem, Name: "coredns", Container: "coredns"},
}

// Lookup is the addon of component (kube-proxy, coredns).
func Lookup(component string) (Workload, bool) {
	for _, w := range Workloads {
		if w.Component == component {
			return w, true
		}
	}
	return Workload{}, false
}

// The annotations `devk swap` keeps on an addon's workload, written by
// server-side apply as FieldManager. `devk up` applies its own fields as
// kube.FieldManager and leaves these alone.
const (
	// SwappedImageAnnotation is the image a swap (or --rollback) put in
	// the container. While the container still names it, `devk up`
	// applies it instead of the image it recorded (KeptImage), as it keeps
	// the image of a manifest a swap wrote.
	SwappedImageAnnotation = "devk.dev/swapped-image"
	// PreviousImageAnnotation is the image the last swap replaced: what
	// `devk swap --rollback` puts back. It lives on the object, so it
	// survives a killed devk and needs no file on the node.
	PreviousImageAnnotation = "devk.dev/previous-image"
	// FieldManager is the swap's field manager. It must differ from
	// `devk up`'s: an apply drops the fields its manager applied before
	// and omits now, so a swap applying as "devk" only the image would
	// strip everything `devk up` applied.
	FieldManager = "devk-swap"
)

// KeptImage is the image `devk up` applies to the container of an addon
// whose live object is live (nil when absent): the one a swap put there,
// while the container still names it, else recorded. swapped says which.
func KeptImage(recorded string, live *State) (img string, swapped bool) {
	if live == nil {
		return recorded, false
	}
	s := live.Annotations[SwappedImageAnnotation]
	if s != "" && s == live.Image() && s != recorded {
		return s, true
	}
	return recorded, false
}

// State is what the API server has of an addon's workload now.
type State struct {
	Workload
	Annotations map[string]string
	Template    corev1.PodTemplateSpec
	Selector    labels.Selector
	// Generation is the spec's; ObservedGeneration the controller's.
	Generation, ObservedGeneration int64
	// Desired, Updated, Available and Total count pods: replicas of a
	// Deployment (Total includes the old ReplicaSets'), scheduled pods of
	// a DaemonSet (Total is currentNumberScheduled).
	Desired, Updated, Available, Total int32
}

// Get reads the addon's workload; nil (and no error) when the cluster
// has none.
func Get(ctx context.Context, cs kubernetes.Interface, w Workload) (*State, error) {
	var s *State
	var sel *metav1.LabelSelector
	var err error
	switch w.Kind {
	case DaemonSet:
		var ds *appsv1.DaemonSet
		if ds, err = cs.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
			s, sel = daemonSetState(w, ds)
		}
	case Deployment:
		var d *appsv1.Deployment
		if d, err = cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
			s, sel = deploymentState(w, d)
		}
	default:
		return nil, fmt.Errorf("addon %s: unknown kind %q", w.Component, w.Kind)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", w, err)
	}
	if s.Selector, err = metav1.LabelSelectorAsSelector(sel); err != nil {
		return nil, fmt.Errorf("%s: selector: %w", w, err)
	}
	return s, nil
}

// daemonSetState is what ds says of w, and the selector of its pods.
func daemonSetState(w Workload, ds *appsv1.DaemonSet) (*State, *metav1.LabelSelector) {
	st := ds.Status
	return &State{Workload: w, Annotations: ds.Annotations, Template: ds.Spec.Template,
		Generation: ds.Generation, ObservedGeneration: st.ObservedGeneration,
		Desired: st.DesiredNumberScheduled, Updated: st.UpdatedNumberScheduled, Available: st.NumberAvailable, Total: st.CurrentNumberScheduled,
	}, ds.Spec.Selector
}

// deploymentState is what d says of w, and the selector of its pods.
func deploymentState(w Workload, d *appsv1.Deployment) (*State, *metav1.LabelSelector) {
	st := d.Status
	return &State{Workload: w, Annotations: d.Annotations, Template: d.Spec.Template,
		Generation: d.Generation, ObservedGeneration: st.ObservedGeneration,
		Desired: ptr.Deref(d.Spec.Replicas, 1), Updated: st.UpdatedReplicas, Available: st.AvailableReplicas, Total: st.Replicas,
	}, d.Spec.Selector
}

// Image is the image the workload's pod template names for its
// container; empty when the template has no such container.
func (s *State) Image() string {
	if c := s.Container(); c != nil {
		return c.Image
	}
	return ""
}

// Container is the addon's container in the pod template.
func (s *State) Container() *corev1.Container {
	for i, c := range s.Template.Spec.Containers {
		if c.Name == s.Workload.Container {
			return &s.Template.Spec.Containers[i]
		}
	}
	return nil
}

// Pods are the workload's pods (by its selector) that are not being
// deleted.
func (s *State) Pods(ctx context.Context, cs kubernetes.Interface) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: s.Selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list the pods of %s: %w", s.Workload, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// PodImage is the image pod's spec names for the addon's container.
func (w Workload) PodImage(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == w.Container {
			return c.Image
		}
	}
	return ""
}

// ContainerStatus is the status of the addon's container in pod; nil
// before the kubelet reported one.
func (w Workload) ContainerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i, c := range pod.Status.ContainerStatuses {
		if c.Name == w.Container {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}
