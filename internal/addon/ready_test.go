package addon

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestRolledOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    State
		want string // "" means rolled out
	}{
		{"done", State{Generation: 2, ObservedGeneration: 2, Desired: 2, Updated: 2, Available: 2, Total: 2}, ""},
		{"spec not observed", State{Generation: 3, ObservedGeneration: 2, Desired: 2, Updated: 2, Available: 2, Total: 2}, "observe generation 3"},
		{"updating", State{Generation: 2, ObservedGeneration: 2, Desired: 2, Updated: 1, Available: 2, Total: 2}, "1 of 2 pods to be updated"},
		{"old pods left", State{Generation: 2, ObservedGeneration: 2, Desired: 2, Updated: 2, Available: 2, Total: 3}, "1 old pods"},
		{"not available", State{Generation: 2, ObservedGeneration: 2, Desired: 2, Updated: 2, Available: 1, Total: 2}, "1 of 2 pods to be available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := tc.s.RolledOut()
			if ok != (tc.want == "") || !strings.Contains(why, tc.want) {
				t.Fatalf("RolledOut = %v, %q; want %q", ok, why, tc.want)
			}
		})
	}
}

// TestRolledOutFromTheObjects: what a DaemonSet's and a Deployment's
// status say, read as Get reads them, rolls out as kubectl rollout
// status decides.
func TestRolledOutFromTheObjects(t *testing.T) {
	proxy, _ := Lookup("kube-proxy")
	ds := func(gen, observed int64, desired, updated, available int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Status: appsv1.DaemonSetStatus{ObservedGeneration: observed,
			DesiredNumberScheduled: desired, CurrentNumberScheduled: desired, UpdatedNumberScheduled: updated, NumberAvailable: available}}
	}
	for _, tt := range []struct {
		name string
		ds   *appsv1.DaemonSet
		done bool
	}{
		{"rolled out", ds(2, 2, 1, 1, 1), true},
		{"new spec not seen yet", ds(3, 2, 1, 1, 1), false},
		// kubectl's: nothing to roll out is rolled out.
		{"no node", ds(1, 1, 0, 0, 0), true},
		{"pod not available", ds(1, 1, 1, 1, 0), false},
		{"old pod available, new not started", ds(2, 2, 1, 0, 1), false},
	} {
		t.Run("daemonset "+tt.name, func(t *testing.T) {
			s, _ := daemonSetState(proxy, tt.ds)
			if done, why := s.RolledOut(); done != tt.done {
				t.Errorf("RolledOut = %v (%s), want %v", done, why, tt.done)
			}
		})
	}
	dns, _ := Lookup("coredns")
	dep := func(gen, observed int64, want, replicas, updated, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(want)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available}}
	}
	for _, tt := range []struct {
		name string
		d    *appsv1.Deployment
		done bool
	}{
		{"available", dep(1, 1, 2, 2, 2, 2), true},
		{"new spec not seen yet", dep(2, 1, 2, 2, 2, 2), false},
		{"one available", dep(1, 1, 2, 2, 2, 1), false},
		{"rolling: an old pod left", dep(2, 2, 2, 3, 2, 2), false},
		{"old pods available, new not", dep(2, 2, 2, 2, 0, 2), false},
	} {
		t.Run("deployment "+tt.name, func(t *testing.T) {
			s, _ := deploymentState(dns, tt.d)
			if done, why := s.RolledOut(); done != tt.done {
				t.Errorf("RolledOut = %v (%s), want %v", done, why, tt.done)
			}
		})
	}
	unset := &appsv1.Deployment{Status: appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}}
	if s, _ := deploymentState(dns, unset); s.Desired != 1 {
		t.Errorf("a Deployment without replicas wants %d, not the API's default 1", s.Desired)
	}
}

func TestDescribeNotReady(t *testing.T) {
	w, _ := Lookup("coredns")
	s := &State{Workload: w, Selector: labels.SelectorFromSet(labels.Set{"k8s-app": "kube-dns"})}
	if got := s.DescribeNotReady(nil, "kubectl -n kube-system"); !strings.Contains(got, "k8s-app=kube-dns") || !strings.Contains(got, "`kubectl -n kube-system describe deployment coredns`") {
		t.Errorf("no pods: %s", got)
	}
	ready := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns-ready"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	unscheduled := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns-unscheduled"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 node(s) had untolerated taint"}}}}
	pulling := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns-pull"}, Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "coredns", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}}}
	got := s.DescribeNotReady([]corev1.Pod{ready, unscheduled, pulling, crashing("coredns-crash")}, "kubectl -n kube-system")
	if strings.Contains(got, "coredns-ready") {
		t.Errorf("describes a ready pod:\n%s", got)
	}
	for _, want := range []string{
		"pod coredns-unscheduled: Pending on no node", "not scheduled: Unschedulable 0/1 nodes are available",
		"pod coredns-pull: Pending on n", "container coredns: waiting ImagePullBackOff Back-off pulling image",
		"waiting CrashLoopBackOff; restarted 4 times, last terminated Error (exit 1)",
		"`kubectl -n kube-system describe pod coredns-crash` and `kubectl -n kube-system logs coredns-crash`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("description lacks %q:\n%s", want, got)
		}
	}
}

