package cluster

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
)

const (
	testCoreDNSImage   = "127.0.0.1:5000/coredns@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	testKubeProxyImage = "127.0.0.1:5000/kube-proxy@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// addonCluster is a cluster config that differs from the defaults where
// the addons read it, so that a value written in rather than taken from
// the config shows.
func addonCluster(t *testing.T) *Cluster {
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
	cfg.Images = map[string]string{coreDNSName: testCoreDNSImage, kubeProxyName: testKubeProxyImage}
	if err := cfg.Validate("addons"); err != nil {
		t.Fatal(err)
	}
	return &Cluster{Config: cfg, Paths: layout.ClusterPaths(t.TempDir(), "addons")}
}

// applyAddons applies both addons to cs. The API server is client-go's
// fake: a real one needs etcd and the apiserver binary (the e2e suite
// applies to one); the fake does server-side apply of the typed objects.
func applyAddons(t *testing.T, c *Cluster, cs kubernetes.Interface) {
	t.Helper()
	for _, a := range addons() {
		var n applyCount
		if err := a.objects(context.Background(), c, cs, c.Config.Images[a.Name], &n); err != nil {
			t.Fatalf("apply %s: %v", a.Name, err)
		}
		if n.applied != 6 {
			t.Errorf("%s applied %d objects, want 6", a.Name, n.applied)
		}
	}
}

func TestCoreDNSObjects(t *testing.T) {
	ctx := context.Background()
	c := addonCluster(t)
	cs := fake.NewClientset()
	applyAddons(t, c, cs)
	ns := metav1.NamespaceSystem

	// The Service is where the kubelet sends the pods' DNS queries.
	kubelet, err := kubeletconfig.YAML(kubeletconfig.Input{Config: c.Config, Paths: c.Paths, CRISocket: "/run/x.sock"})
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

	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, coreDNSName, metav1.GetOptions{})
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

	d, err := cs.AppsV1().Deployments(ns).Get(ctx, coreDNSName, metav1.GetOptions{})
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
	if pod.DNSPolicy != corev1.DNSDefault || pod.PriorityClassName != "system-cluster-critical" || pod.ServiceAccountName != coreDNSName {
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
	checkBinding(t, cs, coreDNSRole, coreDNSRole, coreDNSName)
}

func TestKubeProxyObjects(t *testing.T) {
	ctx := context.Background()
	c := addonCluster(t)
	cs := fake.NewClientset()
	applyAddons(t, c, cs)
	ns := metav1.NamespaceSystem

	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, kubeProxyName, metav1.GetOptions{})
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

	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, kubeProxyName, metav1.GetOptions{})
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
	if pod.PriorityClassName != "system-node-critical" || pod.ServiceAccountName != kubeProxyName {
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
	if v := vols[kubeProxyName]; v.ConfigMap == nil || v.ConfigMap.Name != kubeProxyName {
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
	checkBinding(t, cs, nodeProxierBinding, nodeProxierRole, kubeProxyName)
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

// TestApplyAddonOutcome: a phase is Unchanged only when nothing it
// applied changed and its workload is rolled out; otherwise addon/wait
// waits for the workload.
func TestApplyAddonOutcome(t *testing.T) {
	for _, tt := range []struct {
		name      string
		changed   int
		available int32
		unchanged bool
	}{
		{name: "objects written", changed: 2},
		{name: "objects written, the old pods ready", changed: 1, available: 1},
		{name: "nothing written, not ready"},
		{name: "nothing written, ready", available: 1, unchanged: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := upAddon{
				Name: kubeProxyName,
				objects: func(_ context.Context, _ *Cluster, _ kubernetes.Interface, _ string, n *applyCount) error {
					for i := range 3 {
						_ = n.add(i < tt.changed, nil)
					}
					return nil
				},
				workload: addonWorkload(kubeProxyName),
			}
			cs := fake.NewClientset(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName, Namespace: metav1.NamespaceSystem, Generation: 1},
				Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberAvailable: tt.available}})
			c := addonCluster(t)
			out, err := c.applyAddonWith(context.Background(), cs, a, "img")
			if err != nil {
				t.Fatal(err)
			}
			if out.Changed == tt.unchanged {
				t.Errorf("outcome %+v, want changed %v", out, !tt.unchanged)
			}
			if waits := len(c.addonsApplied) == 1; waits == tt.unchanged {
				t.Errorf("addon/wait waits for %v", c.addonsApplied)
			}
			if checked := slices.ContainsFunc(cs.Actions(), func(a clienttesting.Action) bool { return a.Matches("get", "daemonsets") }); tt.changed > 0 && checked {
				t.Error("checked readiness right after a change, when the status is stale anyway")
			}
		})
	}
}

// TestAddonWorkloads: each of up's addons waits for its workload as
// internal/addon knows it.
func TestAddonWorkloads(t *testing.T) {
	for _, a := range addons() {
		if a.workload.Component != a.Name || a.workload.Kind == "" {
			t.Errorf("addon %s: workload %+v", a.Name, a.workload)
		}
	}
}

func TestApplyAddonNeedsImage(t *testing.T) {
	c := addonCluster(t)
	delete(c.Config.Images, coreDNSName)
	for _, a := range addons() {
		if a.Name != coreDNSName {
			continue
		}
		_, err := c.applyAddon(context.Background(), a)
		if err == nil || !strings.Contains(err.Error(), "--skip-phases addon/coredns") || !strings.Contains(err.Error(), "images.coredns") {
			t.Errorf("applying coredns without an image: %v", err)
		}
	}
}

