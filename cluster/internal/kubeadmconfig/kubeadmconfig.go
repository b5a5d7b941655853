// Package kubeadmconfig writes the config `kubeadm init` and `kubeadm
// join` read when kubeadm bootstraps a devk cluster (bootstrapper:
// kubeadm): kubeadm's v1beta4 InitConfiguration, ClusterConfiguration
// and JoinConfiguration, and the KubeletConfiguration and
// KubeProxyConfiguration of devk's nodes (kubeletconfig.Shared,
// addons.NodeKubeProxyConfiguration), from the cluster's networks,
// nodes and config file spec; then the config file's
// kubeadmConfigPatches and kubeadmConfigPatchesJSON6902 applied to
// them, as kind applies its own (patch.go). Paths are kubeadm's
// defaults: each node's mount namespace puts its own directories there.
package kubeadmconfig

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/validname"
)

const (
	// etcdDataDir is kubeadm's local etcd's data directory, its default.
	etcdDataDir = "/var/lib/etcd"
	// criSocketScheme makes a socket path the endpoint kubeadm takes.
	criSocketScheme = "unix://"
	// loopback is an address the API server's certificate carries
	// besides kubeadm's: what a node's own clients dial.
	loopback = "127.0.0.1"
	// keyAlgorithm is the keys' and certificates' algorithm, devk's own
	// PKI's (ECDSA P-256, pki) as kubeadm names it: kubeadm's default,
	// RSA-2048, takes ~60 ms a key where P-256 takes well under one.
	keyAlgorithm = "ECDSA-P256"
	// documentSeparator separates a config's YAML documents.
	documentSeparator = "---\n"
)

