package remote

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/progress"
)

func nodeWith(arch string, images ...corev1.ContainerImage) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp1"}}
	n.Status.NodeInfo.Architecture = arch
	n.Status.Images = images
	return n
}

// TestBootImage: the loader starts from the smallest image the node has
// by digest; a node of another architecture, or listing no image by
// digest, is refused saying what to do.
func TestBootImage(t *testing.T) {
	n := nodeWith("amd64",
		corev1.ContainerImage{Names: []string{"r/kube-apiserver@sha256:aa", "r/kube-apiserver:v1"}, SizeBytes: 35 << 20},
		corev1.ContainerImage{Names: []string{"r/pause:3.10"}, SizeBytes: 300 << 10},
		corev1.ContainerImage{Names: []string{"r/etcd@sha256:bb"}, SizeBytes: 11 << 20},
	)
	if got, err := bootImage(n); err != nil || got != "r/etcd@sha256:bb" {
		t.Fatalf("bootImage = %q, %v; want the smallest by digest, r/etcd@sha256:bb", got, err)
	}
	for _, bad := range []*corev1.Node{nodeWith("arm64", n.Status.Images...), nodeWith("amd64", corev1.ContainerImage{Names: []string{"r/pause:3.10"}})} {
		if _, err := bootImage(bad); err == nil || !strings.Contains(err.Error(), "--registry") {
			t.Errorf("bootImage of %s %v: %v, want a refusal naming --registry", bad.Status.NodeInfo.Architecture, bad.Status.Images, err)
		}
	}
}

// TestLoadPod: a load agent's pod reads its stdin, has its own work
// directory, runs in the node's network namespace (its registry serves
// the node's runtime there) with the runtime's socket read-only, and is
// bounded by LoadDeadline; bootstrapped, it starts the loader from the
// ConfigMap, executable, in an image the node has, never pulled.
func TestLoadPod(t *testing.T) {
	s, err := NewSession(fake.NewClientset(), progress.Discard())
	if err != nil {
		t.Fatal(err)
	}
	s.image = LoadedRef(agent.Repo, "sha256:cc")
	pod, err := s.PodFor("cp1", agent.Task{Kind: agent.KindLoad, Load: &agent.LoadTask{CRISocket: "/run/containerd/containerd.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if !c.Stdin || !c.StdinOnce || !pod.Spec.HostNetwork || *pod.Spec.ActiveDeadlineSeconds != int64(LoadDeadline/time.Second) {
		t.Errorf("load pod: stdin %v/%v, hostNetwork %v, deadline %d", c.Stdin, c.StdinOnce, pod.Spec.HostNetwork, *pod.Spec.ActiveDeadlineSeconds)
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.ReadOnly
	}
	if ro, ok := mounts["/run/containerd"]; !ok || !ro || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == agent.WorkDir }) {
		t.Errorf("load pod mounts %v: want the socket's dir read-only and %s", c.VolumeMounts, agent.WorkDir)
	}
	bootstrap(pod, "r/etcd@sha256:bb", s.loaderName())
	c = pod.Spec.Containers[0]
	if c.Image != "r/etcd@sha256:bb" || c.ImagePullPolicy != corev1.PullNever || !slices.Equal(c.Command, []string{"/devk-loader/load", "agent"}) {
		t.Errorf("bootstrapped: image %s (%s), command %v", c.Image, c.ImagePullPolicy, c.Command)
	}
	v := pod.Spec.Volumes[len(pod.Spec.Volumes)-1]
	if v.ConfigMap == nil || v.ConfigMap.Name != "devk-loader-"+s.run || *v.ConfigMap.DefaultMode != 0o555 {
		t.Errorf("the loader's volume: %+v", v)
	}
}

// TestLoader: the run's loader ConfigMap is made once, labelled as the
// run's, and deleted by Close; an earlier run's is deleted by a later
// --load once older than a load's deadline, a recent one left.
func TestLoader(t *testing.T) {
	ctx := context.Background()
	old := metav1.NewTime(time.Now().Add(-LoadDeadline - 2*time.Minute))
	cs := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "devk-loader-old", Namespace: Namespace, CreationTimestamp: old, Labels: map[string]string{LabelManagedBy: ManagedBy, LabelRun: "old"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "devk-loader-new", Namespace: Namespace, CreationTimestamp: metav1.Now(), Labels: map[string]string{LabelManagedBy: ManagedBy, LabelRun: "new"}}},
	)
	s, err := NewSession(cs, progress.Discard())
	if err != nil {
		t.Fatal(err)
	}
	s.loading = &loadState{has: map[string]bool{}}
	for range 2 {
		if err := s.ensureLoader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cm, err := cs.CoreV1().ConfigMaps(Namespace).Get(ctx, s.loaderName(), metav1.GetOptions{})
	if err != nil || len(cm.BinaryData[loaderKey]) == 0 || cm.Labels[LabelRun] != s.run {
		t.Fatalf("the loader's ConfigMap: %v, %+v", err, cm)
	}
	if n, err := s.deleteLostLoaders(ctx); err != nil || n != 1 {
		t.Fatalf("deleteLostLoaders = %d, %v; want the old one", n, err)
	}
	s.Close()
	left, _ := cs.CoreV1().ConfigMaps(Namespace).List(ctx, metav1.ListOptions{})
	if len(left.Items) != 1 || left.Items[0].Name != "devk-loader-new" {
		t.Errorf("left %v, want only the recent run's", left.Items)
	}
}

// TestConnectAgent: --registry and --load together, or neither, are
// refused before the cluster is asked anything.
func TestConnectAgent(t *testing.T) {
	t.Setenv("DEVK_HOME", t.TempDir())
	for a, want := range map[Agent]string{{Registry: "r", Load: true}: "give one", {}: "pass --registry, a registry they pull from, or --load"} {
		if _, err := Connect(context.Background(), Decision{}, a, "v", image.RemoteOptions{}, progress.Discard(), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Connect(%+v) = %v, want %q", a, err, want)
		}
	}
}
