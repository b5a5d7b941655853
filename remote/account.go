package remote

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devk/devk/internal/kube"
)

// AccountNeeds are what giving an agent a token takes: its run's
// ServiceAccount in devk's namespace and a ClusterRole bound to it, made,
// stamped, listed and deleted.
var AccountNeeds = []Need{
	{Verb: "create", Resource: "serviceaccounts", Namespace: Namespace},
	{Verb: "patch", Resource: "serviceaccounts", Namespace: Namespace},
	{Verb: "list", Resource: "serviceaccounts", Namespace: Namespace},
	{Verb: "delete", Resource: "serviceaccounts", Namespace: Namespace},
	{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
	{Verb: "list", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
	{Verb: "delete", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
	{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
	{Verb: "list", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
	{Verb: "delete", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
}

// agentRules are what an agent's token may do: read pods (a swap waits for
// its static pod's mirror pod) and the server's /version. Nothing else:
// what it changes, it changes in the node's files and runtime.
var agentRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
	{NonResourceURLs: []string{"/version"}, Verbs: []string{"get"}},
}

// account is the name of the run's ServiceAccount, ClusterRole and
// ClusterRoleBinding.
func (s *Session) account() string { return "devk-agent-" + s.run }

// runMeta is the metadata of an object of the session's run.
func (s *Session) runMeta(namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: s.account(), Namespace: namespace, Labels: map[string]string{LabelManagedBy: ManagedBy, LabelRun: s.run}}
}

// ensureAccount makes the run's ServiceAccount, stamped with the client's
// heartbeat (until ctx ends or Close), and its read-only ClusterRole and
// binding, once. Close deletes them; a later run deletes those of a run
// whose client was killed (Prepare), once no pod of it runs.
func (s *Session) ensureAccount(ctx context.Context) error {
	if s.accountMade {
		return nil
	}
	sa := &corev1.ServiceAccount{ObjectMeta: s.runMeta(Namespace)}
	sa.Annotations = clientStamp()
	if _, err := s.cs.CoreV1().ServiceAccounts(Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("make the agent's ServiceAccount %s/%s: %w", Namespace, sa.Name, err)
	}
	s.accountMade = true
	rbac := s.cs.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: s.runMeta(""), Rules: agentRules}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("make the agent's ClusterRole %s: %w", s.account(), err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: s.runMeta(""),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: s.account()},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: s.account(), Namespace: Namespace}},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("make the agent's ClusterRoleBinding %s: %w", s.account(), err)
	}
	hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopAccount = stop
	go s.heartbeat(hctx, func(ctx context.Context, patch []byte) error {
		_, err := s.cs.CoreV1().ServiceAccounts(Namespace).Patch(ctx, s.account(), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	return nil
}

// Close waits until the agent pods the run deleted are gone, then
// deletes the run's ServiceAccount and RBAC, if it made them (the
// binding first, so that no token keeps a right its account lost), and
// its loader ConfigMap.
func (s *Session) Close() {
	s.awaitDeleted()
	ctx, cancel := context.WithTimeout(context.Background(), 3*kube.RequestTimeout)
	defer cancel()
	if err := s.closeLoad(ctx); err != nil {
		s.rep.Infof("could not delete the loader's ConfigMap (the next devk --load deletes it): %v", err)
	}
	if !s.accountMade {
		return
	}
	s.stopAccount()
	if err := s.deleteRun(ctx, s.run); err != nil {
		s.rep.Infof("could not delete the agent's ServiceAccount and RBAC (the next devk deletes them): %v", err)
	}
	s.accountMade = false
}

// deleteRun deletes run's ClusterRoleBinding, ClusterRole and
// ServiceAccount.
func (s *Session) deleteRun(ctx context.Context, run string) error {
	name := "devk-agent-" + run
	rbac := s.cs.RbacV1()
	return errors.Join(
		ignoreNotFound(rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})),
		ignoreNotFound(rbac.ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})),
		ignoreNotFound(s.cs.CoreV1().ServiceAccounts(Namespace).Delete(ctx, name, metav1.DeleteOptions{})),
	)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// deleteLostAccounts deletes the ServiceAccount and RBAC of each earlier
// run whose client stopped stamping its ServiceAccount (killed) and of
// which no pod is left in pods (those Prepare kept): a killed client's
// swap pod keeps its token until it ends. It returns how many runs.
func (s *Session) deleteLostAccounts(ctx context.Context, pods []corev1.Pod) (int, error) {
	sel := labels.Set{LabelManagedBy: ManagedBy}.String()
	sas, err := s.cs.CoreV1().ServiceAccounts(Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, err
	}
	runs := map[string]bool{}
	for _, sa := range sas.Items {
		if run := sa.Labels[LabelRun]; run != "" && lostClient(sa.Annotations) {
			runs[run] = true
		}
	}
	// RBAC whose ServiceAccount is gone (a run killed between them).
	crbs, err := s.cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, err
	}
	crs, err := s.cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, err
	}
	hasSA := map[string]bool{}
	for _, sa := range sas.Items {
		hasSA[sa.Labels[LabelRun]] = true
	}
	var metas []metav1.ObjectMeta
	for _, o := range crbs.Items {
		metas = append(metas, o.ObjectMeta)
	}
	for _, o := range crs.Items {
		metas = append(metas, o.ObjectMeta)
	}
	for _, m := range metas {
		if run := m.Labels[LabelRun]; run != "" && !hasSA[run] && run != s.run && time.Since(m.CreationTimestamp.Time) > heartbeatStale {
			runs[run] = true
		}
	}
	for _, p := range pods {
		delete(runs, p.Labels[LabelRun])
	}
	delete(runs, s.run)
	for run := range runs {
		if err := s.deleteRun(ctx, run); err != nil {
			return 0, fmt.Errorf("delete the ServiceAccount and RBAC an earlier devk left (run %s): %w", run, err)
		}
	}
	return len(runs), nil
}
