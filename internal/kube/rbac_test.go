package kube

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestClusterRoleBindingRoleRef: roleRef is immutable, so a binding of
// devk's name to another role is replaced, not left.
func TestClusterRoleBindingRoleRef(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	if _, err := ApplyClusterRoleBinding(ctx, cs, "b", "view", Group("g")); err != nil {
		t.Fatal(err)
	}
	changed, err := ApplyClusterRoleBinding(ctx, cs, "b", "cluster-admin", Group("g"))
	if err != nil || !changed {
		t.Fatalf("rebinding to another role: changed %v, %v", changed, err)
	}
	got, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, "b", metav1.GetOptions{})
	if err != nil || got.RoleRef.Name != "cluster-admin" || len(got.Subjects) != 1 || got.Subjects[0].Name != "g" {
		t.Fatalf("binding after the change: %+v, %v", got, err)
	}
}
