// Package controlplane renders etcd's and the control plane's static
// pods, as kubeadm's phases/controlplane and phases/etcd do, and checks
// their health on a node. cluster's control-plane and etcd phases write
// the manifests it renders; its wait-control-plane phase and status run
// its checks.
package controlplane

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/kwok"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/pki"
)

// imageBinDir is where the component images keep their binary.
const imageBinDir = "/usr/local/bin"

// ManifestInput is what a static pod manifest depends on.
type ManifestInput struct {
	// Config is the cluster's.
	Config layout.Config
	// Node is the control-plane node the pod runs on; Files are its files.
	Node  layout.NodeNet
	Files layout.NodeFiles
	// Image is the component's image by digest (repo@sha256:…).
	Image string
	// Annotations, when set, go on the pod (a swap's stamp, kept).
	Annotations map[string]string
	// EtcdInitialCluster, when set, is etcd's --initial-cluster for a
	// member joining a running cluster (every member name=peer URL), with
	// --initial-cluster-state=existing; empty: the first member, alone.
	EtcdInitialCluster string
}

func httpProbe(host string, port int, path string, scheme corev1.URIScheme, initial, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: host, Path: path, Port: intstr.FromInt32(int32(port)), Scheme: scheme,
		}},
		InitialDelaySeconds: initial,
		PeriodSeconds:       period,
		TimeoutSeconds:      15,
		FailureThreshold:    failures,
	}
}

// Probe timings: a liveness probe gives a component time to start and
// several chances; a readiness probe looks often.
func livenessProbe(host string, port int, path string, scheme corev1.URIScheme) *corev1.Probe {
	return httpProbe(host, port, path, scheme, 10, 10, 8)
}

func readinessProbe(host string, port int, path string, scheme corev1.URIScheme, period int32) *corev1.Probe {
	return httpProbe(host, port, path, scheme, 0, period, 3)
}

// podSpec is what differs between the control-plane static pods.
//
// Its flags are in two maps. args are devk's own: every flag whose value
// comes from the cluster's layout (addresses, ports, names, files and
// networks), which a config file's extraArgs may not change (up
// refuses); config.Owned lists them, and cluster's
// TestOwnedFlagsAreRendered keeps the two the same (through Flags).
// defaults are the other flags devk sets, which extraArgs may change. A
// flag devk does not set at all, extraArgs may add.
type podSpec struct {
	args      map[string]string
	defaults  map[string]string
	volumes   []corev1.Volume
	mounts    []corev1.VolumeMount
	liveness  *corev1.Probe
	readiness *corev1.Probe
	requests  corev1.ResourceList
	// annotations go on the pod (beside ManifestInput's).
	annotations map[string]string
}

// hostPath mounts path from the host at the same path in the container.
func (s *podSpec) hostPath(name, path string, t corev1.HostPathType) {
	s.volumes = append(s.volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}})
	s.mounts = append(s.mounts, corev1.VolumeMount{Name: name, MountPath: path})
}

func cpu(q string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
}

func url(scheme, ip string, port int) string {
	return scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(port))
}

// EtcdClientURL is where the etcd member of the control-plane node at ip
// serves its clients.
func EtcdClientURL(cfg layout.Config, ip string) string {
	return url("https", ip, cfg.Ports.EtcdClient)
}

// EtcdPeerURL is where the etcd member of the control-plane node at ip
// talks to its peers.
func EtcdPeerURL(cfg layout.Config, ip string) string {
	return url("https", ip, cfg.Ports.EtcdPeer)
}

// etcdMetricsHost is where etcd serves /metrics and /health, in plain
// HTTP: the node's own loopback, as kubeadm has it (each node is a
// network namespace, so only the node itself, its kubelet's probes
// and devk entering it reach them).
const etcdMetricsHost = "127.0.0.1"

