package rollout

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devk/devk/internal/addon"
)

const (
	oldImage = "localhost:5000/kube-proxy@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	newImage = "localhost:5000/kube-proxy@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// kubeProxy is a cluster with kube-proxy's DaemonSet on image, its
// status as its controller last wrote it (every pod updated and
// available), and one pod per container state given, on image.
func kubeProxy(t *testing.T, image string, states ...corev1.ContainerState) (*fake.Clientset, addon.Workload) {
	t.Helper()
	w, ok := addon.Lookup("kube-proxy")
	if !ok {
		t.Fatal("addon.Lookup has no kube-proxy")
	}
	labels := map[string]string{"k8s-app": w.Name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Generation: 1},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: w.Container, Image: image}}},
			},
		},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: int32(len(states)),
			CurrentNumberScheduled: int32(len(states)), UpdatedNumberScheduled: int32(len(states)), NumberAvailable: int32(len(states)), NumberReady: int32(len(states))},
	}
	cs := fake.NewClientset(ds)
	for i, st := range states {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-" + string(rune('a'+i)), Namespace: w.Namespace, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: w.Container, Image: image}}},
			Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: w.Container, Image: image, State: st}}},
		}
		if _, err := cs.CoreV1().Pods(w.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return cs, w
}

// TestSetImage: the image goes on the workload's container with the
// swap's annotations, and the other fields stay as they were.
func TestSetImage(t *testing.T) {
	ctx := context.Background()
	cs, w := kubeProxy(t, oldImage)
	ann := map[string]string{addon.SwappedImageAnnotation: newImage, addon.PreviousImageAnnotation: oldImage}
	if err := SetImage(ctx, cs, w, newImage, ann); err != nil {
		t.Fatal(err)
	}
	s, err := addon.Get(ctx, cs, w)
	if err != nil || s == nil {
		t.Fatalf("get %s: %v, %v", w, s, err)
	}
	if s.Image() != newImage {
		t.Errorf("%s names %s, want %s", w, s.Image(), newImage)
	}
	for k, v := range ann {
		if s.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, s.Annotations[k], v)
		}
	}
}

// TestWait: a rolled-out workload passes once its pods keep running; a
// pod of the image that crash-loops fails the wait at once, named; a
// workload naming another image fails it too; a rollout that does not
// come times out saying what it waited for.
func TestWait(t *testing.T) {
	ctx := context.Background()
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	crashing := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}

	cs, w := kubeProxy(t, newImage, running)
	if failing, err := Wait(ctx, cs, w, newImage, 4*settle); err != nil || failing != "" {
		t.Errorf("a rolled-out workload: %q, %v", failing, err)
	}

	cs, w = kubeProxy(t, newImage, running, crashing)
	t0 := time.Now()
	failing, err := Wait(ctx, cs, w, newImage, time.Minute)
	if err == nil || failing != w.Name+"-b" || !strings.Contains(err.Error(), "CrashLoopBackOff") {
		t.Errorf("a crash-looping pod: %q, %v", failing, err)
	}
	if took := time.Since(t0); took > settle {
		t.Errorf("the crash-looping pod failed the wait after %s, not at once", took)
	}

	cs, w = kubeProxy(t, oldImage, running)
	if _, err := Wait(ctx, cs, w, newImage, time.Minute); err == nil || !strings.Contains(err.Error(), "changed by someone else") {
		t.Errorf("a workload naming another image: %v", err)
	}

	cs, w = kubeProxy(t, newImage)
	ds, err := cs.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Status.ObservedGeneration = 0 // the controller has not seen the change yet
	if _, err := cs.AppsV1().DaemonSets(w.Namespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Wait(ctx, cs, w, newImage, time.Second); err == nil || !strings.Contains(err.Error(), "timed out after 1s") {
		t.Errorf("a rollout that does not come: %v", err)
	}
}
