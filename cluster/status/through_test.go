package status

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestThrough: a cluster seen through its API alone: nodes in creation
// order with role, address, pod subnet, Ready and kubelet version; each
// node's static pods from their mirror pods and its addon pods, with the
// image named and the image run.
func TestThrough(t *testing.T) {
	at := func(s int64) metav1.Time { return metav1.NewTime(time.Unix(s, 0)) }
	node := func(name string, created int64, cp, ready bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created), Labels: map[string]string{}},
			Spec:   corev1.NodeSpec{PodCIDR: "10.244.0.0/24"},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.34.4"}, Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0." + name[len(name)-1:]}}}}
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "KubeletNotReady", Message: "network plugin not ready"}}
		return n
	}
	pod := func(name, nodeName, image, imageID string, mirror, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Annotations: map[string]string{}},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: image}}}}
		if mirror {
			p.Annotations[corev1.MirrorPodAnnotationKey] = "x"
			p.Spec.Containers[0].Name = "kube-apiserver"
		} else {
			p.Spec.Containers[0].Name = "kube-proxy"
		}
		cond := corev1.ConditionFalse
		if ready {
			cond = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, ImageID: imageID, RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, Ready: ready}}
		return p
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-proxy", Image: "reg/kube-proxy:v1.34.4"}}}}}}
	cs := fake.NewClientset(node("w2", 20, false, false), node("cp1", 10, true, true), ds,
		pod("kube-apiserver-cp1", "cp1", "reg/kube-apiserver@sha256:aa", "reg/kube-apiserver@sha256:aa", true, true),
		pod("kube-proxy-x1", "w2", "reg/kube-proxy:v1.34.4", "reg/kube-proxy@sha256:bb", false, false))
	st, err := Through(context.Background(), cs, "ctx", "https://10.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 2 || st.Nodes[0].Name != "cp1" || st.Nodes[0].Role != "control-plane" || !st.Nodes[0].Ready || st.Nodes[0].IP != "10.0.0.1" || st.Nodes[0].Kubelet != "v1.34.4" {
		t.Fatalf("nodes %+v", st.Nodes)
	}
	w := st.Nodes[1]
	if w.Role != "worker" || w.Ready || w.Message != "KubeletNotReady: network plugin not ready" {
		t.Errorf("worker %+v", w)
	}
	if c := st.Nodes[0].Components; len(c) != 1 || c[0].Name != "kube-apiserver" || c[0].Running != "reg/kube-apiserver@sha256:aa" || !c[0].Healthy || c[0].Restarts != 2 || c[0].State != "running" {
		t.Errorf("cp1's static pods %+v", c)
	}
	if a := w.Addons; len(a) != 1 || a[0].Pod != "kube-proxy-x1" || a[0].Manifest != "reg/kube-proxy:v1.34.4" || a[0].Running != "reg/kube-proxy@sha256:bb" || a[0].Healthy {
		t.Errorf("w2's addons %+v", a)
	}
	if st.Node != "cp1" || len(st.Components) != 1 {
		t.Errorf("the first node %s, %d components", st.Node, len(st.Components))
	}
}
