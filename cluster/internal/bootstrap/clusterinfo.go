package bootstrap

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/devk/devk/internal/kube"
)

// clusterInfoRole is the Role (and RoleBinding) that lets anyone read
// the cluster-info ConfigMap, as kubeadm names it.
const clusterInfoRole = "kubeadm:bootstrap-signer-clusterinfo"

// clusterInfo is the kubeconfig of cluster-info: the API server's URL and
// the cluster CA, no user.
func clusterInfo(server string, caPEM []byte) ([]byte, error) {
	info := clientcmdapi.NewConfig()
	info.Clusters[""] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	return clientcmd.Write(*info)
}

// ApplyClusterInfo applies the cluster-info ConfigMap in kube-public,
// naming server and the cluster CA caPEM, which joining nodes read
// anonymously (the controller-manager's bootstrapsigner adds its
// signatures), and the Role and RoleBinding that let them; it returns how
// many objects it wrote.
func ApplyClusterInfo(ctx context.Context, cs kubernetes.Interface, server string, caPEM []byte) (int, error) {
	info, err := clusterInfo(server, caPEM)
	if err != nil {
		return 0, err
	}
	n := 0
	count := func(changed bool, err error) error {
		if err != nil {
			return err
		}
		if changed {
			n++
		}
		return nil
	}
	// Only the kubeconfig key is devk's: the jws-kubeconfig-* keys the
	// bootstrapsigner adds stay.
	cm := corev1ac.ConfigMap(bootstrapapi.ConfigMapClusterInfo, metav1.NamespacePublic).WithData(map[string]string{bootstrapapi.KubeConfigKey: string(info)})
	if err := count(kube.Apply(ctx, cs.CoreV1().ConfigMaps(metav1.NamespacePublic), bootstrapapi.ConfigMapClusterInfo, cm)); err != nil {
		return n, fmt.Errorf("cluster-info ConfigMap: %w", err)
	}
	role := rbacv1ac.Role(clusterInfoRole, metav1.NamespacePublic).WithRules(rbacv1ac.PolicyRule().
		WithAPIGroups("").WithResources("configmaps").WithResourceNames(bootstrapapi.ConfigMapClusterInfo).WithVerbs("get"))
	if err := count(kube.Apply(ctx, cs.RbacV1().Roles(metav1.NamespacePublic), clusterInfoRole, role)); err != nil {
		return n, fmt.Errorf("cluster-info Role: %w", err)
	}
	binding := rbacv1ac.RoleBinding(clusterInfoRole, metav1.NamespacePublic).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(clusterInfoRole)).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.UserKind).WithAPIGroup(rbacv1.GroupName).WithName("system:anonymous"))
	if err := count(kube.Apply(ctx, cs.RbacV1().RoleBindings(metav1.NamespacePublic), clusterInfoRole, binding)); err != nil {
		return n, fmt.Errorf("cluster-info RoleBinding: %w", err)
	}
	return n, nil
}
