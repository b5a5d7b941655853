package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
)

// The addons are what kubeadm's addon phase installs: kube-proxy (a
// DaemonSet) and CoreDNS (a Deployment behind the kube-dns Service), as
// typed apply configurations applied server-side (kube.Apply).
//
// The phases are addon/kube-proxy and addon/coredns, which only apply,
// then addon/wait, which waits for both workloads at once: their pods
// pull and start side by side, so up pays for the slower of the two, not
// for both in turn. Skipping an addon's phase leaves it out of the wait;
// skipping addon/wait applies without waiting.
const (
	kubeProxyName = "kube-proxy"
	coreDNSName   = "coredns"
	kubeDNSName   = "kube-dns"

	// labelApp is the label kubeadm's addons select their pods by.
	labelApp = "k8s-app"

	// nodeProxierBinding binds kube-proxy's ServiceAccount to the
	// built-in node-proxier role, as kubeadm names it.
	nodeProxierBinding = "kubeadm:node-proxier"
	nodeProxierRole    = "system:node-proxier"
	// coreDNSRole is CoreDNS's ClusterRole (and ClusterRoleBinding).
	coreDNSRole = "system:coredns"

	// kubeProxyConfigDir is where kube-proxy's ConfigMap is mounted; its
	// keys are the two files kube-proxy reads.
	kubeProxyConfigDir  = "/var/lib/kube-proxy"
	kubeProxyConfigKey  = "config.conf"
	kubeProxyKubeconfig = "kubeconfig.conf"
	kubeProxyBinary     = "/usr/local/bin/kube-proxy"
	// xtablesLock is the lock iptables takes; kube-proxy shares the
	// node's.
	xtablesLock = "/run/xtables.lock"

	// The ServiceAccount token and CA every pod gets mounted.
	serviceAccountDir    = "/var/run/secrets/kubernetes.io/serviceaccount"
	serviceAccountToken  = serviceAccountDir + "/token"
	serviceAccountCACert = serviceAccountDir + "/ca.crt"

	// coreDNSReplicas is kubeadm's and kind's.
	coreDNSReplicas = 2
	// coreDNSConfigDir is where the coredns ConfigMap's Corefile is mounted.
	coreDNSConfigDir = "/etc/coredns"
	// CoreDNS's ports: DNS, metrics (prometheus), health (liveness) and
	// ready (readiness).
	dnsPort          = 53
	coreDNSMetrics   = 9153
	coreDNSHealth    = 8080
	coreDNSReadyPort = 8181
)

// upAddon is one of up's addons: what it applies and the workload
// addon/wait waits for.
type upAddon struct {
	// Name is the phase's and the component's (Config.Images key).
	Name  string
	Short string
	// Writes names the objects, for --dry-run.
	Writes []string
	// objects apply the addon's objects, the workload last.
	objects func(ctx context.Context, c *Cluster, cs kubernetes.Interface, image string, count *applyCount) error
	// workload is the addon's DaemonSet or Deployment.
	workload addon.Workload
}

// applyCount counts the objects an addon phase applied and how many of
// them changed.
type applyCount struct{ applied, changed int }