var (
	// certificateKey is upload-certs' key: hex of an AES-256 key.
	certificateKey = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// caCertHash is a join's CA pin: kubeadm's sha256:<hex>.
	caCertHash = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// Node is the node kubeadm runs on.
type Node struct {
	// Name is the Node's name (nodeRegistration.name).
	Name string
	// IP is the node's address: the kubelet's node IP and a control-plane
	// node's advertise address.
	IP           string
	ControlPlane bool
	// CRISocket is the absolute path of the node's containerd socket.
	CRISocket string
	// CgroupRoot is the kubelet's cgroup root ("": the host's).
	CgroupRoot string
}

// Input is what a cluster's kubeadm config depends on.
type Input struct {
	ClusterName string
	// KubernetesVersion is the tree's build version, as kubeadm's
	// --kubernetes-version takes it (v1.35.0-alpha.1.123+0123abcd).
	KubernetesVersion string
	// ImageRepository is where kubeadm's images are ("": kubeadm's
	// registry.k8s.io).
	ImageRepository string
	// ControlPlaneEndpoint is host:port of the API server: HAProxy's with
	// several control-plane nodes, else node 0's.
	ControlPlaneEndpoint string
	// APIServerPort is where each API server listens (0:
	// layout.DefaultPorts.APIServer).
	APIServerPort int
	PodSubnet     string
	ServiceSubnet string
	// DNSDomain is the Services' domain ("": kubeadm's cluster.local).
	DNSDomain string
	// CertSANs are more names and addresses for the API servers'
	// certificates (HAProxy's), besides the node's own, loopback and
	// kubeadm's own.
	CertSANs []string
	// Defaults are flags by the config file's component key
	// (config.ControllerManager) that the spec's extraArgs change:
	// devk's own control plane's (controlplane.Tuning).
	Defaults map[string]map[string]string
	// Spec is the config file's: feature gates, runtime config, each
	// component's extra args, the addons, the certificates' lifetime and
	// the patches.
	Spec layout.Spec
	// RemoveControlPlaneTaint registers control-plane nodes without
	// kubeadm's NoSchedule taint (controlPlaneTaint: remove); false
	// leaves kubeadm's default.
	RemoveControlPlaneTaint bool
	// IgnorePreflightErrors are the checks of kubeadm's preflight whose
	// failure is a warning on devk's nodes.
	IgnorePreflightErrors []string
	// Token is the bootstrap token, id.secret: init creates it (""
	// there: kubeadm makes one), a join authenticates with it.
	Token string
	// CertificateKey is upload-certs' key (hex), which init encrypts the
	// shared certificates with and a control-plane join decrypts them by.
	CertificateKey string
	// CACertHashes pin the cluster CA for a join: sha256:<hex>.
	CACertHashes []string
	// ResolvConf is the kubelet's resolvConf, the DNS of pods with
	// dnsPolicy Default (kubeadm's CoreDNS forwards to it) and a path
	// inside the node ("": Shared's, the host's).
	ResolvConf string
}

// Paths inside a node (its mount namespace makes its dir kubeadm's
// /etc/kubernetes, and binds devk's resolv.conf over the host's): where
// devk writes the node's kubeadm config, and the resolv.conf the kubelet
// gives pods with dnsPolicy Default.
const (
	InNode = "/etc/kubernetes/kubeadm.yaml"
	// UploadCertsInNode is node 0's init config with a control-plane
	// join's certificate key, for `kubeadm init phase upload-certs`
	// (which takes the key from --config, not beside it); devk removes
	// it once the certificates are uploaded.
	UploadCertsInNode = "/etc/kubernetes/kubeadm-upload-certs.yaml"
	resolvConfInNode  = "/etc/resolv.conf"
)

// IgnoredChecks are the checks of kubeadm's preflight that fail on a
// devk node for reasons of the machine, not of the cluster: the host's
// kernel config and cgroups (SystemVerification reads the host's) and
// swap, which devk's kubelets tolerate (failSwapOn false). The node's
// name resolves in the node (its /etc/hosts).
var IgnoredChecks = []string{"SystemVerification", "Swap"}

// ForCluster is the input of devk cluster cfg's kubeadm config, but the
// token, certificate key and pins, which a join adds.
func ForCluster(cfg layout.Config) Input {
	in := Input{
		ClusterName:             cfg.Name,
		KubernetesVersion:       cfg.KubeVersion,
		ImageRepository:         cfg.Registry,
		ControlPlaneEndpoint:    strings.TrimPrefix(cfg.APIServerURL(), "https://"),
		APIServerPort:           cfg.Ports.APIServer,
		PodSubnet:               cfg.PodCIDR,
		ServiceSubnet:           cfg.ServiceCIDR,
		DNSDomain:               cfg.DNSDomain,
		Spec:                    cfg.Spec,
		Defaults:                controlplane.Tuning(cfg),
		RemoveControlPlaneTaint: !cfg.KeepTaint,
		IgnorePreflightErrors:   IgnoredChecks,
		ResolvConf:              resolvConfInNode,
	}
	// Not every control-plane node's address: kubeadm adds each node's
	// own when it makes its certificate, and a list that grew as nodes
	// joined would rewrite node 0's config (already used) on every up.
	if cfg.HA() {
		in.CertSANs = append(in.CertSANs, cfg.Network.HostIP)
	}
	return in
}

// Preflight renders node n's init config for a tree at version (when in
// has none; "" skips: the images come from elsewhere) before anything is
// made, so that a patch of the config file that selects no document or
// does not apply is refused by preflight. It returns the config, for
// the tree's kubeadm to validate (nil when skipped).
func Preflight(in Input, n Node, version string) ([]byte, error) {
	in.KubernetesVersion = cmp.Or(in.KubernetesVersion, version)
	if in.KubernetesVersion == "" {
		return nil, nil
	}
	return Init(in, n)
}

// Init is the config of `kubeadm init --config` on control-plane node n:
// InitConfiguration, ClusterConfiguration, KubeletConfiguration and
// KubeProxyConfiguration, patched, as YAML documents.
func Init(in Input, n Node) ([]byte, error) {
	if err := in.check(n, false); err != nil {
		return nil, err
	}
	if !n.ControlPlane {
		return nil, fmt.Errorf("kubeadm init makes a control-plane node, and node %s is a worker: init the first control-plane node, join the others", n.Name)
	}
	initCfg := initConfiguration{
		TypeMeta:         meta(InitConfigurationKind),
		NodeRegistration: in.registration(n),
		LocalAPIEndpoint: in.endpoint(n),
		CertificateKey:   in.CertificateKey,
	}
	if in.Token != "" {
		initCfg.BootstrapTokens = []bootstrapToken{{Token: in.Token, TTL: metav1.Duration{Duration: bootstrap.TokenTTL}}}
	}
	kubelet := kubeletconfig.Shared(in.Spec)
	kubelet["apiVersion"], kubelet["kind"] = kubeletconfig.APIVersion, kubeletconfig.Kind
	if in.ResolvConf != "" {
		kubelet["resolvConf"] = in.ResolvConf
	}
	docs, err := documents(initCfg, in.cluster(n), kubelet)
	if err != nil {
		return nil, err
	}
	proxy, err := setFields(addons.NodeKubeProxyConfiguration(in.PodSubnet, in.Spec), kubeproxyconfig.KubeProxyConfiguration{})
	if err != nil {
		return nil, err
	}
	return render(in.Spec, append(docs, proxy))
}

// Join is the config of `kubeadm join --config` on node n: its
// JoinConfiguration (a control-plane node's with its API endpoint and
// the certificate key), patched.
func Join(in Input, n Node) ([]byte, error) {
	if err := in.check(n, true); err != nil {
		return nil, err
	}
	join := joinConfiguration{
		TypeMeta:         meta(JoinConfigurationKind),
		NodeRegistration: in.registration(n),
		Discovery: discovery{BootstrapToken: bootstrapTokenDiscovery{
			Token: in.Token, APIServerEndpoint: in.ControlPlaneEndpoint, CACertHashes: in.CACertHashes}},
	}
	if n.ControlPlane {
		join.ControlPlane = &joinControlPlane{LocalAPIEndpoint: in.endpoint(n), CertificateKey: in.CertificateKey}
	}
	docs, err := documents(join)
	if err != nil {
		return nil, err
	}
	return render(in.Spec, docs)
}

func meta(kind string) metav1.TypeMeta { return metav1.TypeMeta{APIVersion: APIVersion, Kind: kind} }

// registration is node n's nodeRegistration: its name and runtime, its
// kubelet's flags (the spec's kubelet.extraArgs but the flags devk owns,
// and the node's address and cgroup root), its taints.
func (in Input) registration(n Node) nodeRegistration {
	flags := config.WithoutOwned(config.Kubelet, in.Spec.Kubelet.ExtraArgs)
	if flags == nil {
		flags = map[string]string{}
	}
	flags["node-ip"] = n.IP
	if n.CgroupRoot != "" {
		flags["cgroup-root"] = n.CgroupRoot
	}
	r := nodeRegistration{
		Name:                  n.Name,
		CRISocket:             criSocketScheme + n.CRISocket,
		KubeletExtraArgs:      args(flags),
		IgnorePreflightErrors: slices.Clone(in.IgnorePreflightErrors),
		ImagePullSerial:       ptr.To(false),
	}
	if n.ControlPlane && in.RemoveControlPlaneTaint {
		r.Taints = []corev1.Taint{}
	}
	return r
}

// endpoint is where control-plane node n's API server listens.
func (in Input) endpoint(n Node) apiEndpoint {
	return apiEndpoint{AdvertiseAddress: n.IP, BindPort: int32(in.apiServerPort())}
}

func (in Input) apiServerPort() int {
	if in.APIServerPort == 0 {
		return layout.DefaultPorts.APIServer
	}
	return in.APIServerPort
}

// cluster is the ClusterConfiguration: the cluster's names, networks
// and endpoint; each control-plane component's flags from the spec
// (feature gates, runtime config, extraArgs but the flags devk owns);
// the addons it turns off; the certificates' lifetime.
func (in Input) cluster(n Node) clusterConfiguration {
	component := func(key string) controlPlaneComponent {
		flags := maps.Clone(in.Defaults[key])
		if flags == nil {
			flags = map[string]string{}
		}
		maps.Copy(flags, config.WithoutOwned(key, config.SpecComponents(&in.Spec)[key].ExtraArgs))
		maps.Copy(flags, config.SpecFlags(in.Spec, key))
		return controlPlaneComponent{ExtraArgs: args(flags)}
	}
	sans := append([]string{loopback, n.IP}, in.CertSANs...)
	slices.Sort(sans)
	return clusterConfiguration{
		TypeMeta:                  meta(ClusterConfigurationKind),
		ClusterName:               in.ClusterName,
		KubernetesVersion:         in.KubernetesVersion,
		ImageRepository:           in.ImageRepository,
		ControlPlaneEndpoint:      in.ControlPlaneEndpoint,
		Networking:                networking{ServiceSubnet: in.ServiceSubnet, PodSubnet: in.PodSubnet, DNSDomain: in.DNSDomain},
		Etcd:                      etcd{Local: localEtcd{DataDir: etcdDataDir}},
		APIServer:                 apiServer{controlPlaneComponent: component(config.APIServer), CertSANs: slices.Compact(sans)},
		ControllerManager:         component(config.ControllerManager),
		Scheduler:                 component(config.Scheduler),
		DNS:                       addon{Disabled: !layout.On(in.Spec.Addons.CoreDNS)},
		Proxy:                     addon{Disabled: !layout.On(in.Spec.Addons.KubeProxy)},
		CertificateValidityPeriod: in.Spec.CertValidity,
		EncryptionAlgorithm:       keyAlgorithm,
	}
}

// args are flags as v1beta4's extraArgs, sorted by name.
func args(flags map[string]string) []arg {
	var out []arg
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		out = append(out, arg{Name: name, Value: flags[name]})
	}
	return out
}

