package addons

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	componentbaseconfig "k8s.io/component-base/config/v1alpha1"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/cluster/internal/kwok"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
)

const (
	// kubeProxyBinary is kube-proxy's binary in its image.
	kubeProxyBinary = "/usr/local/bin/kube-proxy"

	// nodeProxierBinding binds kube-proxy's ServiceAccount to the
	// built-in node-proxier role, as kubeadm names it.
	nodeProxierBinding = "kubeadm:node-proxier"
	nodeProxierRole    = "system:node-proxier"

	// kubeProxyConfigDir is where kube-proxy's ConfigMap is mounted; its
	// keys are the two files kube-proxy reads.
	kubeProxyConfigDir  = "/var/lib/kube-proxy"
	kubeProxyConfigKey  = "config.conf"
	kubeProxyKubeconfig = "kubeconfig.conf"
	// xtablesLock is the lock iptables takes; kube-proxy shares the
	// node's.
	xtablesLock = "/run/xtables.lock"
)

// KubeProxyWrites names the objects ApplyKubeProxy applies, for
// --dry-run.
func KubeProxyWrites() []string {
	return []string{"serviceaccount kube-system/kube-proxy", "clusterrolebinding " + nodeProxierBinding,
		"configmap kube-system/kube-proxy", "role,rolebinding kube-system/kube-proxy", "daemonset kube-system/kube-proxy"}
}

// ApplyKubeProxy applies kube-proxy's objects as kubeadm's proxy phase
// makes them, the DaemonSet (running image) last, counting each into n.
func ApplyKubeProxy(ctx context.Context, cs kubernetes.Interface, cfg layout.Config, image string, n *Count) error {
	ns := metav1.NamespaceSystem
	if err := n.Add(kube.Apply(ctx, cs.CoreV1().ServiceAccounts(ns), KubeProxy, corev1ac.ServiceAccount(KubeProxy, ns))); err != nil {
		return err
	}
	if err := n.Add(kube.ApplyClusterRoleBinding(ctx, cs, nodeProxierBinding, nodeProxierRole, serviceAccount(KubeProxy))); err != nil {
		return err
	}
	cm, err := kubeProxyConfigMap(cfg)
	if err != nil {
		return err
	}
	if err := n.Add(kube.Apply(ctx, cs.CoreV1().ConfigMaps(ns), KubeProxy, cm)); err != nil {
		return err
	}
	// Joining nodes read the ConfigMap with the bootstrap token, as in
	// kubeadm.
	role := rbacv1ac.Role(KubeProxy, ns).WithRules(rbacv1ac.PolicyRule().
		WithAPIGroups("").WithResources("configmaps").WithResourceNames(KubeProxy).WithVerbs("get"))
	if err := n.Add(kube.Apply(ctx, cs.RbacV1().Roles(ns), KubeProxy, role)); err != nil {
		return err
	}
	binding := rbacv1ac.RoleBinding(KubeProxy, ns).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(KubeProxy)).
		WithSubjects(kube.Group(bootstrap.NodeBootstrappersGroup))
	if err := n.Add(kube.Apply(ctx, cs.RbacV1().RoleBindings(ns), KubeProxy, binding)); err != nil {
		return err
	}
	own := cfg.OwnKubeProxies()
	main := kubeProxyDaemonSet(KubeProxy, map[string]string{labelApp: KubeProxy}, image, cfg.Spec.KubeProxy.ExtraArgs, notOn(own))
	if err := n.Add(kube.Apply(ctx, cs.AppsV1().DaemonSets(ns), KubeProxy, main)); err != nil {
		return err
	}
	return applyNodeKubeProxies(ctx, cs, own, cfg.Spec.KubeProxy.ExtraArgs, n)
}

// nodeKubeProxyApp is the k8s-app label of a node's own kube-proxy
// DaemonSet and pods (NodeKubeProxy), NodeKubeProxySelector selects them,
// and LabelKubeProxyNode names the node.
const (
	nodeKubeProxyApp      = "kube-proxy-node"
	NodeKubeProxySelector = labelApp + "=" + nodeKubeProxyApp
	LabelKubeProxyNode    = "devk.dev/kube-proxy-node"
)

// NodeKubeProxy is the DaemonSet kube-system/kube-proxy-<node> that runs,
// on that node alone, the kube-proxy of the node's own tree (a worker
// with nodes[].tree); the cluster's kube-proxy keeps off the node.
func NodeKubeProxy(node string) addon.Workload {
	w, _ := addon.Lookup(KubeProxy)
	w.Name = KubeProxy + "-" + node
	return w
}