func (n *applyCount) add(changed bool, err error) error {
	if err != nil {
		return err
	}
	n.applied++
	if changed {
		n.changed++
	}
	return nil
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

func addons() []upAddon {
	return []upAddon{
		{
			Name: kubeProxyName,
			Short: "kube-proxy (iptables mode) as kubeadm's DaemonSet: ServiceAccount, node-proxier binding, ConfigMap (config.conf, " +
				"kubeconfig.conf), its Role and RoleBinding; conntrack limits left alone",
			Writes: []string{"serviceaccount kube-system/kube-proxy", "clusterrolebinding " + nodeProxierBinding,
				"configmap kube-system/kube-proxy", "role,rolebinding kube-system/kube-proxy", "daemonset kube-system/kube-proxy"},
			objects:  applyKubeProxy,
			workload: addonWorkload(kubeProxyName),
		},
		{
			Name: coreDNSName,
			Short: "CoreDNS as kubeadm's Deployment behind Service kube-dns at the kubelet's clusterDNS; it answers for the " +
				"cluster domain only: other names are not forwarded (devk's clusters contact nothing beyond the machine)",
			Writes: []string{"serviceaccount kube-system/coredns", "clusterrole,clusterrolebinding " + coreDNSRole,
				"configmap kube-system/coredns", "service kube-system/kube-dns", "deployment kube-system/coredns"},
			objects:  applyCoreDNS,
			workload: addonWorkload(coreDNSName),
		},
	}
}

// addonWorkload is the workload of the addon component (internal/addon's
// Workloads; TestAddonWorkloads checks that each of up's addons has one).
func addonWorkload(component string) addon.Workload {
	w, _ := addon.Lookup(component)
	return w
}

// addonPhases are up's addon/… phases: one per addon, then the one wait.
func addonPhases() []*phase.Phase[*Cluster] {
	var out []*phase.Phase[*Cluster]
	for _, a := range addons() {
		p := &phase.Phase[*Cluster]{
			Name:  a.Name,
			Short: a.Short,
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.ConfigFile() + " (images." + a.Name + ")"}, a.Writes
			},
			Run: func(ctx context.Context, c *Cluster) (phase.Outcome, error) { return c.applyAddon(ctx, a) },
		}
		p.If = func(c *Cluster) (bool, string) {
			if on, key := addonOn(c.Config.Spec.Addons, a.Name); !on {
				return false, key + " is false in the cluster's config (devk up --config)"
			}
			if a.Name == kubeProxyName {
				return KubeProxyRuns(c.Config)
			}
			return true, ""
		}
		out = append(out, p)
	}
	return append(out, &phase.Phase[*Cluster]{
		Name:  "wait",
		Short: "wait until the addons applied in this run are rolled out (as kubectl rollout status decides: every pod updated and available), both at once",
		IO: func(c *Cluster) ([]string, []string) {
			return []string{"daemonset kube-system/kube-proxy", "deployment kube-system/coredns"}, nil
		},
		Run: phase.Method((*Cluster).runAddonWait),
	})
}

// addonOn says whether the cluster's spec lets up apply the addon
// called name, and the config file's key that says so.
func addonOn(a layout.Addons, name string) (bool, string) {
	switch name {
	case kubeProxyName:
		return layout.On(a.KubeProxy), "addons.kubeProxy"
	case coreDNSName:
		return layout.On(a.CoreDNS), "addons.coreDNS"
	}
	return true, ""
}

// applyAddon applies a's objects. Its work was done already when no
// object changed and the workload is ready; otherwise addon/wait waits
// for the workload.
func (c *Cluster) applyAddon(ctx context.Context, a upAddon) (phase.Outcome, error) {
	image := c.Config.Images[a.Name]
	if image == "" {
		return phase.Done, fmt.Errorf("cluster.json records no %s image (images.%s): the images phase pushes it, so run `devk up` again (or `devk up phase images`), or leave the addon out with --skip-phases addon/%s",
			a.Name, a.Name, a.Name)
	}
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	// An image `devk swap` put there stays, as a swapped static pod's
	// does.
	live, err := addon.Get(ctx, cs, a.workload)
	if err != nil {
		return phase.Done, err
	}
	image, _ = addon.KeptImage(image, live)
	return c.applyAddonWith(ctx, cs, a, image)
}

func (c *Cluster) applyAddonWith(ctx context.Context, cs kubernetes.Interface, a upAddon, image string) (phase.Outcome, error) {
	var n applyCount
	if err := a.objects(ctx, c, cs, image, &n); err != nil {
		return phase.Done, fmt.Errorf("apply %s's objects (%d applied): %w", a.Name, n.applied, err)
	}
	if n.changed > 0 {
		c.addonsApplied = append(c.addonsApplied, a.workload)
		return phase.Changed("%d of %d objects written", n.changed, n.applied), nil
	}
	if err := c.ready(ctx, cs, a.workload); err != nil {
		c.addonsApplied = append(c.addonsApplied, a.workload)
		return phase.Changed("%d objects unchanged; not ready: %v", n.applied, err), nil
	}
	return phase.Unchanged("%d objects unchanged, %s ready", n.applied, a.workload), nil
}