// crashing is a pod whose coredns container crash-loops.
func crashing(name string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "coredns", RestartCount: 4,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}}}}}
}

// TestContainerNotReady: what a swap's rollout reports of the addon's
// container: a container that will not run fails it at once, one that
// may still start is only not ready yet.
func TestContainerNotReady(t *testing.T) {
	w, _ := Lookup("coredns")
	pod := func(st ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: append([]corev1.ContainerStatus{{Name: "sidecar", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}, st...)}}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2}}
	crash := crashing("c")
	for _, tt := range []struct {
		name              string
		pod               *corev1.Pod
		failing, notReady string // "" means not failing, ready
	}{
		{"ready", pod(corev1.ContainerStatus{Name: "coredns", Ready: true, State: running}), "", ""},
		{"no status yet", pod(), "", "no status for container coredns yet"},
		{"creating", pod(corev1.ContainerStatus{Name: "coredns", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}),
			"", "container coredns: waiting ContainerCreating"},
		{"probe failing", pod(corev1.ContainerStatus{Name: "coredns", State: running}), "", "running, not ready"},
		{"crash loop", &crash, "container coredns: waiting CrashLoopBackOff; restarted 4 times, last terminated Error (exit 1)", "CrashLoopBackOff"},
		{"image pull", pod(corev1.ContainerStatus{Name: "coredns", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}),
			"waiting ErrImagePull not found", "ErrImagePull"},
		{"exited", pod(corev1.ContainerStatus{Name: "coredns", State: exited}), "terminated Error (exit 2)", "terminated Error (exit 2)"},
		{"ready again after a crash", pod(corev1.ContainerStatus{Name: "coredns", Ready: true, State: running, RestartCount: 1, LastTerminationState: exited}),
			"container coredns: running; restarted 1 times, last terminated Error (exit 2)", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			failing, notReady := w.Failing(tt.pod), w.NotReady(tt.pod)
			if (failing == "") != (tt.failing == "") || !strings.Contains(failing, tt.failing) {
				t.Errorf("Failing = %q, want %q", failing, tt.failing)
			}
			if (notReady == "") != (tt.notReady == "") || !strings.Contains(notReady, tt.notReady) {
				t.Errorf("NotReady = %q, want %q", notReady, tt.notReady)
			}
			if ready := w.ContainerReady(tt.pod); ready != (tt.notReady == "") {
				t.Errorf("ContainerReady = %v, NotReady %q", ready, notReady)
			}
		})
	}
}

// TestPodNotReadyOn: a join waits for kube-proxy's pod on the new node,
// not for any pod of the DaemonSet.
func TestPodNotReadyOn(t *testing.T) {
	w, _ := Lookup("kube-proxy")
	sel := map[string]string{"k8s-app": "kube-proxy"}
	pod := func(name, node string, ready corev1.ConditionStatus, st ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace, Labels: sel}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}, ContainerStatuses: st}}
	}
	ctx := context.Background()
	cs := fake.NewClientset(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}},
		pod("kube-proxy-a", "node-a", corev1.ConditionTrue),
		pod("kube-proxy-b", "node-b", corev1.ConditionFalse, corev1.ContainerStatus{Name: "kube-proxy",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}}}))
	s, err := Get(ctx, cs, w)
	if err != nil || s == nil {
		t.Fatalf("Get = %v, %v", s, err)
	}
	for node, want := range map[string]string{
		"node-a": "",
		"node-b": "kube-proxy pod kube-proxy-b not Ready (container kube-proxy: waiting ErrImagePull)",
		"node-c": "no kube-proxy pod on the node yet",
	} {
		if got := s.PodNotReadyOn(ctx, cs, node); got != want {
			t.Errorf("PodNotReadyOn(%s) = %q, want %q", node, got, want)
		}
	}
}