// applyNodeKubeProxies applies the DaemonSet of each node of own
// (NodeKubeProxy) and deletes those of nodes no longer in it, counting
// each into n.
func applyNodeKubeProxies(ctx context.Context, cs kubernetes.Interface, own []layout.NodeNet, extraArgs map[string]string, n *Count) error {
	ns, keep := metav1.NamespaceSystem, map[string]bool{}
	for _, node := range own {
		w := NodeKubeProxy(node.Name)
		keep[w.Name] = true
		labels := map[string]string{labelApp: nodeKubeProxyApp, LabelKubeProxyNode: node.Name}
		ds := kubeProxyDaemonSet(w.Name, labels, node.KubeProxyImage, extraArgs, onNode(node.Name))
		if err := n.Add(kube.Apply(ctx, cs.AppsV1().DaemonSets(ns), w.Name, ds)); err != nil {
			return err
		}
	}
	list, err := cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{LabelSelector: NodeKubeProxySelector})
	if err != nil {
		return fmt.Errorf("list the nodes' own kube-proxy DaemonSets: %w", err)
	}
	for _, ds := range list.Items {
		if keep[ds.Name] {
			continue
		}
		if err := cs.AppsV1().DaemonSets(ns).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete DaemonSet %s/%s of a node that has no kube-proxy of its own: %w", ns, ds.Name, err)
		}
		n.Changed++
	}
	return nil
}

// notOn is the cluster's kube-proxy's affinity: off kwok's fake nodes,
// and off the nodes of own, which run their own.
func notOn(own []layout.NodeNet) *corev1ac.AffinityApplyConfiguration {
	a := kwok.NotOnFakeNodes()
	if len(own) == 0 {
		return a
	}
	var names []string
	for _, n := range own {
		names = append(names, n.Name)
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	terms[0].WithMatchExpressions(corev1ac.NodeSelectorRequirement().WithKey(corev1.LabelHostname).WithOperator(corev1.NodeSelectorOpNotIn).WithValues(names...))
	return a
}

// onNode is the affinity of a node's own kube-proxy: that node only.
func onNode(name string) *corev1ac.AffinityApplyConfiguration {
	return corev1ac.Affinity().WithNodeAffinity(corev1ac.NodeAffinity().WithRequiredDuringSchedulingIgnoredDuringExecution(
		corev1ac.NodeSelector().WithNodeSelectorTerms(corev1ac.NodeSelectorTerm().WithMatchExpressions(
			corev1ac.NodeSelectorRequirement().WithKey(corev1.LabelHostname).WithOperator(corev1.NodeSelectorOpIn).WithValues(name)))))
}

// kubeProxyConfigMap holds kube-proxy's config.conf and kubeconfig.conf.
func kubeProxyConfigMap(cfg layout.Config) (*corev1ac.ConfigMapApplyConfiguration, error) {
	conf, err := KubeProxyConfigYAML(cfg)
	if err != nil {
		return nil, err
	}
	kc, err := kubeProxyKubeconfigYAML(cfg)
	if err != nil {
		return nil, err
	}
	return corev1ac.ConfigMap(KubeProxy, metav1.NamespaceSystem).
		WithLabels(map[string]string{"app": KubeProxy}).
		WithData(map[string]string{kubeProxyConfigKey: string(conf), kubeProxyKubeconfig: string(kc)}), nil
}

// KubeProxyConfigYAML is devk's kube-proxy's KubeProxyConfiguration:
// NodeKubeProxyConfiguration's, with the kubeconfig its ConfigMap
// holds, serving on every address of the node.
func KubeProxyConfigYAML(cfg layout.Config) ([]byte, error) {
	kp := NodeKubeProxyConfiguration(cfg.PodCIDR, cfg.Spec)
	kp.ClientConnection = componentbaseconfig.ClientConnectionConfiguration{Kubeconfig: kubeProxyConfigDir + "/" + kubeProxyKubeconfig}
	kp.BindAddress = "0.0.0.0"
	return yaml.Marshal(kp)
}

// NodeKubeProxyConfiguration is what every kube-proxy on devk's nodes
// is configured with, whoever deploys it (devk's addon, kubeadm's from
// cluster/internal/kubeadmconfig's config): iptables mode, the pod
// range podCIDR as the cluster CIDR, spec's kube-proxy feature gates.
// Every conntrack setting is zero, which tells kube-proxy to write no
// conntrack sysctl: nf_conntrack_max is global and read-only outside
// the machine's initial network namespace (kube-proxy would fail on
// it), and the timeouts need no tuning on a throwaway cluster.
func NodeKubeProxyConfiguration(podCIDR string, spec layout.Spec) kubeproxyconfig.KubeProxyConfiguration {
	return kubeproxyconfig.KubeProxyConfiguration{
		TypeMeta:    metav1.TypeMeta{APIVersion: kubeproxyconfig.SchemeGroupVersion.String(), Kind: "KubeProxyConfiguration"},
		Mode:        kubeproxyconfig.ProxyMode("iptables"),
		ClusterCIDR: podCIDR,
		// A change reaches the running kube-proxy through its ConfigMap:
		// kube-proxy exits when its config file changes, and restarts.
		FeatureGates: spec.Gates(spec.KubeProxy),
		Conntrack: kubeproxyconfig.KubeProxyConntrackConfiguration{
			MaxPerCore:            ptr.To[int32](0),
			Min:                   ptr.To[int32](0),
			TCPEstablishedTimeout: &metav1.Duration{},
			TCPCloseWaitTimeout:   &metav1.Duration{},
		},
	}
}

// kubeProxyKubeconfigYAML is kube-proxy's kubeconfig, as kubeadm writes
// it: the API server's own URL (kube-proxy is what makes the kubernetes
// Service reachable, so it cannot use it) and the pod's ServiceAccount
// token and CA.
func kubeProxyKubeconfigYAML(cfg layout.Config) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["default"] = &clientcmdapi.Cluster{Server: cfg.APIServerURL(), CertificateAuthority: serviceAccountCACert}
	kc.AuthInfos["default"] = &clientcmdapi.AuthInfo{TokenFile: serviceAccountToken}
	kc.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", Namespace: metav1.NamespaceDefault, AuthInfo: "default"}
	kc.CurrentContext = "default"
	return clientcmd.Write(*kc)
}

