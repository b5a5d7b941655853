// Package addons renders and applies what kubeadm's addon phase installs
// (app/phases/addons): kube-proxy (a DaemonSet, its ConfigMap with
// config.conf and kubeconfig.conf, its RBAC) and CoreDNS (a Deployment
// behind the kube-dns Service, its Corefile, its RBAC), as typed apply
// configurations applied server-side (kube.Apply). It takes a clientset
// and explicit inputs; cluster's addon/… phases call it, and wait for the
// workloads with internal/addon's rollout model.
package addons

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	"github.com/devk/devk/internal/layout"
)

// The addons by component name (a Config.Images key, an addon phase's
// name, internal/addon's Workload.Component).
const (
	KubeProxy = "kube-proxy"
	CoreDNS   = "coredns"
)

const (
	kubeDNSName = "kube-dns"

	// labelApp is the label kubeadm's addons select their pods by.
	labelApp = "k8s-app"

	// The ServiceAccount token and CA every pod gets mounted.
	serviceAccountDir    = "/var/run/secrets/kubernetes.io/serviceaccount"
	serviceAccountToken  = serviceAccountDir + "/token"
	serviceAccountCACert = serviceAccountDir + "/ca.crt"
)

// Count counts the objects an addon's apply applied and how many of
// them changed.
type Count struct{ Applied, Changed int }

// Add counts one object's apply: changed and err are kube.Apply's
// results, err passed on.
func (n *Count) Add(changed bool, err error) error {
	if err != nil {
		return err
	}
	n.Applied++
	if changed {
		n.Changed++
	}
	return nil
}

// Applies says whether devk applies addon name's objects on the cluster
// cfg describes, and why not: not where kubeadm bootstraps it (kubeadm's
// addon phase does), nor where the config file leaves it out, nor
// kube-proxy where it may not run (KubeProxyRuns).
func Applies(cfg layout.Config, name string) (bool, string) {
	if cfg.Spec.Kubeadm() {
		return false, "kubeadm's addon phase made it (bootstrapper: kubeadm)"
	}
	if on, key := On(cfg.Spec.Addons, name); !on {
		return false, key + " is false in the cluster's config (devk up --config)"
	}
	if name == KubeProxy {
		return KubeProxyRuns(cfg)
	}
	return true, ""
}

// KubeProxyRuns says whether up may run kube-proxy on the cluster cfg
// describes, and why not. kube-proxy runs privileged on the host network
// of its node and rewrites that network namespace's iptables: it may run
// only where the node's host-network pods are in the node's own network
// namespace (devk's containerd there), never where they share the
// machine's.
func KubeProxyRuns(cfg layout.Config) (bool, string) {
	if !cfg.OwnRuntime {
		return false, "the runtime is not devk's containerd in the node's network namespace: host-network pods may share the machine's, whose iptables kube-proxy would rewrite"
	}
	return true, ""
}

// On says whether the cluster's spec lets up apply the addon called
// name, and the config file's key that says so; a name that is no addon
// is on.
func On(a layout.Addons, name string) (bool, string) {
	switch name {
	case KubeProxy:
		return layout.On(a.KubeProxy), "addons.kubeProxy"
	case CoreDNS:
		return layout.On(a.CoreDNS), "addons.coreDNS"
	}
	return true, ""
}

func serviceAccount(name string) *rbacv1ac.SubjectApplyConfiguration {
	return rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(name).WithNamespace(metav1.NamespaceSystem)
}