// TestAddonPhases: the addons come last, after the kubelet's credential
// moved and the user's context was written, each can be skipped, and
// every phase says what it does and touches.
func TestAddonPhases(t *testing.T) {
	var paths []string
	for _, s := range phase.Flatten(UpPhases()) {
		paths = append(paths, s.Path)
		if s.Phase.Short == "" {
			t.Errorf("phase %s has no help", s.Path)
		}
		if strings.HasPrefix(s.Path, "addon/") && s.Phase.IO == nil {
			t.Errorf("phase %s has no IO", s.Path)
		}
	}
	i := slices.Index(paths, "addon")
	if i < 0 || !slices.Equal(paths[i:], []string{"addon", "addon/kube-proxy", "addon/coredns", "addon/wait"}) {
		t.Fatalf("phases end %v", paths[max(i, 0):])
	}
	for _, before := range []string{"bootstrap-token", "kubelet-finalize", "kubeconfig-merge", "mark-control-plane"} {
		if j := slices.Index(paths, before); j < 0 || j > i {
			t.Errorf("%s is not before addon: %v", before, paths)
		}
	}
	c := addonCluster(t)
	for _, skip := range []string{"addon/coredns", "addon/kube-proxy", "addon/wait", "addon"} {
		var plan strings.Builder
		if _, err := phase.Run(context.Background(), UpPhases(), c, phase.Options{DryRun: true, Skip: []string{skip}, PlanOut: &plan}); err != nil {
			t.Errorf("--skip-phases %s: %v", skip, err)
		}
	}
}

// TestKubeProxyRuns: kube-proxy runs only where host-network pods live
// in the node's own network namespace.
func TestKubeProxyRuns(t *testing.T) {
	_, subnet, _ := net.ParseCIDR("10.250.7.0/24")
	withNetwork := layout.NewConfig("kp")
	withNetwork.Network = layout.NewNetwork("kp", withNetwork.NodeName, subnet)
	foreignRuntime := withNetwork
	foreignRuntime.OwnRuntime = false
	for _, tt := range []struct {
		name string
		cfg  layout.Config
		runs bool
	}{
		{"node in its own network namespace", withNetwork, true},
		{"a runtime that is not devk's", foreignRuntime, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			runs, why := KubeProxyRuns(tt.cfg)
			if runs != tt.runs || (!runs && !strings.Contains(why, "iptables")) {
				t.Errorf("KubeProxyRuns = %v, %q; want %v", runs, why, tt.runs)
			}
		})
	}
}

// TestStatusesCurrent: after the node's runtime was emptied (down
// --keep-data, a reboot) the API still says the old pods are ready; a
// pod counts only once the containers it reports run.
func TestStatusesCurrent(t *testing.T) {
	readyPod := func(name, containerID string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "coredns", Ready: true, ContainerID: "containerd://" + containerID}}}}
	}
	notReady := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "starting"}}
	running := []cri.Container{{ID: "aaa"}, {ID: "bbb"}}
	leaving := notReady
	leaving.DeletionTimestamp = &metav1.Time{}
	if err := statusesCurrent([]corev1.Pod{readyPod("a", "aaa"), readyPod("b", "bbb"), leaving}, running); err != nil {
		t.Errorf("pods whose containers run: %v", err)
	}
	if err := statusesCurrent([]corev1.Pod{readyPod("a", "aaa"), notReady}, running); err == nil || !strings.Contains(err.Error(), "pod starting") {
		t.Errorf("a pod not ready while its workload's status says all are: %v", err)
	}
	if err := statusesCurrent([]corev1.Pod{readyPod("a", "aaa"), readyPod("old", "gone")}, running); err == nil || !strings.Contains(err.Error(), "pod old") {
		t.Errorf("a pod reporting a container that does not run: %v", err)
	}
}

// TestNodeImages: up's pull phase pulls what the node will run: the
// static pods' and pause images, and those of the addons the spec turns
// on and the node can run.
func TestNodeImages(t *testing.T) {
	_, subnet, _ := net.ParseCIDR("10.250.7.0/24")
	cfg := layout.NewConfig("pull")
	cfg.Network = layout.NewNetwork("pull", cfg.NodeName, subnet)
	cfg.OwnRuntime = true
	cfg.Images = map[string]string{"etcd": "r/etcd@sha256:1", "apiserver": "r/apiserver@sha256:2", "pause": "r/pause@sha256:3",
		kubeProxyName: testKubeProxyImage, coreDNSName: testCoreDNSImage}
	c := &Cluster{Config: cfg}
	if got := c.nodeImages(); len(got) != 5 {
		t.Fatalf("all on: %v", got)
	}
	off := false
	c.Config.Spec.Addons.CoreDNS = &off
	if got := c.nodeImages(); got[coreDNSName] != "" || got[kubeProxyName] == "" || len(got) != 4 {
		t.Fatalf("addons.coreDNS false: %v", got)
	}
	c.Config.OwnRuntime = false // host-network pods may share the machine's network: no kube-proxy
	if got := c.nodeImages(); got[kubeProxyName] != "" || got["apiserver"] == "" || len(got) != 3 {
		t.Fatalf("a runtime that is not devk's: %v", got)
	}
}