// etcdPod is etcd serving clients and its one peer on the advertise
// address, with the etcd CA's certificates.
func etcdPod(in ManifestInput) podSpec {
	cfg, p := in.Config, in.Files
	ip, dir := in.Node.IP, p.PKI()
	client, peer := EtcdClientURL(cfg, ip), EtcdPeerURL(cfg, ip)
	etcdCA := pki.CertPath(dir, layout.EtcdCAName)
	s := podSpec{
		args: map[string]string{
			"name":                        in.Node.Name,
			"data-dir":                    p.Etcd(),
			"advertise-client-urls":       client,
			"listen-client-urls":          client,
			"initial-advertise-peer-urls": peer,
			"listen-peer-urls":            peer,
			"initial-cluster":             in.Node.Name + "=" + peer,
			"listen-metrics-urls":         url("http", etcdMetricsHost, cfg.Ports.EtcdMetrics),
			"cert-file":                   pki.CertPath(dir, "etcd/server"),
			"key-file":                    pki.KeyPath(dir, "etcd/server"),
			"trusted-ca-file":             etcdCA,
			"client-cert-auth":            "true",
			"peer-cert-file":              pki.CertPath(dir, "etcd/peer"),
			"peer-key-file":               pki.KeyPath(dir, "etcd/peer"),
			"peer-trusted-ca-file":        etcdCA,
			"peer-client-cert-auth":       "true",
			"snapshot-count":              "10000",
			// The goroutine dumps `devk stacks etcd` reads, on the
			// client URL (client certificates required).
			"enable-pprof": "true",
		},
		// /health works on every etcd 3.5 and 3.6 (/livez and /readyz came later).
		liveness:  livenessProbe(etcdMetricsHost, cfg.Ports.EtcdMetrics, "/health?exclude=NOSPACE&serializable=true", corev1.URISchemeHTTP),
		readiness: readinessProbe(etcdMetricsHost, cfg.Ports.EtcdMetrics, "/health?serializable=false", corev1.URISchemeHTTP, 2),
		requests:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi")},
	}
	if in.EtcdInitialCluster != "" {
		s.args["initial-cluster"] = in.EtcdInitialCluster
		s.args["initial-cluster-state"] = "existing"
	}
	s.hostPath("etcd-data", p.Etcd(), corev1.HostPathDirectoryOrCreate)
	s.hostPath("etcd-certs", filepath.Dir(etcdCA), corev1.HostPathDirectory)
	return s
}

// apiserverPod is the API server on the advertise address, a client of
// etcd there, with kubeadm's authentication and authorization.
func apiserverPod(in ManifestInput) podSpec {
	cfg, p := in.Config, in.Files
	ip, dir := in.Node.IP, p.PKI()
	s := podSpec{
		args: map[string]string{
			"advertise-address":                ip,
			"authorization-mode":               "Node,RBAC",
			"bind-address":                     ip,
			"secure-port":                      strconv.Itoa(cfg.Ports.APIServer),
			"client-ca-file":                   pki.CertPath(dir, pki.CAName),
			"etcd-cafile":                      pki.CertPath(dir, layout.EtcdCAName),
			"etcd-certfile":                    pki.CertPath(dir, layout.APIServerEtcdClient),
			"etcd-keyfile":                     pki.KeyPath(dir, layout.APIServerEtcdClient),
			"etcd-servers":                     cfg.NodeEtcdURL(in.Node),
			"kubelet-client-certificate":       pki.CertPath(dir, "apiserver-kubelet-client"),
			"kubelet-client-key":               pki.KeyPath(dir, "apiserver-kubelet-client"),
			"proxy-client-cert-file":           pki.CertPath(dir, "front-proxy-client"),
			"proxy-client-key-file":            pki.KeyPath(dir, "front-proxy-client"),
			"requestheader-client-ca-file":     pki.CertPath(dir, "front-proxy-ca"),
			"service-account-key-file":         filepath.Join(dir, pki.SAPubName),
			"service-account-signing-key-file": filepath.Join(dir, pki.SAKeyName),
			"service-cluster-ip-range":         cfg.ServiceCIDR,
			"tls-cert-file":                    pki.CertPath(dir, "apiserver"),
			"tls-private-key-file":             pki.KeyPath(dir, "apiserver"),
		},
		defaults: map[string]string{
			"allow-privileged":                   "true",
			"enable-admission-plugins":           "NodeRestriction",
			"enable-bootstrap-token-auth":        "true",
			"kubelet-preferred-address-types":    "InternalIP,ExternalIP,Hostname",
			"requestheader-allowed-names":        "front-proxy-client",
			"requestheader-extra-headers-prefix": "X-Remote-Extra-",
			"requestheader-group-headers":        "X-Remote-Group",
			"requestheader-username-headers":     "X-Remote-User",
			"service-account-issuer":             "https://kubernetes.default.svc." + cfg.DNSDomain,
		},
		liveness:  livenessProbe(ip, cfg.Ports.APIServer, "/livez", corev1.URISchemeHTTPS),
		readiness: readinessProbe(ip, cfg.Ports.APIServer, "/readyz", corev1.URISchemeHTTPS, 1),
		requests:  cpu("250m"),
	}
	s.hostPath("k8s-certs", dir, corev1.HostPathDirectory)
	return withAudit(in, s)
}

