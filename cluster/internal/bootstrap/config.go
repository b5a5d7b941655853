package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
)

// ConfigMapName is the ConfigMap in kube-system holding cluster.json.
const ConfigMapName = "devk-config"

// adminsGroup is admin.conf's group, which kubeadm binds to cluster-admin.
const adminsGroup = "kubeadm:cluster-admins"

// UploadConfig stores cfg, without its last run's timings, in ConfigMap
// ConfigMapName and binds admin.conf's group to cluster-admin, as
// kubeadm's upload-config; it returns how many objects it wrote.
func UploadConfig(ctx context.Context, cs kubernetes.Interface, cfg layout.Config) (int, error) {
	cfg.LastRun = nil
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return 0, err
	}
	n := 0
	changed, err := kube.Apply(ctx, cs.CoreV1().ConfigMaps(metav1.NamespaceSystem), ConfigMapName,
		corev1ac.ConfigMap(ConfigMapName, metav1.NamespaceSystem).WithData(map[string]string{"cluster.json": string(data)}))
	if err != nil {
		return n, fmt.Errorf("store the cluster config: %w", err)
	}
	if changed {
		n++
	}
	changed, err = kube.ApplyClusterRoleBinding(ctx, cs, adminsGroup, "cluster-admin", kube.Group(adminsGroup))
	if err != nil {
		return n, fmt.Errorf("bind %s to cluster-admin: %w", adminsGroup, err)
	}
	if changed {
		n++
	}
	return n, nil
}
