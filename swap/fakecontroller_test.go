package swap

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
)

// fakeController is kube-controller-manager's DaemonSet and Deployment
// controllers, and the kubelets that run their pods, in miniature, as
// far as an addon swap sees them: on the fake clientset it bumps a
// workload's generation when its pod template changes (as the API server
// does), replaces the pods of an old template (a DaemonSet's first, a
// Deployment's once the new ones are available, as their rolling
// updates do), reports each pod's container status, and writes the
// workload's status. Pods on fakeNode's node also get a container in its
// fake runtime. The real controller-manager cannot run in a unit test
// (it needs an API server, etcd, a kubelet and containerd); the e2e
// suite (e2e/swap_test.go) swaps an addon on the real ones.
type fakeController struct {
	t    *testing.T
	node *fakeNode
	mu   sync.Mutex
	next int
	// stuck digests make pods that never start and never fail (a
	// rollout that can only time out).
	stuck map[string]bool
}

var (
	daemonSets  = appsv1.SchemeGroupVersion.WithResource("daemonsets")
	deployments = appsv1.SchemeGroupVersion.WithResource("deployments")
)

// remoteNode is where the fake schedules a Deployment's second replica:
// a node whose runtime the swap does not ask.
const remoteNode = "node2"

func newFakeController(t *testing.T, node *fakeNode) *fakeController {
	fc := &fakeController{t: t, node: node, stuck: map[string]bool{}}
	tracker := node.client.Tracker()
	store := clienttesting.ObjectReaction(tracker)
	for _, gvr := range []schema.GroupVersionResource{daemonSets, deployments} {
		// The fake clientset runs one reaction at a time, so the
		// generation moves with the template as in the API server.
		node.client.PrependReactor("patch", gvr.Resource, func(action clienttesting.Action) (bool, runtime.Object, error) {
			ns, name := action.GetNamespace(), action.(clienttesting.PatchAction).GetName()
			before, _ := tracker.Get(gvr, ns, name)
			handled, obj, err := store(action)
			if err != nil || before == nil {
				return handled, obj, err
			}
			after, err := tracker.Get(gvr, ns, name)
			if err != nil {
				return true, nil, err
			}
			if !apiequality.Semantic.DeepEqual(template(before), template(after)) {
				m := after.(metav1.Object)
				m.SetGeneration(before.(metav1.Object).GetGeneration() + 1)
				if err := tracker.Update(gvr, after, ns); err != nil {
					return true, nil, err
				}
			}
			return true, after, nil
		})
		// A status update changes the status alone, as the status
		// subresource does: the fake tracker would store the
		// controller's whole (maybe stale) object and undo an apply.
		node.client.PrependReactor("update", gvr.Resource, func(action clienttesting.Action) (bool, runtime.Object, error) {
			if action.GetSubresource() != "status" {
				return false, nil, nil
			}
			obj := action.(clienttesting.UpdateAction).GetObject()
			cur, err := tracker.Get(gvr, action.GetNamespace(), obj.(metav1.Object).GetName())
			if err != nil {
				return true, nil, err
			}
			switch c := cur.(type) {
			case *appsv1.DaemonSet:
				c.Status = obj.(*appsv1.DaemonSet).Status
			case *appsv1.Deployment:
				c.Status = obj.(*appsv1.Deployment).Status
			}
			return true, cur, tracker.Update(gvr, cur, action.GetNamespace())
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			time.Sleep(node.interval)
			fc.sync(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return fc
}

func template(obj runtime.Object) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		return &o.Spec.Template
	case *appsv1.Deployment:
		return &o.Spec.Template
	}
	return nil
}

// sync is one pass of the controllers and kubelets.
func (fc *fakeController) sync(ctx context.Context) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	apps := fc.node.client.AppsV1()
	for _, w := range addon.Workloads {
		s, err := addon.Get(ctx, fc.node.client, w)
		if err != nil || s == nil {
			continue
		}
		pods, err := s.Pods(ctx, fc.node.client)
		if err != nil {
			fc.t.Errorf("fake controller: %v", err)
			return
		}
		img := s.Image()
		var current, old []corev1.Pod
		for _, p := range pods {
			if w.PodImage(&p) == img {
				current = append(current, p)
			} else {
				old = append(old, p)
			}
		}
		switch w.Kind {
		case addon.DaemonSet:
			// maxUnavailable 1 on one node: the old pod goes first.
			for _, p := range old {
				fc.deletePod(ctx, &p)
			}
			if len(current) == 0 {
				current = append(current, fc.startPod(ctx, s, fc.node.node))
			}
			ds, err := apps.DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 1,
				CurrentNumberScheduled: int32(len(current)), UpdatedNumberScheduled: int32(len(current)), NumberAvailable: ready(w, current), NumberReady: ready(w, current)}
			if _, err := apps.DaemonSets(w.Namespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
				fc.t.Errorf("fake controller: %v", err)
			}
		case addon.Deployment:
			// Surge: every new replica first; the old ones go once all
			// new ones are available.
			for i := len(current); i < int(s.Desired); i++ {
				where := fc.node.node
				if i%2 == 1 {
					where = remoteNode
				}
				current = append(current, fc.startPod(ctx, s, where))
			}
			if ready(w, current) == s.Desired {
				for _, p := range old {
					fc.deletePod(ctx, &p)
				}
				old = nil
			}
			d, err := apps.Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: int32(len(current) + len(old)),
				UpdatedReplicas: int32(len(current)), AvailableReplicas: ready(w, current) + ready(w, old), ReadyReplicas: ready(w, current) + ready(w, old)}
			if _, err := apps.Deployments(w.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
				fc.t.Errorf("fake controller: %v", err)
			}
		}
	}
}