// controller is what differs between the two controllers of the control
// plane, the controller-manager and the scheduler: API clients through
// their own kubeconfig, serving /healthz on their secure port.
type controller struct {
	// kubeconfig names the controller's kubeconfig (controller-manager).
	kubeconfig string
	// serving names its serving certificate in the PKI dir
	// (pki.SchedulerServer): signed by the cluster CA, so that a client
	// can check it and renew can tell the new one is in use.
	serving string
	port    int
	// key is its key in the config file (config.ControllerManager).
	key string
	// args are the controller's own flags, beyond the shared ones;
	// defaults, the ones a config file may change (see podSpec).
	args, defaults map[string]string
	// pki mounts the PKI dir (the controller-manager signs with the CA).
	pki bool
	// ready adds a readiness probe on /healthz.
	ready bool
	cpu   string
}

// controllerPod is the static pod of a controller.
func controllerPod(in ManifestInput, ct controller) podSpec {
	ip, dir := in.Node.IP, in.Files.PKI()
	kc := in.Files.Kubeconfig(ct.kubeconfig)
	crt, key := pki.CertPath(dir, ct.serving), pki.KeyPath(dir, ct.serving)
	s := podSpec{
		args: map[string]string{
			"authentication-kubeconfig": kc,
			"authorization-kubeconfig":  kc,
			"kubeconfig":                kc,
			"bind-address":              ip,
			"secure-port":               strconv.Itoa(ct.port),
			"tls-cert-file":             crt,
			"tls-private-key-file":      key,
		},
		defaults: maps.Clone(Tuning(in.Config)[ct.key]),
		liveness: livenessProbe(ip, ct.port, "/healthz", corev1.URISchemeHTTPS),
		requests: cpu(ct.cpu),
	}
	maps.Copy(s.args, ct.args)
	maps.Copy(s.defaults, ct.defaults)
	if ct.pki {
		s.hostPath("k8s-certs", dir, corev1.HostPathDirectory)
	} else {
		// Its two files, not the CA's key beside them. A renewal replaces
		// the certificate by a rename and restarts the pod, whose new
		// container mounts the new file.
		s.hostPath("serving-cert", crt, corev1.HostPathFile)
		s.hostPath("serving-key", key, corev1.HostPathFile)
	}
	s.hostPath("kubeconfig", kc, corev1.HostPathFileOrCreate)
	if ct.ready {
		s.readiness = readinessProbe(ip, ct.port, "/healthz", corev1.URISchemeHTTPS, 1)
	}
	return s
}

