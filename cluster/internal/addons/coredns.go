package addons

import (
	"context"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
)

const (
	// coreDNSRole is CoreDNS's ClusterRole (and ClusterRoleBinding).
	coreDNSRole = "system:coredns"
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

	// coreDNSReadinessPeriod is how often the kubelet probes CoreDNS's
	// /ready: the Deployment is available no later than that after
	// CoreDNS is (the kubelet's default, 10 s, would be most of up).
	coreDNSReadinessPeriod = time.Second
)

// CoreDNSWrites names the objects ApplyCoreDNS applies, for --dry-run.
func CoreDNSWrites() []string {
	return []string{"serviceaccount kube-system/coredns", "clusterrole,clusterrolebinding " + coreDNSRole,
		"configmap kube-system/coredns", "service kube-system/kube-dns", "deployment kube-system/coredns"}
}

// ApplyCoreDNS applies CoreDNS's objects as kubeadm's dns phase makes
// them (see corefile for what differs), the Deployment last, running
// image, counting each into n.
func ApplyCoreDNS(ctx context.Context, cs kubernetes.Interface, cfg layout.Config, image string, n *Count) error {
	ns := metav1.NamespaceSystem
	svc, err := kubeDNSService(cfg)
	if err != nil {
		return err
	}
	dep, err := coreDNSDeployment(cfg, image)
	if err != nil {
		return err
	}
	if err := n.Add(kube.Apply(ctx, cs.CoreV1().ServiceAccounts(ns), CoreDNS, corev1ac.ServiceAccount(CoreDNS, ns))); err != nil {
		return err
	}
	role := rbacv1ac.ClusterRole(coreDNSRole).WithRules(
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("endpoints", "services", "pods", "namespaces").WithVerbs("list", "watch"),
		rbacv1ac.PolicyRule().WithAPIGroups("discovery.k8s.io").WithResources("endpointslices").WithVerbs("list", "watch"))
	if err := n.Add(kube.Apply(ctx, cs.RbacV1().ClusterRoles(), coreDNSRole, role)); err != nil {
		return err
	}
	if err := n.Add(kube.ApplyClusterRoleBinding(ctx, cs, coreDNSRole, coreDNSRole, serviceAccount(CoreDNS))); err != nil {
		return err
	}
	cm := corev1ac.ConfigMap(CoreDNS, ns).WithData(map[string]string{"Corefile": corefile(cfg.DNSDomain)})
	if err := n.Add(kube.Apply(ctx, cs.CoreV1().ConfigMaps(ns), CoreDNS, cm)); err != nil {
		return err
	}
	if err := n.Add(kube.Apply(ctx, cs.CoreV1().Services(ns), kubeDNSName, svc)); err != nil {
		return err
	}
	return n.Add(kube.Apply(ctx, cs.AppsV1().Deployments(ns), CoreDNS, dep))
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
	return appsv1ac.Deployment(CoreDNS, metav1.NamespaceSystem).
		WithLabels(labels).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(coreDNSReplicas).
			WithStrategy(appsv1ac.DeploymentStrategy().WithType(appsv1.RollingUpdateDeploymentStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().WithMaxUnavailable(intstr.FromInt32(1)))).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
				WithPriorityClassName("system-cluster-critical").
				WithServiceAccountName(CoreDNS).
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
					WithName(CoreDNS).
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
				WithVolumes(corev1ac.Volume().WithName("config-volume").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(CoreDNS).
					WithItems(corev1ac.KeyToPath().WithKey("Corefile").WithPath("Corefile"))))))), nil
}