// runAddonWait waits, at most addonWaitTimeout, until every workload the
// addon phases of this run applied is ready.
func (c *Cluster) runAddonWait(ctx context.Context) (phase.Outcome, error) {
	pending := c.addonsApplied
	if len(pending) == 0 {
		return phase.Unchanged("nothing to wait for"), nil
	}
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	t0 := time.Now()
	took, pending, err := waitEach(ctx, c, addonPollInterval, addonWaitTimeout, pending, func(ctx context.Context, w addon.Workload) (string, error) {
		return w.Component, c.ready(ctx, cs, w)
	})
	if poll.TimedOut(ctx, err) {
		// A last look, under the phase's context: the poll's last checks
		// may have been cut short by its deadline.
		var b strings.Builder
		for _, w := range pending {
			why := c.ready(ctx, cs, w)
			if why == nil {
				continue
			}
			fmt.Fprintf(&b, "\n%s: %v", w, why)
			s, err := addon.Get(ctx, cs, w)
			var pods []corev1.Pod
			if err == nil && s != nil {
				pods, err = s.Pods(ctx, cs)
			}
			switch {
			case err != nil:
				fmt.Fprintf(&b, "\n  (its pods could not be listed: %v)", err)
			case s != nil: // else gone, as why says
				b.WriteString(s.DescribeNotReady(pods, c.kubectlCommand()))
			}
		}
		if b.Len() == 0 {
			return phase.Unchanged("ready after %s", progress.Round(time.Since(t0))), nil
		}
		return phase.Done, fmt.Errorf("the addons were not ready after %s:%s", addonWaitTimeout, b.String())
	}
	if err != nil {
		return phase.Done, err
	}
	return phase.Unchanged("%s", strings.Join(took, ", ")), nil
}

// ready says why w is not ready, nil when it is. When this run started
// the kubelet, the node's pods may be new while the API still holds their
// predecessors' ready statuses (after `devk down --keep-data`, or a
// reboot): then w is ready only once every container its pods report
// runs in the node's runtime.
func (c *Cluster) ready(ctx context.Context, cs kubernetes.Interface, w addon.Workload) error {
	s, err := addon.Get(ctx, cs, w)
	if err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("the cluster has no %s", w)
	}
	if done, why := s.RolledOut(); !done {
		return errors.New(why)
	}
	if c.kubeletStarted.IsZero() {
		return nil
	}
	pods, err := s.Pods(ctx, cs)
	if err != nil {
		return err
	}
	// The pods run on every node, each node's in its own runtime.
	ns, err := c.nodes()
	if err != nil {
		return err
	}
	var running []cri.Container
	for _, n := range ns {
		cs, err := runningContainers(ctx, c.criSocket(n), metav1.NamespaceSystem)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name(), err)
		}
		running = append(running, cs...)
	}
	return statusesCurrent(pods, running)
}

// statusesCurrent says which of a ready workload's pods is not ready
// after all, or reports a container that does not run (a status from
// before the node's runtime was emptied); pods on their way out do not
// count.
func statusesCurrent(pods []corev1.Pod, running []cri.Container) error {
	ids := map[string]bool{}
	for _, ct := range running {
		ids[ct.ID] = true
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if !addon.PodReady(&p) {
			return fmt.Errorf("pod %s is not ready (its workload's status is older)", p.Name)
		}
		for _, st := range p.Status.ContainerStatuses {
			_, id, _ := strings.Cut(st.ContainerID, "://")
			if !ids[id] {
				return fmt.Errorf("pod %s reports container %s ready, which does not run: the kubelet has not reported the pod since it started", p.Name, st.Name)
			}
		}
	}
	return nil
}

// kubectlCommand is a kubectl command line for kube-system of this
// cluster that works without the user's kubeconfig or a kubectl on PATH.
func (c *Cluster) kubectlCommand() string {
	kubectl := "kubectl"
	if _, err := os.Stat(c.KubectlPath()); err == nil {
		kubectl = c.KubectlPath()
	}
	return kubectl + " --kubeconfig " + c.Kubeconfig("admin") + " -n kube-system"
}

