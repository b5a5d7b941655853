package digest

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/cri"
)

const (
	proxyA = "localhost:5000/kube-proxy@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	proxyB = "localhost:5000/kube-proxy@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func proxyDaemonSet(image string) *appsv1.DaemonSet {
	labels := map[string]string{"k8s-app": "kube-proxy"}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-proxy", Image: image}}}}}}
}

func proxyPod(name, node, imageID string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-proxy"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "kube-proxy", Image: proxyA}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "kube-proxy", ImageID: imageID, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
}

// podRuntime is a runtime with one running container per pod name, for
// the pods on this node (the digest sources only read it).
type podRuntime map[string]string // pod -> imageRef

func (r podRuntime) Containers(_ context.Context, f cri.Filter) ([]cri.Container, error) {
	if ref, ok := r[f.PodName]; ok {
		return []cri.Container{{ID: "c-" + f.PodName, Name: f.Container, PodName: f.PodName, PodNamespace: f.PodNamespace, State: 1, ImageRef: ref}}, nil
	}
	return nil, nil
}

func (r podRuntime) ContainerStatus(_ context.Context, id string) (*cri.Status, error) {
	pod := strings.TrimPrefix(id, "c-")
	return &cri.Status{Container: cri.Container{ID: id, PodName: pod, State: 1, ImageRef: r[pod]}}, nil
}

func (podRuntime) Sandboxes(context.Context, string) ([]cri.Sandbox, error) { return nil, nil }

func TestAddonSources(t *testing.T) {
	proxy := Target{Component: build.Component{Name: "kube-proxy"}}
	for _, tc := range []struct {
		name     string
		objects  []runtime.Object
		runtime  podRuntime
		workload string // the digest, or what the note says
		pods     string
		absent   bool
	}{
		{name: "absent", workload: "not on the cluster (no DaemonSet kube-system/kube-proxy)", pods: "not on the cluster", absent: true},
		{name: "agree", objects: []runtime.Object{proxyDaemonSet(proxyA), proxyPod("kube-proxy-1", "node1", proxyA), proxyPod("kube-proxy-2", "node2", proxyA)},
			runtime: podRuntime{"kube-proxy-1": proxyA}, workload: Of(proxyA), pods: Of(proxyA)},
		{name: "a pod runs another digest", objects: []runtime.Object{proxyDaemonSet(proxyA), proxyPod("kube-proxy-1", "node1", proxyA), proxyPod("kube-proxy-2", "node2", proxyB)},
			runtime: podRuntime{"kube-proxy-1": proxyA}, workload: Of(proxyA), pods: "pod kube-proxy-2: " + Of(proxyB)},
		{name: "this node's runtime runs another digest", objects: []runtime.Object{proxyDaemonSet(proxyA), proxyPod("kube-proxy-1", "node1", proxyA)},
			runtime: podRuntime{"kube-proxy-1": proxyB}, workload: Of(proxyA), pods: "CRI of kube-proxy-1: " + Of(proxyB)},
		{name: "no running container on this node", objects: []runtime.Object{proxyDaemonSet(proxyA), proxyPod("kube-proxy-1", "node1", proxyA)},
			runtime: podRuntime{}, workload: Of(proxyA), pods: "CRI of kube-proxy-1: nothing running"},
		{name: "tag", objects: []runtime.Object{proxyDaemonSet("registry.k8s.io/kube-proxy:v1.34.4")}, workload: "by tag, not by digest", pods: "no pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.objects...)
			for _, c := range []struct {
				src  Source
				want string
			}{{Workload{Client: cs}, tc.workload}, {Pods{Client: cs, Runtime: tc.runtime, NodeName: "node1"}, tc.pods}} {
				ob, err := c.src.Observe(context.Background(), proxy)
				if err != nil {
					t.Fatal(err)
				}
				if got := ob.Digest + " " + ob.Note; !strings.Contains(got, c.want) {
					t.Errorf("%s: %+v, want %q", c.src.Name(), ob, c.want)
				}
				if ob.Absent != tc.absent || (tc.absent && !ob.NotApplicable) {
					t.Errorf("%s: absent %v, want %v", c.src.Name(), ob.Absent, tc.absent)
				}
			}
		})
	}
	// A static pod has no addon view.
	ob, _ := Workload{Client: fake.NewClientset()}.Observe(context.Background(), Target{Component: build.Component{Name: "apiserver", StaticPod: true}})
	if !ob.NotApplicable || ob.Absent {
		t.Fatalf("apiserver: %+v", ob)
	}
}

// TestAddonPodsOnEveryNode: with the runtimes of a devk cluster's other
// nodes, a pod there is checked through its own node's runtime.
func TestAddonPodsOnEveryNode(t *testing.T) {
	proxy := Target{Component: build.Component{Name: "kube-proxy"}}
	cs := fake.NewClientset(proxyDaemonSet(proxyA), proxyPod("kube-proxy-1", "node1", proxyA), proxyPod("kube-proxy-2", "node2", proxyA))
	src := Pods{Client: cs, Runtime: podRuntime{"kube-proxy-1": proxyA}, NodeName: "node1", Others: NodeRuntimes{"node2": podRuntime{"kube-proxy-2": proxyB}}}
	ob, err := src.Observe(context.Background(), proxy)
	if err != nil {
		t.Fatal(err)
	}
	if ob.Digest != "" || !strings.Contains(ob.Note, "CRI of kube-proxy-2: "+Of(proxyB)) || !strings.Contains(ob.Ref, "2 on nodes whose runtime was asked") {
		t.Errorf("node2's runtime runs another digest than its pod reports: %+v", ob)
	}
	src.Others = NodeRuntimes{"node2": podRuntime{"kube-proxy-2": proxyA}}
	if ob, _ := src.Observe(context.Background(), proxy); ob.Digest != Of(proxyA) {
		t.Errorf("every node agrees: %+v", ob)
	}
}

// TestAbsentAddonIsNotAMismatch: pushed and registry agree, and the
// cluster does not run the addon: reported as absent, not as a mismatch.
func TestAbsentAddonIsNotAMismatch(t *testing.T) {
	st := &build.StateFile{Components: map[string]*build.ComponentState{}}
	obs := staticSource{Observation{Digest: Of(proxyA)}}
	reps, err := Compare(context.Background(), []build.Component{{Name: "kube-proxy"}}, st,
		[]Source{obs, Workload{Client: fake.NewClientset()}, Pods{Client: fake.NewClientset()}})
	if err != nil || len(reps) != 1 || !reps[0].Match || !reps[0].Absent {
		t.Fatalf("reports %+v, %v", reps, err)
	}
}

type staticSource struct{ ob Observation }

func (staticSource) Name() string { return "pushed" }
func (s staticSource) Observe(context.Context, Target) (Observation, error) {
	return s.ob, nil
}