// documents are the config's documents as JSON, in order.
func documents(objs ...any) ([]document, error) {
	var out []document
	for _, o := range objs {
		j, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("encode the kubeadm config: %w", err)
		}
		d, err := newDocument(j)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// setFields is obj's document with only the fields obj sets: those
// whose value differs from the zero object's (a pointer to zero is
// set), so that kubeadm's defaults fill in the rest, as for the
// documents devk writes from its own types.
func setFields(obj, zero any) (document, error) {
	var m, z map[string]any
	for _, o := range []struct {
		v   any
		out *map[string]any
	}{{obj, &m}, {zero, &z}} {
		j, err := json.Marshal(o.v)
		if err != nil {
			return document{}, fmt.Errorf("encode the kubeadm config: %w", err)
		}
		if err := json.Unmarshal(j, o.out); err != nil {
			return document{}, fmt.Errorf("encode the kubeadm config: %w", err)
		}
	}
	dropZero(m, z)
	docs, err := documents(m)
	if err != nil {
		return document{}, err
	}
	return docs[0], nil
}

// dropZero deletes from m what equals zero's, at every depth, and the
// mappings it leaves empty.
func dropZero(m, zero map[string]any) {
	for k, v := range m {
		zv, ok := zero[k]
		if !ok {
			continue
		}
		sub, isMap := v.(map[string]any)
		zsub, zIsMap := zv.(map[string]any)
		if isMap && zIsMap {
			dropZero(sub, zsub)
			if len(sub) == 0 {
				delete(m, k)
			}
			continue
		}
		if reflect.DeepEqual(v, zv) {
			delete(m, k)
		}
	}
}

// render applies spec's patches to docs and writes them as YAML
// documents, each's keys sorted.
func render(spec layout.Spec, docs []document) ([]byte, error) {
	if err := applyPatches(spec, docs); err != nil {
		return nil, err
	}
	var out []byte
	for i, d := range docs {
		y, err := yaml.JSONToYAML(d.json)
		if err != nil {
			return nil, fmt.Errorf("write the kubeadm config's %s: %w", d.gvk.Kind, err)
		}
		if i > 0 {
			out = append(out, documentSeparator...)
		}
		out = append(out, y...)
	}
	return out, nil
}

// check refuses input kubeadm would refuse, or that would make a
// config for another cluster or node, saying what to give instead.
func (in Input) check(n Node, join bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := validname.Node(n.Name); err != nil {
		bad("the node's name: %w", err)
	}
	if ip := net.ParseIP(n.IP); ip == nil || ip.To4() == nil {
		bad("node %s's address %q is not an IPv4 address", n.Name, n.IP)
	}
	if !filepath.IsAbs(n.CRISocket) {
		bad("node %s's CRI socket %q is not an absolute path: give its containerd's socket", n.Name, n.CRISocket)
	}
	if host, port, err := net.SplitHostPort(in.ControlPlaneEndpoint); err != nil || host == "" || !validPort(port) {
		bad("the control-plane endpoint %q is not host:port: give HAProxy's address with several control-plane nodes, else node 0's with the API server's port", in.ControlPlaneEndpoint)
	}
	if p := in.apiServerPort(); p < 1 || p > 65535 {
		bad("the API server's port %d is not a port", p)
	}
	if in.Token != "" || join {
		if !bootstraputil.IsValidBootstrapToken(in.Token) {
			bad("the bootstrap token %q is not one: want [a-z0-9]{6}.[a-z0-9]{16} (bootstrap.NewToken makes one)", in.Token)
		}
	}
	if in.CertificateKey != "" && !certificateKey.MatchString(in.CertificateKey) {
		bad("the certificate key is not 64 hex digits (an AES-256 key, as kubeadm certs certificate-key prints)")
	}
	if join {
		if len(in.CACertHashes) == 0 {
			bad("a join needs the cluster CA's hash (sha256:<hex> of its public key) to trust the API server")
		}
		for _, h := range in.CACertHashes {
			if !caCertHash.MatchString(h) {
				bad("the CA hash %q is not sha256:<64 hex digits>", h)
			}
		}
		return in.checked(n, errs)
	}
	if v, err := version.ParseSemantic(in.KubernetesVersion); err != nil || "v"+v.String() != in.KubernetesVersion {
		bad("the Kubernetes version %q is not one kubeadm takes: give the tree's build version, e.g. v1.34.4 or v1.35.0-alpha.1.123+0123456789abcd", in.KubernetesVersion)
	}
	if in.ClusterName == "" {
		bad("the cluster has no name")
	}
	for _, s := range []struct{ what, cidr string }{{"pod", in.PodSubnet}, {"Service", in.ServiceSubnet}} {
		if _, _, err := net.ParseCIDR(s.cidr); err != nil {
			bad("the %s subnet %q is not a CIDR: give the cluster's", s.what, s.cidr)
		}
	}
	return in.checked(n, errs)
}

// checked is check's problems as one error naming the node.
func (in Input) checked(n Node, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("kubeadm config of node %s: %w", n.Name, errors.Join(errs...))
}

func validPort(s string) bool {
	p, err := strconv.Atoi(s)
	return err == nil && p > 0 && p <= 65535
}