func serviceAccount(name string) *rbacv1ac.SubjectApplyConfiguration {
	return rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(name).WithNamespace(metav1.NamespaceSystem)
}

// applyKubeProxy applies kube-proxy's objects as kubeadm's proxy phase
// makes them.
func applyKubeProxy(ctx context.Context, c *Cluster, cs kubernetes.Interface, image string, n *applyCount) error {
	ns := metav1.NamespaceSystem
	if err := n.add(kube.Apply(ctx, cs.CoreV1().ServiceAccounts(ns), kubeProxyName, corev1ac.ServiceAccount(kubeProxyName, ns))); err != nil {
		return err
	}
	if err := n.add(kube.ApplyClusterRoleBinding(ctx, cs, nodeProxierBinding, nodeProxierRole, serviceAccount(kubeProxyName))); err != nil {
		return err
	}
	cm, err := kubeProxyConfigMap(c.Config)
	if err != nil {
		return err
	}
	if err := n.add(kube.Apply(ctx, cs.CoreV1().ConfigMaps(ns), kubeProxyName, cm)); err != nil {
		return err
	}
	// Joining nodes read the ConfigMap with the bootstrap token, as in
	// kubeadm.
	role := rbacv1ac.Role(kubeProxyName, ns).WithRules(rbacv1ac.PolicyRule().
		WithAPIGroups("").WithResources("configmaps").WithResourceNames(kubeProxyName).WithVerbs("get"))
	if err := n.add(kube.Apply(ctx, cs.RbacV1().Roles(ns), kubeProxyName, role)); err != nil {
		return err
	}
	binding := rbacv1ac.RoleBinding(kubeProxyName, ns).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(kubeProxyName)).
		WithSubjects(kube.Group(bootstrap.NodeBootstrappersGroup))
	if err := n.add(kube.Apply(ctx, cs.RbacV1().RoleBindings(ns), kubeProxyName, binding)); err != nil {
		return err
	}
	return n.add(kube.Apply(ctx, cs.AppsV1().DaemonSets(ns), kubeProxyName, kubeProxyDaemonSet(image, c.Config.Spec.KubeProxy.ExtraArgs)))
}

// kubeProxyConfigMap holds kube-proxy's config.conf and kubeconfig.conf.
func kubeProxyConfigMap(cfg layout.Config) (*corev1ac.ConfigMapApplyConfiguration, error) {
	conf, err := kubeProxyConfigYAML(cfg)
	if err != nil {
		return nil, err
	}
	kc, err := kubeProxyKubeconfigYAML(cfg)
	if err != nil {
		return nil, err
	}
	return corev1ac.ConfigMap(kubeProxyName, metav1.NamespaceSystem).
		WithLabels(map[string]string{"app": kubeProxyName}).
		WithData(map[string]string{kubeProxyConfigKey: string(conf), kubeProxyKubeconfig: string(kc)}), nil
}

