package bootstrap

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/devk/devk/internal/layout"
)

// TestEnsureToken: the first run makes a token Secret, a later one
// applies the same token while it has time left.
func TestEnsureToken(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	now := time.Now()
	tok, _, err := EnsureToken(ctx, cs, now)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, bootstraputil.BootstrapTokenSecretName(tok.ID), metav1.GetOptions{})
	if err != nil || string(s.Data[bootstrapapi.BootstrapTokenSecretKey]) != tok.Secret {
		t.Fatalf("the token's Secret: %v, %v", s, err)
	}
	again, _, err := EnsureToken(ctx, cs, now.Add(time.Hour))
	if err != nil || again.ID != tok.ID || again.Secret != tok.Secret {
		t.Errorf("second run: %+v, %v; want %s reused", again, err, tok.ID)
	}
}

func TestUploadConfig(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	cfg := layout.Config{Name: "devk", Network: layout.Network{Subnet: "10.250.0.0/24"}, LastRun: []layout.PhaseTiming{{}}}
	if _, err := UploadConfig(ctx, cs, cfg); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got layout.Config
	if err := json.Unmarshal([]byte(cm.Data["cluster.json"]), &got); err != nil || got.Name != "devk" || got.Network.Subnet != "10.250.0.0/24" {
		t.Errorf("cluster.json in %s: %+v, %v", ConfigMapName, got, err)
	}
	if strings.Contains(cm.Data["cluster.json"], "lastRun") {
		t.Errorf("the last run's timings were stored: %s", cm.Data["cluster.json"])
	}
	b, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, adminsGroup, metav1.GetOptions{})
	if err != nil || b.RoleRef.Name != "cluster-admin" || len(b.Subjects) != 1 || b.Subjects[0].Name != adminsGroup {
		t.Errorf("the admins' binding: %+v, %v", b, err)
	}
}

func TestApplyClusterInfo(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	const server = "https://10.250.0.2:6443"
	caPEM := []byte("-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n")
	if _, err := ApplyClusterInfo(ctx, cs, server, caPEM); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
	if err != nil || len(info.Clusters) != 1 || len(info.AuthInfos) != 0 {
		t.Fatalf("cluster-info's kubeconfig: %+v, %v", info, err)
	}
	for _, cl := range info.Clusters {
		if cl.Server != server || string(cl.CertificateAuthorityData) != string(caPEM) {
			t.Errorf("cluster-info names %s and CA %q", cl.Server, cl.CertificateAuthorityData)
		}
	}
	rb, err := cs.RbacV1().RoleBindings(metav1.NamespacePublic).Get(ctx, clusterInfoRole, metav1.GetOptions{})
	if err != nil || len(rb.Subjects) != 1 || rb.Subjects[0].Name != "system:anonymous" {
		t.Errorf("cluster-info's RoleBinding: %+v, %v", rb, err)
	}
}

func TestMarkControlPlane(t *testing.T) {
	ctx := context.Background()
	notReady := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{notReady}}})
	if patched, err := MarkControlPlane(ctx, cs, "n", true, "kubelet.log"); err != nil || !patched {
		t.Fatalf("first mark: %v, %v; want a patch", patched, err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Labels[LabelControlPlane]; !ok || !slices.Contains(n.Spec.Taints, notReady) ||
		!slices.Contains(n.Spec.Taints, corev1.Taint{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("marked node: labels %v, taints %v", n.Labels, n.Spec.Taints)
	}
	if patched, err := MarkControlPlane(ctx, cs, "n", true, "kubelet.log"); err != nil || patched {
		t.Errorf("second mark: %v, %v; want nothing to do", patched, err)
	}
	if _, err := MarkControlPlane(ctx, cs, "other", true, "kubelet.log"); err == nil || !strings.Contains(err.Error(), "kubelet.log") {
		t.Errorf("a missing node: %v; want the kubelet's log named", err)
	}
}