// KubeProxyFlags are kube-proxy's own flags, which a config file's
// kubeProxy.extraArgs may not change (its feature gates are in its
// config file).
func KubeProxyFlags() map[string]string {
	return map[string]string{"config": kubeProxyConfigDir + "/" + kubeProxyConfigKey, "hostname-override": "$(NODE_NAME)"}
}

// KubeProxyCommand is kube-proxy's command line: its binary, its own
// flags (KubeProxyFlags), then extraArgs less the flags devk owns
// (sorted, after devk's). kube-proxy reads its settings from its config
// file; given one, it takes only logging flags (--v, --vmodule) from its
// command line.
func KubeProxyCommand(extraArgs map[string]string) []string {
	command := append([]string{kubeProxyBinary}, staticpod.FlagList(KubeProxyFlags())...)
	return append(command, staticpod.FlagList(config.WithoutOwned(config.KubeProxy, extraArgs))...)
}

// kubeProxyDaemonSet is kubeadm's kube-proxy DaemonSet, named name, its
// pods labelled labels, with image, extraArgs on kube-proxy's command
// line (KubeProxyCommand) and affinity.
func kubeProxyDaemonSet(name string, labels map[string]string, image string, extraArgs map[string]string, affinity *corev1ac.AffinityApplyConfiguration) *appsv1ac.DaemonSetApplyConfiguration {
	return appsv1ac.DaemonSet(name, metav1.NamespaceSystem).
		WithLabels(labels).
		WithSpec(appsv1ac.DaemonSetSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithUpdateStrategy(appsv1ac.DaemonSetUpdateStrategy().WithType(appsv1.RollingUpdateDaemonSetStrategyType)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
				WithContainers(corev1ac.Container().
					WithName(KubeProxy).
					WithImage(image).
					WithImagePullPolicy(corev1.PullIfNotPresent).
					WithCommand(KubeProxyCommand(extraArgs)...).
					WithEnv(corev1ac.EnvVar().WithName("NODE_NAME").
						WithValueFrom(corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("spec.nodeName")))).
					WithSecurityContext(corev1ac.SecurityContext().WithPrivileged(true)).
					WithVolumeMounts(
						corev1ac.VolumeMount().WithName(KubeProxy).WithMountPath(kubeProxyConfigDir),
						corev1ac.VolumeMount().WithName("xtables-lock").WithMountPath(xtablesLock),
						corev1ac.VolumeMount().WithName("lib-modules").WithMountPath("/lib/modules").WithReadOnly(true))).
				WithHostNetwork(true).
				WithServiceAccountName(KubeProxy).
				WithPriorityClassName("system-node-critical").
				WithNodeSelector(map[string]string{corev1.LabelOSStable: "linux"}).
				// It tolerates every taint: kwok's fake nodes are kept
				// off by affinity.
				WithAffinity(affinity).
				WithTolerations(corev1ac.Toleration().WithOperator(corev1.TolerationOpExists)).
				WithVolumes(
					corev1ac.Volume().WithName(KubeProxy).WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(KubeProxy)),
					corev1ac.Volume().WithName("xtables-lock").WithHostPath(corev1ac.HostPathVolumeSource().WithPath(xtablesLock).WithType(corev1.HostPathFileOrCreate)),
					corev1ac.Volume().WithName("lib-modules").WithHostPath(corev1ac.HostPathVolumeSource().WithPath("/lib/modules"))))))
}