// kubeProxyConfigYAML is kube-proxy's KubeProxyConfiguration: iptables
// mode, the pod range as the cluster CIDR. Every conntrack setting is
// zero, which tells kube-proxy to write no conntrack sysctl:
// nf_conntrack_max is global and read-only outside the machine's initial
// network namespace (kube-proxy would fail on it), and the timeouts need
// no tuning on a throwaway cluster.
func kubeProxyConfigYAML(cfg layout.Config) ([]byte, error) {
	kp := kubeproxyconfig.KubeProxyConfiguration{
		TypeMeta:         metav1.TypeMeta{APIVersion: kubeproxyconfig.SchemeGroupVersion.String(), Kind: "KubeProxyConfiguration"},
		ClientConnection: componentbaseconfig.ClientConnectionConfiguration{Kubeconfig: kubeProxyConfigDir + "/" + kubeProxyKubeconfig},
		BindAddress:      "0.0.0.0",
		Mode:             kubeproxyconfig.ProxyMode("iptables"),
		ClusterCIDR:      cfg.PodCIDR,
		// A change reaches the running kube-proxy through its ConfigMap:
		// kube-proxy exits when its config file changes, and restarts.
		FeatureGates: cfg.Spec.Gates(cfg.Spec.KubeProxy),
		Conntrack: kubeproxyconfig.KubeProxyConntrackConfiguration{
			MaxPerCore:            ptr.To[int32](0),
			Min:                   ptr.To[int32](0),
			TCPEstablishedTimeout: &metav1.Duration{},
			TCPCloseWaitTimeout:   &metav1.Duration{},
		},
	}
	return yaml.Marshal(kp)
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

// kubeProxyFlags are kube-proxy's own flags, which a config file's
// kubeProxy.extraArgs may not change (its feature gates are in its
// config file).
func kubeProxyFlags() map[string]string {
	return map[string]string{"config": kubeProxyConfigDir + "/" + kubeProxyConfigKey, "hostname-override": "$(NODE_NAME)"}
}

// kubeProxyDaemonSet is kubeadm's kube-proxy DaemonSet with image, and
// extra flags (sorted, after devk's). kube-proxy reads its settings from
// its config file; given one, it takes only logging flags (--v,
// --vmodule) from its command line.
func kubeProxyDaemonSet(image string, extraArgs map[string]string) *appsv1ac.DaemonSetApplyConfiguration {
	labels := map[string]string{labelApp: kubeProxyName}
	own := kubeProxyFlags()
	command := append([]string{kubeProxyBinary}, staticpod.FlagList(own)...)
	command = append(command, staticpod.FlagList(config.WithoutOwned(config.KubeProxy, extraArgs))...)
	return appsv1ac.DaemonSet(kubeProxyName, metav1.NamespaceSystem).
		WithLabels(labels).
		WithSpec(appsv1ac.DaemonSetSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithUpdateStrategy(appsv1ac.DaemonSetUpdateStrategy().WithType(appsv1.RollingUpdateDaemonSetStrategyType)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
				WithContainers(corev1ac.Container().
					WithName(kubeProxyName).
					WithImage(image).
					WithImagePullPolicy(corev1.PullIfNotPresent).
					WithCommand(command...).
					WithEnv(corev1ac.EnvVar().WithName("NODE_NAME").
						WithValueFrom(corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("spec.nodeName")))).
					WithSecurityContext(corev1ac.SecurityContext().WithPrivileged(true)).
					WithVolumeMounts(
						corev1ac.VolumeMount().WithName(kubeProxyName).WithMountPath(kubeProxyConfigDir),
						corev1ac.VolumeMount().WithName("xtables-lock").WithMountPath(xtablesLock),
						corev1ac.VolumeMount().WithName("lib-modules").WithMountPath("/lib/modules").WithReadOnly(true))).
				WithHostNetwork(true).
				WithServiceAccountName(kubeProxyName).
				WithPriorityClassName("system-node-critical").
				WithNodeSelector(map[string]string{corev1.LabelOSStable: "linux"}).
				WithTolerations(corev1ac.Toleration().WithOperator(corev1.TolerationOpExists)).
				WithVolumes(
					corev1ac.Volume().WithName(kubeProxyName).WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(kubeProxyName)),
					corev1ac.Volume().WithName("xtables-lock").WithHostPath(corev1ac.HostPathVolumeSource().WithPath(xtablesLock).WithType(corev1.HostPathFileOrCreate)),
					corev1ac.Volume().WithName("lib-modules").WithHostPath(corev1ac.HostPathVolumeSource().WithPath("/lib/modules"))))))
}

