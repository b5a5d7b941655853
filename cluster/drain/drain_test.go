package drain

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/devk/devk/internal/progress"
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

// A drain whose eviction is cut once (the API server restarting: the
// fake clientset's reactor answers the first eviction with an unexpected
// EOF) asks again and drains the node; one refused for good fails.
func TestDrainRetriesTransient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		first   error
		wantErr string
	}{
		{"cut once", io.ErrUnexpectedEOF, ""},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web", errors.New("no")), "evict pod default/web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}},
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "web"}, Spec: corev1.PodSpec{NodeName: "n"}},
			)
			evictions := 0
			cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				if evictions++; evictions == 1 {
					return true, nil, tc.first
				}
				return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "default", "web")
			})
			_, err := Node(context.Background(), cs, "n", "devk up", progress.Discard())
			if tc.wantErr == "" {
				if err != nil || evictions != 2 {
					t.Fatalf("drain: %v after %d evictions, want drained after 2", err, evictions)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || evictions != 1 {
				t.Fatalf("drain: %v after %d evictions, want an error saying %q after 1", err, evictions, tc.wantErr)
			}
		})
	}
}
