package kubeadmupgrade

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestApplied: kubeadm upgrade apply of a version counts as finished
// only when kubeadm's ClusterConfiguration names it and kube-proxy's
// DaemonSet runs it (kubeadm's upload-config and addon phases); a
// cluster without kubeadm's ConfigMap is an error naming it. The
// objects are in client-go's fake clientset: Applied only reads them.
func TestApplied(t *testing.T) {
	objects := func(clusterVersion, proxyTag string) *fake.Clientset {
		return fake.NewClientset(
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
				Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: " + clusterVersion + "\nimageRepository: 127.0.0.1:5000\n"}},
			&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
				Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-proxy", Image: "127.0.0.1:5000/kube-proxy:" + proxyTag}}}}}},
		)
	}
	u := Upgrade{Version: "v1.35.4"}
	for _, c := range []struct {
		cluster, proxy string
		want           bool
	}{
		{"v1.35.4", "v1.35.4", true},
		{"v1.34.4", "v1.34.4", false},
		{"v1.35.4", "v1.34.4", false}, // killed before its addon phase
		{"v1.34.4", "v1.35.4", false},
	} {
		got, err := u.Applied(context.Background(), objects(c.cluster, c.proxy))
		if err != nil || got != c.want {
			t.Errorf("Applied with kubeadm-config at %s and kube-proxy at %s = %v, %v; want %v", c.cluster, c.proxy, got, err, c.want)
		}
	}
	if _, err := u.Applied(context.Background(), fake.NewClientset()); err == nil || !strings.Contains(err.Error(), "kube-system/kubeadm-config") {
		t.Errorf("Applied without kubeadm's ConfigMap: %v, want an error naming it", err)
	}
}

// TestExtraArgs: the flags a ClusterConfiguration (v1beta4) gives each
// static pod through extraArgs, by pod.
func TestExtraArgs(t *testing.T) {
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data: map[string]string{"ClusterConfiguration": `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
apiServer:
  extraArgs:
  - {name: feature-gates, value: "A=true"}
  - {name: v, value: "2"}
scheduler:
  extraArgs:
  - {name: bind-address, value: 127.0.0.1}
etcd:
  local:
    extraArgs:
    - {name: quota-backend-bytes, value: "1000"}
`}})
	got, err := ExtraArgs(context.Background(), cs)
	want := map[string][]string{"kube-apiserver": {"feature-gates", "v"}, "kube-scheduler": {"bind-address"}, "etcd": {"quota-backend-bytes"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ExtraArgs = %v, %v; want %v", got, err, want)
	}
}

// TestMirrorLag: a mirror pod of another image than its manifest lags
// (mirrorStale); of the manifest's image without any container status it
// lags (mirrorPending); with one it does not.
func TestMirrorLag(t *testing.T) {
	pod := func(image string, statuses int) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: image}}}}
		for range statuses {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "kube-apiserver"})
		}
		return p
	}
	const want = "127.0.0.1:5000/kube-apiserver:v1.35.4"
	for _, c := range []struct {
		pod   *corev1.Pod
		limit time.Duration
		lags  bool
	}{
		{pod("127.0.0.1:5000/kube-apiserver:v1.34.4", 1), mirrorStale, true},
		{pod(want, 0), mirrorPending, true},
		{pod(want, 1), mirrorPending, false},
	} {
		if limit, lags := mirrorLag(c.pod, "kube-apiserver", want); limit != c.limit || lags != c.lags {
			t.Errorf("mirrorLag(%s, %d statuses) = %s, %v; want %s, %v", c.pod.Spec.Containers[0].Image, len(c.pod.Status.ContainerStatuses), limit, lags, c.limit, c.lags)
		}
	}
}
