package drain

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestDrained(t *testing.T) {
	ds := metav1.OwnerReference{Kind: "DaemonSet", Name: "kube-proxy", Controller: ptr.To(true)}
	rs := metav1.OwnerReference{Kind: "ReplicaSet", Name: "web", Controller: ptr.To(true)}
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"deployment pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{rs}}}, true},
		{"bare pod", corev1.Pod{}, true},
		{"daemonset pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ds}}}, false},
		{"mirror pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}}, false},
		{"going, waited for", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, true},
		{"finished", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
	} {
		if got := drained(tc.pod); got != tc.want {
			t.Errorf("%s: drained %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDrainStep(t *testing.T) {
	now := metav1.Now()
	ds := metav1.OwnerReference{Kind: "DaemonSet", Name: "kube-proxy", Controller: ptr.To(true)}
	pod := func(uid string, mod func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid)}}
		if mod != nil {
			mod(&p)
		}
		return p
	}
	pods := []corev1.Pod{
		pod("web", nil),
		pod("going", func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		pod("proxy", func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{ds} }),
		pod("done-before", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("done-after-eviction", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
	}
	evict, waiting := step(pods, map[types.UID]bool{"done-after-eviction": true})
	names := func(ps []corev1.Pod) (out []string) {
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(evict); !slices.Equal(got, []string{"web"}) {
		t.Errorf("evict %v, want [web]", got)
	}
	if got := names(waiting); !slices.Equal(got, []string{"web", "going", "done-after-eviction"}) {
		t.Errorf("waiting for %v, want [web going done-after-eviction]", got)
	}
	if evict, waiting := step(pods[2:4], map[types.UID]bool{}); len(evict)+len(waiting) != 0 {
		t.Errorf("a node with only DaemonSet and finished pods is drained: %v %v", evict, waiting)
	}
}
