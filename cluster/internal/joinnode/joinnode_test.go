package joinnode

import (
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/internal/layout"
)

// TestNotReady: a Node is ready once its Ready condition is true, and,
// for a kubelet started at a given time, once it has said so since.
func TestNotReady(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	node := func(status corev1.ConditionStatus, heartbeat time.Time) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: status, Message: "kubelet says so", LastHeartbeatTime: metav1.NewTime(heartbeat)},
		}}}
	}
	for _, tc := range []struct {
		name    string
		n       *corev1.Node
		started time.Time
		want    string
	}{
		{"no conditions", &corev1.Node{}, time.Time{}, "no Ready condition yet"},
		{"not ready", node(corev1.ConditionFalse, started), time.Time{}, "not Ready: kubelet says so"},
		{"ready", node(corev1.ConditionTrue, started.Add(-time.Hour)), time.Time{}, ""},
		{"ready before the kubelet started", node(corev1.ConditionTrue, started.Add(-time.Hour)), started, "no heartbeat from the new kubelet yet"},
		{"ready since", node(corev1.ConditionTrue, started), started.Add(500 * time.Millisecond), ""},
	} {
		if got := NotReady(tc.n, tc.started); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestTLSBootstrapped: a node has its client certificate once its
// kubelet wrote kubelet.conf.
func TestTLSBootstrapped(t *testing.T) {
	node := layout.NodeFiles{Supervised: layout.Supervised{Dir: t.TempDir()}}
	if TLSBootstrapped(node) {
		t.Fatal("bootstrapped without kubelet.conf")
	}
	if err := os.WriteFile(node.Kubeconfig("kubelet"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !TLSBootstrapped(node) {
		t.Error("not bootstrapped with kubelet.conf")
	}
}