// Tuning are the flags devk's control plane sets where kubeadm's
// defaults are slow on one machine, by the config file's component key;
// defaults, which its extraArgs change. One controller-manager and one
// scheduler per control-plane node: with more than one they elect a
// leader, as kubeadm's; alone, none (a fresh cluster's first try is
// refused until RBAC is bootstrapped, and the next comes a retry period
// later). And the controller-manager's client rate limit (below), and
// with fake nodes its node-monitor-grace-period, covering kwok's leases
// (kwok.NodeMonitorGracePeriod). A
// cluster kubeadm bootstraps gets them as kubeadm's extraArgs
// (kubeadmconfig), so that both start alike.
func Tuning(cfg layout.Config) map[string]map[string]string {
	leaderElect := strconv.FormatBool(cfg.HA())
	f := scaleFactor(cfg)
	t := map[string]map[string]string{
		config.ControllerManager: {
			"leader-elect":   leaderElect,
			"kube-api-qps":   strconv.Itoa(controllerManagerQPS * f),
			"kube-api-burst": strconv.Itoa(controllerManagerBurst * f),
		},
		config.Scheduler: {"leader-elect": leaderElect},
	}
	if g := kwok.NodeMonitorGracePeriod(cfg.Spec.FakeNodes.Total()); g > 0 {
		t[config.ControllerManager]["node-monitor-grace-period"] = g.String()
	}
	if f > 1 {
		// The scheduler binds each pod with a request: at its default
		// 50 a second, 10,000 pods would wait 200 s for it alone.
		t[config.Scheduler]["kube-api-qps"] = strconv.Itoa(schedulerQPS * f)
		t[config.Scheduler]["kube-api-burst"] = strconv.Itoa(schedulerBurst * f)
	}
	return t
}

// scaleStep: the controller-manager's and scheduler's client rate
// limits grow by their base for every scaleStep nodes, real and fake
// (kwok's), so a cluster of a thousand nodes is not throttled by its
// own controllers; below it they are the base. They follow the count
// when the manifests are written: `devk up`, and a `node add|remove
// --fake` that crosses a step (cluster/fakenodes runs up after it).
const scaleStep = 250

// scaleFactor is 1 up to scaleStep nodes, then one more per scaleStep.
func scaleFactor(cfg layout.Config) int {
	n := len(cfg.Network.Nodes) + cfg.Spec.FakeNodes.Total()
	return max(1, (n+scaleStep-1)/scaleStep)
}

// The scheduler's client rate limit's base, its own defaults.
const (
	schedulerQPS   = 50
	schedulerBurst = 100
)

// The controller-manager's client rate limit. With
// use-service-account-credentials each of its ~40 controllers gets its own
// ServiceAccount and token as it starts, a few requests each, through one
// client limited to 20 requests a second (burst 30) by default: the
// controllers then start 150 ms apart, the informers only after the last
// (replicaset), so a fresh cluster's first Deployment and DaemonSet pods
// waited ~5 s. This limit starts them all at once.
const (
	controllerManagerQPS   = 200
	controllerManagerBurst = 400
)

func controllerManagerPod(in ManifestInput) podSpec {
	cfg, dir := in.Config, in.Files.PKI()
	return controllerPod(in, controller{
		key:        config.ControllerManager,
		kubeconfig: "controller-manager",
		serving:    pki.ControllerManagerServer,
		port:       cfg.Ports.ControllerManager,
		args: map[string]string{
			"client-ca-file":                   pki.CertPath(dir, pki.CAName),
			"cluster-cidr":                     cfg.PodCIDR,
			"cluster-name":                     cfg.Name,
			"cluster-signing-cert-file":        pki.CertPath(dir, pki.CAName),
			"cluster-signing-key-file":         pki.KeyPath(dir, pki.CAName),
			"requestheader-client-ca-file":     pki.CertPath(dir, "front-proxy-ca"),
			"root-ca-file":                     pki.CertPath(dir, pki.CAName),
			"service-account-private-key-file": filepath.Join(dir, pki.SAKeyName),
			"service-cluster-ip-range":         cfg.ServiceCIDR,
		},
		defaults: map[string]string{
			"allocate-node-cidrs":             "true",
			"controllers":                     "*,bootstrapsigner,tokencleaner",
			"use-service-account-credentials": "true",
		},
		pki: true,
		cpu: "200m",
	})
}

func schedulerPod(in ManifestInput) podSpec {
	return controllerPod(in, controller{key: config.Scheduler, kubeconfig: "scheduler", serving: pki.SchedulerServer, port: in.Config.Ports.Scheduler, ready: true, cpu: "100m"})
}

// podSpecs are the control-plane static pods by name.
var podSpecs = map[string]func(ManifestInput) podSpec{
	"etcd":                    etcdPod,
	"kube-apiserver":          apiserverPod,
	"kube-controller-manager": controllerManagerPod,
	"kube-scheduler":          schedulerPod,
}