func ready(w addon.Workload, pods []corev1.Pod) int32 {
	n := int32(0)
	for _, p := range pods {
		if w.ContainerReady(&p) {
			n++
		}
	}
	return n
}

// startPod creates a pod of s's template on node, as the kubelet there
// reports it: running and ready, crash-looping for a broken digest, or
// still creating for a stuck one.
func (fc *fakeController) startPod(ctx context.Context, s *addon.State, node string) corev1.Pod {
	fc.next++
	w := s.Workload
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", w.Name, fc.next), Namespace: w.Namespace, Labels: s.Template.Labels},
		Spec: *s.Template.Spec.DeepCopy()}
	pod.Spec.NodeName = node
	img := s.Image()
	st := corev1.ContainerStatus{Name: w.Container, Image: img}
	fc.node.mu.Lock()
	broken := fc.node.broken[digest.Of(img)]
	fc.node.mu.Unlock()
	switch {
	case broken:
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container"}
		st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
		st.RestartCount = 1
	case fc.stuck[digest.Of(img)]:
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	default:
		st.State.Running = &corev1.ContainerStateRunning{}
		st.Ready, st.ImageID = true, img
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{st}}
	out, err := fc.node.client.CoreV1().Pods(w.Namespace).Create(ctx, &pod, metav1.CreateOptions{})
	if err != nil {
		fc.t.Errorf("fake controller: %v", err)
		return pod
	}
	if node == fc.node.node && st.State.Running != nil {
		fc.node.mu.Lock()
		fc.node.nextID++
		fc.node.containers = append(fc.node.containers, &cri.Status{Container: cri.Container{ID: fmt.Sprintf("c%063d", fc.node.nextID), Name: w.Container,
			PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: string(out.UID), State: runtimeapi.ContainerState_CONTAINER_RUNNING, ImageRef: img, CreatedAt: time.Now()}})
		fc.node.mu.Unlock()
	}
	return *out
}

// deletePod deletes the pod and stops its container on the fake runtime.
func (fc *fakeController) deletePod(ctx context.Context, p *corev1.Pod) {
	if err := fc.node.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		fc.t.Errorf("fake controller: %v", err)
	}
	fc.node.mu.Lock()
	defer fc.node.mu.Unlock()
	for _, c := range fc.node.containers {
		if c.PodName == p.Name && c.PodNamespace == p.Namespace {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		}
	}
}
