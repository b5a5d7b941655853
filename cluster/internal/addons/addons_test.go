package addons

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/cluster/internal/kwok"
	"github.com/devk/devk/internal/layout"
)

const (
	testCoreDNSImage   = "127.0.0.1:5000/coredns@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	testKubeProxyImage = "127.0.0.1:5000/kube-proxy@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// testConfig is a cluster config that differs from the defaults where
// the addons read it, so that a value written in rather than taken from
// the config shows.
func testConfig(t *testing.T) layout.Config {
	t.Helper()
	cfg := layout.NewConfig("addons")
	_, subnet, _ := net.ParseCIDR("10.250.3.0/24")
	if err := cfg.PlaceAt(subnet, nil, nil); err != nil {
		t.Fatal(err)
	}
	cfg.Ports.APIServer = 7443
	cfg.ServiceCIDR = "10.100.0.0/16"
	cfg.PodCIDR = "10.245.0.0/16"
	cfg.DNSDomain = "dev.example"
	if err := cfg.Validate("addons"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// applyBoth is an API server with both addons of cfg applied. It is
// client-go's fake: a real one needs etcd and the apiserver binary (the
// e2e suite applies to one); the fake does server-side apply of the
// typed objects.
func applyBoth(t *testing.T, cfg layout.Config) kubernetes.Interface {
	t.Helper()
	cs := fake.NewClientset()
	for name, apply := range map[string]func(*Count) error{
		KubeProxy: func(n *Count) error {
			return ApplyKubeProxy(context.Background(), cs, cfg, testKubeProxyImage, n)
		},
		CoreDNS: func(n *Count) error { return ApplyCoreDNS(context.Background(), cs, cfg, testCoreDNSImage, n) },
	} {
		var n Count
		if err := apply(&n); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
		if n.Applied != 6 {
			t.Errorf("%s applied %d objects, want 6", name, n.Applied)
		}
	}
	return cs
}

func TestCoreDNSObjects(t *testing.T) {
	ctx, ns := context.Background(), metav1.NamespaceSystem
	cfg := testConfig(t)
	cs := applyBoth(t, cfg)

	// The Service is where the kubelet sends the pods' DNS queries.
	kubelet, err := kubeletconfig.YAML(kubeletconfig.Input{Config: cfg, Node: cfg.FirstNode(), Files: layout.HomeFiles(t.TempDir()).Cluster(cfg.Name).FirstNode(), CRISocket: "/run/x.sock"})
	if err != nil {
		t.Fatal(err)
	}
	var kc struct{ ClusterDNS []string }
	if err := yaml.Unmarshal(kubelet, &kc); err != nil || len(kc.ClusterDNS) != 1 {
		t.Fatalf("kubelet clusterDNS %v: %v", kc.ClusterDNS, err)
	}
	svc, err := cs.CoreV1().Services(ns).Get(ctx, kubeDNSName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != kc.ClusterDNS[0] || svc.Spec.ClusterIP != "10.100.0.10" {
		t.Errorf("kube-dns at %s, the kubelet's clusterDNS is %s", svc.Spec.ClusterIP, kc.ClusterDNS[0])
	}
	if svc.Labels[labelApp] != kubeDNSName || svc.Spec.Selector[labelApp] != kubeDNSName {
		t.Errorf("kube-dns labels %v selector %v", svc.Labels, svc.Spec.Selector)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Name+"/"+string(p.Protocol)+"/"+p.TargetPort.String())
	}
	if want := []string{"dns/UDP/53", "dns-tcp/TCP/53", "metrics/TCP/9153"}; !slices.Equal(ports, want) {
		t.Errorf("kube-dns ports %v, want %v", ports, want)
	}

	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, CoreDNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cf := cm.Data["Corefile"]
	for _, want := range []string{"kubernetes dev.example in-addr.arpa ip6.arpa {", "disable success dev.example", "ready", "health {", "lameduck 5s", "prometheus :9153", "loop", "reload"} {
		if !strings.Contains(cf, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, cf)
		}
	}
	for _, never := range []string{"forward", "cluster.local", "resolv.conf"} {
		if strings.Contains(cf, never) {
			t.Errorf("Corefile has %q (devk's CoreDNS sends no query beyond the cluster):\n%s", never, cf)
		}
	}
	if strings.Count(cf, "{") != strings.Count(cf, "}") {
		t.Errorf("Corefile braces do not balance:\n%s", cf)
	}

	d, err := cs.AppsV1().Deployments(ns).Get(ctx, CoreDNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	if ptr.Deref(d.Spec.Replicas, 0) != 2 || len(pod.Containers) != 1 {
		t.Fatalf("coredns: %d replicas, %d containers", ptr.Deref(d.Spec.Replicas, 0), len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if ctr.Image != testCoreDNSImage {
		t.Errorf("coredns image %s, want the recorded digest %s", ctr.Image, testCoreDNSImage)
	}
	if !slices.Equal(ctr.Args, []string{"-conf", "/etc/coredns/Corefile"}) {
		t.Errorf("coredns args %v", ctr.Args)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "10.250.3.2" || env["KUBERNETES_SERVICE_PORT"] != "7443" {
		t.Errorf("coredns reaches the API server at %s:%s, want the API server's own address 10.250.3.2:7443", env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"])
	}
	if sc := ctr.SecurityContext; sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("coredns securityContext %+v", sc)
	}
	if p := ctr.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("coredns liveness probe %+v", p)
	}
	if p := ctr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" || p.HTTPGet.Port.IntValue() != 8181 || p.PeriodSeconds != 1 {
		t.Errorf("coredns readiness probe %+v", p)
	}
	if pod.DNSPolicy != corev1.DNSDefault || pod.PriorityClassName != "system-cluster-critical" || pod.ServiceAccountName != CoreDNS {
		t.Errorf("coredns pod: dnsPolicy %s, priority class %s, service account %s", pod.DNSPolicy, pod.PriorityClassName, pod.ServiceAccountName)
	}
	cpTaint := corev1.Taint{Key: bootstrap.LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(&cpTaint) }) {
		t.Errorf("coredns does not tolerate %v (--keep-taint): %v", cpTaint, pod.Tolerations)
	}
	if d.Spec.Selector.MatchLabels[labelApp] != kubeDNSName || d.Spec.Template.Labels[labelApp] != kubeDNSName {
		t.Errorf("coredns selector %v, pod labels %v: the kube-dns Service would select nothing", d.Spec.Selector, d.Spec.Template.Labels)
	}

	role, err := cs.RbacV1().ClusterRoles().Get(ctx, coreDNSRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, "discovery.k8s.io") && slices.Contains(r.Resources, "endpointslices") && slices.Contains(r.Verbs, "watch")
	}) {
		t.Errorf("system:coredns cannot watch endpointslices: %+v", role.Rules)
	}
	checkBinding(t, cs, coreDNSRole, coreDNSRole, CoreDNS)
}

func TestKubeProxyObjects(t *testing.T) {
	ctx, ns := context.Background(), metav1.NamespaceSystem
	cfg := testConfig(t)
	cs := applyBoth(t, cfg)

	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, KubeProxy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw := cm.Data[kubeProxyConfigKey]
	var kp kubeproxyconfig.KubeProxyConfiguration
	if err := yaml.UnmarshalStrict([]byte(raw), &kp); err != nil {
		t.Fatalf("config.conf is not a KubeProxyConfiguration: %v\n%s", err, raw)
	}
	if kp.APIVersion != "kubeproxy.config.k8s.io/v1alpha1" || kp.Kind != "KubeProxyConfiguration" {
		t.Errorf("config.conf is %s %s", kp.APIVersion, kp.Kind)
	}
	if kp.Mode != "iptables" || kp.ClusterCIDR != "10.245.0.0/16" || kp.BindAddress != "0.0.0.0" {
		t.Errorf("config.conf: mode %q, clusterCIDR %q (want the pod CIDR), bindAddress %q", kp.Mode, kp.ClusterCIDR, kp.BindAddress)
	}
	if kp.ClientConnection.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" {
		t.Errorf("config.conf's kubeconfig is %q", kp.ClientConnection.Kubeconfig)
	}
	// nil would be defaulted (maxPerCore 32768, a write to the global,
	// read-only nf_conntrack_max); 0 skips it.
	ct := kp.Conntrack
	if ct.MaxPerCore == nil || *ct.MaxPerCore != 0 || ct.Min == nil || *ct.Min != 0 {
		t.Errorf("conntrack maxPerCore %v min %v, want both set to 0:\n%s", ct.MaxPerCore, ct.Min, raw)
	}
	if ct.TCPEstablishedTimeout == nil || ct.TCPEstablishedTimeout.Duration != 0 || ct.TCPCloseWaitTimeout == nil || ct.TCPCloseWaitTimeout.Duration != 0 {
		t.Errorf("conntrack timeouts %v %v, want both set to 0s", ct.TCPEstablishedTimeout, ct.TCPCloseWaitTimeout)
	}

	kc, err := clientcmd.Load([]byte(cm.Data[kubeProxyKubeconfig]))
	if err != nil {
		t.Fatalf("kubeconfig.conf: %v", err)
	}
	kctx := kc.Contexts[kc.CurrentContext]
	if kctx == nil || kc.Clusters[kctx.Cluster] == nil || kc.AuthInfos[kctx.AuthInfo] == nil {
		t.Fatalf("kubeconfig.conf has no complete current context:\n%s", cm.Data[kubeProxyKubeconfig])
	}
	if cl := kc.Clusters[kctx.Cluster]; cl.Server != "https://10.250.3.2:7443" || cl.CertificateAuthority != serviceAccountCACert {
		t.Errorf("kubeconfig.conf: server %s (want the API server's URL), CA %s", cl.Server, cl.CertificateAuthority)
	}
	if ai := kc.AuthInfos[kctx.AuthInfo]; ai.TokenFile != serviceAccountToken {
		t.Errorf("kubeconfig.conf: token file %q", ai.TokenFile)
	}

	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, KubeProxy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("kube-proxy has %d containers", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if ctr.Image != testKubeProxyImage {
		t.Errorf("kube-proxy image %s, want the recorded digest %s", ctr.Image, testKubeProxyImage)
	}
	if want := []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"}; !slices.Equal(ctr.Command, want) {
		t.Errorf("kube-proxy command %v, want %v", ctr.Command, want)
	}
	if len(ctr.Env) != 1 || ctr.Env[0].Name != "NODE_NAME" || ctr.Env[0].ValueFrom == nil || ctr.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("kube-proxy env %+v: $(NODE_NAME) must be the pod's node", ctr.Env)
	}
	if !pod.HostNetwork || ctr.SecurityContext == nil || !ptr.Deref(ctr.SecurityContext.Privileged, false) {
		t.Errorf("kube-proxy: hostNetwork %v, securityContext %+v", pod.HostNetwork, ctr.SecurityContext)
	}
	if pod.PriorityClassName != "system-node-critical" || pod.ServiceAccountName != KubeProxy {
		t.Errorf("kube-proxy: priority class %s, service account %s", pod.PriorityClassName, pod.ServiceAccountName)
	}
	for _, taint := range []corev1.Taint{
		{Key: bootstrap.LabelControlPlane, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute},
		{Key: "anything", Value: "at-all", Effect: corev1.TaintEffectNoSchedule},
	} {
		if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(&taint) }) {
			t.Errorf("kube-proxy does not tolerate %v: %v", taint, pod.Tolerations)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	if v := vols["xtables-lock"]; v.HostPath == nil || v.HostPath.Path != "/run/xtables.lock" || ptr.Deref(v.HostPath.Type, "") != corev1.HostPathFileOrCreate {
		t.Errorf("xtables-lock volume %+v", v)
	}
	if v := vols["lib-modules"]; v.HostPath == nil || v.HostPath.Path != "/lib/modules" {
		t.Errorf("lib-modules volume %+v", v)
	}
	if v := vols[KubeProxy]; v.ConfigMap == nil || v.ConfigMap.Name != KubeProxy {
		t.Errorf("kube-proxy volume %+v", v)
	}
	for _, m := range ctr.VolumeMounts {
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("mount of %s, which is no volume", m.Name)
		}
		if m.Name == "lib-modules" && !m.ReadOnly {
			t.Error("/lib/modules is mounted writable")
		}
	}
	checkBinding(t, cs, nodeProxierBinding, nodeProxierRole, KubeProxy)
}

