//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/internal/layout"
)

// checkWorkloads checks, on a cluster `devk up` made in dir, what the
// addon and mark-control-plane phases promise: no NoSchedule taint on
// the node, CoreDNS available behind kube-dns at the kubelet's
// clusterDNS, kube-proxy ready where it may run, and a pod on the pod
// network, tolerating nothing, scheduled and running.
func checkWorkloads(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, dir, nodeName, pauseImage string) {
	t.Helper()
	node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("node lacks the control-plane label: %v", node.Labels)
	}
	eventually(t, ctx, "no NoSchedule taint on the node", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoSchedule }); i >= 0 {
			return fmt.Errorf("node %s has taint %v", nodeName, n.Spec.Taints[i])
		}
		return nil
	})

	// up returns once addon/wait saw CoreDNS available: no waiting here.
	d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	available := slices.ContainsFunc(d.Status.Conditions, func(c appsv1.DeploymentCondition) bool {
		return c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue
	})
	if !available || d.Status.AvailableReplicas != 2 {
		t.Errorf("CoreDNS after devk up: Available %v, %d of 2 replicas available: %+v", available, d.Status.AvailableReplicas, d.Status.Conditions)
	}
	data, err := os.ReadFile(filepath.Join(dir, "kubelet-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kc struct{ ClusterDNS []string }
	if err := yaml.Unmarshal(data, &kc); err != nil || len(kc.ClusterDNS) != 1 {
		t.Fatalf("kubelet clusterDNS %v: %v", kc.ClusterDNS, err)
	}
	svc, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != kc.ClusterDNS[0] {
		t.Errorf("kube-dns is at %s, the kubelet sends pods' DNS to %s", svc.Spec.ClusterIP, kc.ClusterDNS[0])
	}
	eps, err := cs.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kube-dns"})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready++
			}
		}
	}
	if ready != 2 {
		t.Errorf("kube-dns has %d ready endpoints, want CoreDNS's 2", ready)
	}

	t.Run("kube-proxy", func(t *testing.T) {
		cfg, err := layout.ReadConfig(filepath.Join(dir, "cluster.json"))
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := cluster.KubeProxyRuns(cfg); !ok {
			t.Skipf("devk up does not run kube-proxy on this cluster: %s", why)
		}
		ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := ds.Status; s.DesiredNumberScheduled != 1 || s.NumberReady != 1 {
			t.Errorf("kube-proxy after devk up: %d of %d pods ready", s.NumberReady, s.DesiredNumberScheduled)
		}
	})

	// A pod on the pod network that tolerates nothing: the scheduler puts
	// it on the untainted node and the CNI bridge gives it an address.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-podnet", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: pauseImage}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "a pod tolerating nothing to run", func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != nodeName || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("pod on %q is %s, IP %q", p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
		}
		return nil
	})
}
