package kube

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
)

// ApplyClusterRoleBinding binds the ClusterRole role to subjects, as
// binding name; it reports whether it changed anything. roleRef is
// immutable: a binding of that name to another role is replaced.
func ApplyClusterRoleBinding(ctx context.Context, cs kubernetes.Interface, name, role string, subjects ...*rbacv1ac.SubjectApplyConfiguration) (bool, error) {
	api := cs.RbacV1().ClusterRoleBindings()
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	replaced := false
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && cur.RoleRef != ref:
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		replaced = true
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	changed, err := Apply(ctx, api, name, rbacv1ac.ClusterRoleBinding(name).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(ref.APIGroup).WithKind(ref.Kind).WithName(ref.Name)).
		WithSubjects(subjects...))
	return changed || replaced, err
}

// Group is the RBAC subject for the group name.
func Group(name string) *rbacv1ac.SubjectApplyConfiguration {
	return rbacv1ac.Subject().WithKind(rbacv1.GroupKind).WithAPIGroup(rbacv1.GroupName).WithName(name)
}