// checkBinding checks that ClusterRoleBinding name binds role to
// ServiceAccount kube-system/sa.
func checkBinding(t *testing.T, cs kubernetes.Interface, name, role, sa string) {
	t.Helper()
	b, err := cs.RbacV1().ClusterRoleBindings().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: metav1.NamespaceSystem}
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role || !slices.Equal(b.Subjects, []rbacv1.Subject{want}) {
		t.Errorf("binding %s: %+v to %+v, want %s to %+v", name, b.RoleRef, b.Subjects, role, want)
	}
}

// TestKubeProxyCommand: kube-proxy's command line is its binary, devk's
// flags, then the spec's extraArgs (sorted) less those devk owns.
func TestKubeProxyCommand(t *testing.T) {
	want := []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"}
	if got := KubeProxyCommand(nil); !slices.Equal(got, want) {
		t.Errorf("kube-proxy command %v, want %v", got, want)
	}
	got := KubeProxyCommand(map[string]string{"vmodule": "proxier=4", "v": "2", "config": "/elsewhere"})
	if want := append(want, "--v=2", "--vmodule=proxier=4"); !slices.Equal(got, want) {
		t.Errorf("kube-proxy command with extraArgs %v, want %v", got, want)
	}
}

// TestNodeKubeProxies: a worker with a tree of its own runs that tree's
// kube-proxy from a DaemonSet of its own, on it alone, and the cluster's
// keeps off it; once the worker has none (removed, or its tree left
// out), its DaemonSet goes and the cluster's covers it again.
func TestNodeKubeProxies(t *testing.T) {
	ctx, ns := context.Background(), metav1.NamespaceSystem
	cfg := testConfig(t)
	if _, err := cfg.AddNode("old", layout.RoleWorker, nil); err != nil {
		t.Fatal(err)
	}
	const oldImage = "127.0.0.1:5000/kube-proxy@sha256:" + "0ld0000000000000000000000000000000000000000000000000000000000000"
	cfg.Network.Nodes[1].Tree, cfg.Network.Nodes[1].KubeProxyImage = "/src/k8s-v1.34.4", oldImage
	cs := fake.NewClientset()
	var n Count
	if err := ApplyKubeProxy(ctx, cs, cfg, testKubeProxyImage, &n); err != nil {
		t.Fatal(err)
	}
	if n.Applied != 7 {
		t.Errorf("applied %d objects, want the 6 of kube-proxy and the node's DaemonSet", n.Applied)
	}
	hostname := func(ds *appsv1.DaemonSet) (corev1.NodeSelectorOperator, []string) {
		a := ds.Spec.Template.Spec.Affinity
		for _, r := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions {
			if r.Key == corev1.LabelHostname {
				return r.Operator, r.Values
			}
		}
		return "", nil
	}
	main, err := cs.AppsV1().DaemonSets(ns).Get(ctx, KubeProxy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if op, names := hostname(main); op != corev1.NodeSelectorOpNotIn || !slices.Equal(names, []string{"old"}) || !kwok.KeepsOffFakeNodes(main.Spec.Template.Spec.Affinity) {
		t.Errorf("the cluster's kube-proxy: hostname %s %v, want NotIn [old], and off kwok's nodes", op, names)
	}
	own, err := cs.AppsV1().DaemonSets(ns).Get(ctx, NodeKubeProxy("old").Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if op, names := hostname(own); op != corev1.NodeSelectorOpIn || !slices.Equal(names, []string{"old"}) {
		t.Errorf("%s: hostname %s %v, want In [old]", own.Name, op, names)
	}
	pod := own.Spec.Template.Spec
	if pod.Containers[0].Image != oldImage || !pod.HostNetwork || pod.ServiceAccountName != KubeProxy || own.Spec.Template.Labels[LabelKubeProxyNode] != "old" {
		t.Errorf("%s: image %s, hostNetwork %v, service account %s, labels %v", own.Name, pod.Containers[0].Image, pod.HostNetwork, pod.ServiceAccountName, own.Spec.Template.Labels)
	}
	if sel := own.Spec.Selector.MatchLabels; sel[labelApp] == KubeProxy {
		t.Errorf("%s selects %v: the cluster's kube-proxy's pods too", own.Name, sel)
	}

	cfg.Network.Nodes[1].KubeProxyImage = ""
	n = Count{}
	if err := ApplyKubeProxy(ctx, cs, cfg, testKubeProxyImage, &n); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().DaemonSets(ns).Get(ctx, own.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s after the node has no kube-proxy of its own: %v, want it deleted", own.Name, err)
	}
	if main, err = cs.AppsV1().DaemonSets(ns).Get(ctx, KubeProxy, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if op, names := hostname(main); op != "" {
		t.Errorf("the cluster's kube-proxy then: hostname %s %v, want no hostname term", op, names)
	}
}