// podComponents are the static pods a config file sets flags of, with
// the key of each in the config file.
var podComponents = map[string]string{
	"kube-apiserver":          config.APIServer,
	"kube-controller-manager": config.ControllerManager,
	"kube-scheduler":          config.Scheduler,
}

// withSpec adds what the cluster's spec sets for pod name: its feature
// gates and, for the API server, the runtime config as devk's own flags;
// its extra args over the defaults.
func withSpec(name string, spec layout.Spec, s podSpec) podSpec {
	key, ok := podComponents[name]
	if !ok {
		return s
	}
	c := *config.SpecComponents(&spec)[key]
	s.args = maps.Clone(s.args)
	s.defaults = maps.Clone(s.defaults)
	if s.defaults == nil {
		s.defaults = map[string]string{}
	}
	maps.Copy(s.args, config.SpecFlags(spec, key))
	maps.Copy(s.defaults, config.WithoutOwned(key, c.ExtraArgs))
	return s
}

// flags are the pod's command-line flags: the defaults, then devk's own.
func (s podSpec) flags() map[string]string {
	out := maps.Clone(s.defaults)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, s.args)
	return out
}

// staticPod is the pod of a control-plane component: host network,
// system-node-critical, its binary from the image run with its flags.
func staticPod(name, image string, s podSpec, annotations map[string]string) *corev1.Pod {
	priority := int32(2000001000)
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   metav1.NamespaceSystem,
			Labels:      map[string]string{"component": name, "tier": "control-plane", "app.kubernetes.io/managed-by": "devk"},
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Priority:          &priority,
			Containers: []corev1.Container{{
				Name:            name,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         append([]string{imageBinDir + "/" + name}, staticpod.FlagList(s.flags())...),
				VolumeMounts:    s.mounts,
				LivenessProbe:   s.liveness,
				ReadinessProbe:  s.readiness,
				Resources:       corev1.ResourceRequirements{Requests: s.requests},
			}},
			Volumes: s.volumes,
		},
	}
}

// manifestHeader heads every manifest devk writes.
const manifestHeader = "# written by devk; `devk swap` replaces the image\n"

// Manifest renders the static pod of one control-plane component, the
// way kubeadm does, with every path the same inside and outside the
// container and every port on the advertise address.
func Manifest(name string, in ManifestInput) ([]byte, error) {
	if !strings.Contains(in.Image, "@sha256:") {
		return nil, fmt.Errorf("image %q of %s is not by digest: push it first (`devk up phase images`)", in.Image, name)
	}
	s, ok := render(name, in)
	if !ok {
		return nil, fmt.Errorf("no static pod %q: the control plane is etcd, kube-apiserver, kube-controller-manager and kube-scheduler", name)
	}
	annotations := maps.Clone(s.annotations)
	if len(in.Annotations) > 0 {
		if annotations == nil {
			annotations = map[string]string{}
		}
		maps.Copy(annotations, in.Annotations)
	}
	data, err := yaml.Marshal(staticPod(name, in.Image, s, annotations))
	if err != nil {
		return nil, err
	}
	return append([]byte(manifestHeader), data...), nil
}

// Flags are the flags Manifest gives static pod name: own, devk's own
// from the layout (config.Owned lists them), and defaults, which a
// config file's extraArgs change. Nil for a name not of the control
// plane.
func Flags(name string, in ManifestInput) (own, defaults map[string]string) {
	s, _ := render(name, in)
	return s.args, s.defaults
}

// render is what static pod name is for in, with the cluster's spec;
// false for a name not of the control plane.
func render(name string, in ManifestInput) (podSpec, bool) {
	spec, ok := podSpecs[name]
	if !ok {
		return podSpec{}, false
	}
	return withSpec(name, in.Config.Spec, spec(in)), true
}

// InstalledPod is the static pod manifest at path as the kubelet has it,
// nil when there is none (or none that parses).
func InstalledPod(path string) *corev1.Pod {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	pod, err := staticpod.Parse(data)
	if err != nil {
		return nil
	}
	return pod
}
