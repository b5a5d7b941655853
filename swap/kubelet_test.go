package swap

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The API server here is client-go's fake clientset: what is checked is
// which Node and Lease states WaitNodeReady takes for the restarted
// kubelet's word.
func TestWaitNodeReady(t *testing.T) {
	restarted := time.Now()
	before, after := restarted.Add(-30*time.Second), restarted.Add(2*time.Second)
	node := func(status corev1.ConditionStatus, heartbeat time.Time) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(heartbeat), Message: "m"},
		}}}
	}
	lease := func(renew time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renew}}}
	}
	for _, tc := range []struct {
		name  string
		node  *corev1.Node
		lease *coordinationv1.Lease
		want  string // "" for Ready
	}{
		{"the new kubelet said Ready", node(corev1.ConditionTrue, after), lease(after), ""},
		{"the old kubelet's Ready, the new one's lease", node(corev1.ConditionTrue, before), lease(after), "old kubelet last said"},
		{"the new kubelet before its runtime check", node(corev1.ConditionFalse, after), lease(after), "Ready=False"},
		{"a fresh heartbeat, the lease not renewed", node(corev1.ConditionTrue, after), lease(before), "renew its lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.node, tc.lease)
			err := WaitNodeReady(context.Background(), cs, "w", restarted, 1200*time.Millisecond)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("WaitNodeReady: %v, want Ready", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("WaitNodeReady: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