// applyCoreDNS applies CoreDNS's objects as kubeadm's dns phase makes
// them (see corefile for what differs).
func applyCoreDNS(ctx context.Context, c *Cluster, cs kubernetes.Interface, image string, n *applyCount) error {
	ns := metav1.NamespaceSystem
	svc, err := kubeDNSService(c.Config)
	if err != nil {
		return err
	}
	dep, err := coreDNSDeployment(c.Config, image)
	if err != nil {
		return err
	}
	if err := n.add(kube.Apply(ctx, cs.CoreV1().ServiceAccounts(ns), coreDNSName, corev1ac.ServiceAccount(coreDNSName, ns))); err != nil {
		return err
	}
	role := rbacv1ac.ClusterRole(coreDNSRole).WithRules(
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("endpoints", "services", "pods", "namespaces").WithVerbs("list", "watch"),
		rbacv1ac.PolicyRule().WithAPIGroups("discovery.k8s.io").WithResources("endpointslices").WithVerbs("list", "watch"))
	if err := n.add(kube.Apply(ctx, cs.RbacV1().ClusterRoles(), coreDNSRole, role)); err != nil {
		return err
	}
	if err := n.add(kube.ApplyClusterRoleBinding(ctx, cs, coreDNSRole, coreDNSRole, serviceAccount(coreDNSName))); err != nil {
		return err
	}
	cm := corev1ac.ConfigMap(coreDNSName, ns).WithData(map[string]string{"Corefile": corefile(c.Config.DNSDomain)})
	if err := n.add(kube.Apply(ctx, cs.CoreV1().ConfigMaps(ns), coreDNSName, cm)); err != nil {
		return err
	}
	if err := n.add(kube.Apply(ctx, cs.CoreV1().Services(ns), kubeDNSName, svc)); err != nil {
		return err
	}
	return n.add(kube.Apply(ctx, cs.AppsV1().Deployments(ns), coreDNSName, dep))
}

// corefile is kubeadm's Corefile without `forward . /etc/resolv.conf`:
// devk's clusters never contact anything beyond the machine, so CoreDNS
// answers for the cluster domain (and the reverse zones) alone and sends
// no query on; a name outside the cluster gets an error answer.
func corefile(domain string) string {
	return `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes ` + domain + ` in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :` + strconv.Itoa(coreDNSMetrics) + `
    cache 30 {
       disable success ` + domain + `
       disable denial ` + domain + `
    }
    loop
    reload
    loadbalance
}
`
}

// kubeDNSService is Service kube-system/kube-dns at the cluster's DNS IP,
// the kubelet's clusterDNS.
func kubeDNSService(cfg layout.Config) (*corev1ac.ServiceApplyConfiguration, error) {
	ip := cfg.DNSIP()
	if ip == "" {
		return nil, fmt.Errorf("no DNS address in service CIDR %q (cluster.json serviceCIDR)", cfg.ServiceCIDR)
	}
	port := func(name string, proto corev1.Protocol, p int32) *corev1ac.ServicePortApplyConfiguration {
		return corev1ac.ServicePort().WithName(name).WithProtocol(proto).WithPort(p).WithTargetPort(intstr.FromInt32(p))
	}
	return corev1ac.Service(kubeDNSName, metav1.NamespaceSystem).
		WithLabels(map[string]string{labelApp: kubeDNSName, "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}).
		WithAnnotations(map[string]string{"prometheus.io/port": strconv.Itoa(coreDNSMetrics), "prometheus.io/scrape": "true"}).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(ip).
			WithSelector(map[string]string{labelApp: kubeDNSName}).
			WithPorts(port("dns", corev1.ProtocolUDP, dnsPort), port("dns-tcp", corev1.ProtocolTCP, dnsPort), port("metrics", corev1.ProtocolTCP, coreDNSMetrics))), nil
}

// coreDNSDeployment is kubeadm's CoreDNS Deployment with image, and two
// changes that make up faster and keep it on the machine:
//   - KUBERNETES_SERVICE_HOST/PORT name the API server itself, as
//     kube-proxy's kubeconfig does: CoreDNS does not wait for kube-proxy
//     to make the kubernetes Service reachable (so both start side by
//     side), and sends nothing to a Service IP that no rule handles yet,
//     which the machine would route out of it.
//   - the readiness probe runs every coreDNSReadinessPeriod rather than
//     every 10 s, so the Deployment is available as soon as CoreDNS is.
func coreDNSDeployment(cfg layout.Config, image string) (*appsv1ac.DeploymentApplyConfiguration, error) {
	u, err := neturl.Parse(cfg.APIServerURL())
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("API server URL %s: %w", cfg.APIServerURL(), err)
	}
	labels := map[string]string{labelApp: kubeDNSName}
	httpProbe := func(path string, port int32) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromInt32(port)).WithScheme(corev1.URISchemeHTTP))
	}
	containerPort := func(name string, proto corev1.Protocol, p int32) *corev1ac.ContainerPortApplyConfiguration {
		return corev1ac.ContainerPort().WithName(name).WithProtocol(proto).WithContainerPort(p)
	}
	return appsv1ac.Deployment(coreDNSName, metav1.NamespaceSystem).
		WithLabels(labels).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(coreDNSReplicas).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RollingUpdateDeploymentStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().WithMaxUnavailable(intstr.FromInt32(1)))).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
				WithPriorityClassName("system-cluster-critical").
				WithServiceAccountName(coreDNSName).
				WithAffinity(corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
					WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().WithWeight(100).
						WithPodAffinityTerm(corev1ac.PodAffinityTerm().WithTopologyKey(corev1.LabelHostname).
							WithLabelSelector(metav1ac.LabelSelector().WithMatchExpressions(metav1ac.LabelSelectorRequirement().
								WithKey(labelApp).WithOperator(metav1.LabelSelectorOpIn).WithValues(kubeDNSName))))))).
				WithTolerations(
					corev1ac.Toleration().WithKey("CriticalAddonsOnly").WithOperator(corev1.TolerationOpExists),
					corev1ac.Toleration().WithKey(bootstrap.LabelControlPlane).WithEffect(corev1.TaintEffectNoSchedule)).
				WithNodeSelector(map[string]string{corev1.LabelOSStable: "linux"}).
				WithDNSPolicy(corev1.DNSDefault).
				WithContainers(corev1ac.Container().
					WithName(coreDNSName).
					WithImage(image).
					WithImagePullPolicy(corev1.PullIfNotPresent).
					WithArgs("-conf", coreDNSConfigDir+"/Corefile").
					WithEnv(
						corev1ac.EnvVar().WithName("KUBERNETES_SERVICE_HOST").WithValue(host),
						corev1ac.EnvVar().WithName("KUBERNETES_SERVICE_PORT").WithValue(port)).
					WithResources(corev1ac.ResourceRequirements().
						WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")}).
						WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")})).
					WithVolumeMounts(corev1ac.VolumeMount().WithName("config-volume").WithMountPath(coreDNSConfigDir).WithReadOnly(true)).
					WithPorts(
						containerPort("dns", corev1.ProtocolUDP, dnsPort),
						containerPort("dns-tcp", corev1.ProtocolTCP, dnsPort),
						containerPort("metrics", corev1.ProtocolTCP, coreDNSMetrics)).
					WithLivenessProbe(httpProbe("/health", coreDNSHealth).
						WithInitialDelaySeconds(60).WithTimeoutSeconds(5).WithSuccessThreshold(1).WithFailureThreshold(5)).
					WithReadinessProbe(httpProbe("/ready", coreDNSReadyPort).WithPeriodSeconds(int32(coreDNSReadinessPeriod / time.Second))).
					WithSecurityContext(corev1ac.SecurityContext().
						WithAllowPrivilegeEscalation(false).
						WithCapabilities(corev1ac.Capabilities().WithAdd("NET_BIND_SERVICE").WithDrop("ALL")).
						WithReadOnlyRootFilesystem(true))).
				WithVolumes(corev1ac.Volume().WithName("config-volume").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(coreDNSName).
					WithItems(corev1ac.KeyToPath().WithKey("Corefile").WithPath("Corefile"))))))), nil
}

// runningContainers are the running containers of namespace's pods in
// the runtime at socket.
func runningContainers(ctx context.Context, socket, namespace string) ([]cri.Container, error) {
	rt, err := cri.Dial(socket)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	return rt.Containers(ctx, cri.Filter{PodNamespace: namespace, RunningOnly: true})
}
