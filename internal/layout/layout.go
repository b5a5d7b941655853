// Package layout decides where a node's files are, once, for every
// package that reads or writes them: a devk cluster's directory under
// $DEVK_HOME (its cluster.json, PKI, kubeconfigs, static-pod manifests,
// kubelet root, private containerd, logs and pid files), a kubeadm node's
// /etc/kubernetes, and where each finds its API server and etcd. It is
// low in the import graph: cluster, swap, digest and etcdwatch all use it,
// and it uses none of them.
package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/devk/devk/internal/validname"
)

// DefaultName is the cluster name when none is given.
const DefaultName = "devk"

// ValidateName checks a cluster name: it becomes a directory, part of the
// node name, a bridge, a cgroup and a kubeconfig context.
func ValidateName(name string) error { return validname.Cluster(name) }

// HomeDir resolves devk's home: home if given, else $DEVK_HOME, else
// ~/.devk; absolute, with symlinks resolved when it exists. Mount points
// in /proc/self/mountinfo are real paths: a symlinked home left
// unresolved would make down unmount nothing and then walk into live
// bind mounts.
func HomeDir(home string) (string, error) {
	if home == "" {
		home = os.Getenv("DEVK_HOME")
	}
	if home == "" {
		uh, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no home directory to put ~/.devk in: set DEVK_HOME: %w", err)
		}
		home = filepath.Join(uh, ".devk")
	}
	home, err := filepath.Abs(home)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(home); err == nil {
		home = real
	}
	return home, nil
}

// Config is a cluster's persistent description, written to cluster.json
// on first `up` (EncodeConfig) and read by every later command
// (ParseConfig).
type Config struct {
	Name string `json:"name"`
	// Network wires the nodes: their namespaces, addresses and the
	// host's bridge.
	Network Network `json:"network"`
	// ControlPlaneEndpoint, when set, is the load balancer in front of
	// the control-plane nodes' API servers (HAProxy on the host's bridge
	// address, Network.HostIP:Ports.APIServer): every kubeconfig and
	// cluster-info name it, never a node. A cluster gets one when it is
	// made with more than one control-plane node (kubeadm's
	// controlPlaneEndpoint); empty: clients talk to node 0.
	ControlPlaneEndpoint string `json:"controlPlaneEndpoint,omitempty"`

	ServiceCIDR string `json:"serviceCIDR"`
	PodCIDR     string `json:"podCIDR"`
	DNSDomain   string `json:"dnsDomain"`
	Ports       Ports  `json:"ports"`
	// Registry is host:port the images are pulled from.
	Registry string `json:"registry"`
	// OwnRegistry says devk runs the registry (and stops it in down).
	OwnRegistry bool `json:"ownRegistry"`
	// CRISocket is the runtime's socket path; OwnRuntime says it is the
	// private containerd.
	CRISocket  string `json:"criSocket"`
	OwnRuntime bool   `json:"ownRuntime"`
	// Bridge is the CNI bridge interface the cluster's pods use.
	Bridge string `json:"bridge"`
	// CgroupRoot is the kubelet's cgroupRoot: the cluster's pods live in
	// <CgroupRoot>/kubepods, apart from any other kubelet's.
	CgroupRoot string `json:"cgroupRoot,omitempty"`
	// Images are the control-plane images by digest (component -> ref).
	Images map[string]string `json:"images,omitempty"`
	// KubeVersion is the kubelet's and apiserver's gitVersion.
	KubeVersion string `json:"kubeVersion,omitempty"`
	// KeepTaint says the node keeps the control-plane NoSchedule taint
	// (`devk up --keep-taint`); by default it has none, as in kind.
	KeepTaint bool `json:"keepTaint,omitempty"`
	// Spec is what the config file last applied (`devk up --config`) set
	// beyond the fields above.
	Spec Spec `json:"spec,omitzero"`
	// RestrictOOMScoreAdj is set when the machine cannot lower
	// oom_score_adj (no CAP_SYS_RESOURCE).
	RestrictOOMScoreAdj bool      `json:"restrictOOMScoreAdj"`
	Created             time.Time `json:"created"`
	// LastRun are the phase timings of the last up or down.
	LastRun []PhaseTiming `json:"lastRun,omitempty"`
}

// PhaseTiming is one phase of the last run, for `devk status`.
type PhaseTiming struct {
	Phase   string  `json:"phase"`
	Seconds float64 `json:"seconds"`
	Skipped string  `json:"skipped,omitempty"`
	Failed  bool    `json:"failed,omitempty"`
	// Changed says the phase changed something (its outcome).
	Changed bool `json:"changed,omitempty"`
}

// Ports are the loopback ports a cluster listens on.
type Ports struct {
	APIServer         int `json:"apiserver"`
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	EtcdMetrics       int `json:"etcdMetrics"`
	Kubelet           int `json:"kubelet"`
	KubeletHealthz    int `json:"kubeletHealthz"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
}

// DefaultPorts are kubeadm's.
var DefaultPorts = Ports{APIServer: 6443, EtcdClient: 2379, EtcdPeer: 2380, EtcdMetrics: 2381,
	Kubelet: 10250, KubeletHealthz: 10248, ControllerManager: 10257, Scheduler: 10259}

// DefaultRegistry is where the embedded registry listens.
const DefaultRegistry = "127.0.0.1:5000"

// NewConfig is the configuration of a new cluster called name.
func NewConfig(name string) Config {
	return Config{
		Name:        name,
		ServiceCIDR: DefaultServiceCIDR,
		PodCIDR:     DefaultPodCIDR,
		DNSDomain:   "cluster.local",
		Ports:       DefaultPorts,
		Registry:    DefaultRegistry,
		OwnRegistry: true,
		OwnRuntime:  true,
		Bridge:      BridgeName(name),
		CgroupRoot:  CgroupRoot(name),
		Images:      map[string]string{},
	}
}

// BridgeName is the cluster's CNI bridge: "devk-<name>" when that fits
// Linux's 15-byte interface names, else "devk_" and 10 hex digits of the
// name's SHA-256. Cluster names have no '_', so the two forms never meet,
// and two long names that share a prefix get different bridges.
func BridgeName(name string) string {
	if name == DefaultName {
		return "devk0"
	}
	if b := "devk-" + name; len(b) <= 15 {
		return b
	}
	sum := sha256.Sum256([]byte(name))
	return "devk_" + hex.EncodeToString(sum[:])[:10]
}

// CgroupRoot is the cluster's kubelet cgroupRoot.
func CgroupRoot(name string) string { return "/devk-" + name }

// Validate checks a config read from disk before anything acts on it:
// down kills what is in CgroupRoot and deletes Bridge, so a field that
// does not belong to this cluster must never get that far.
func (c Config) Validate(dirName string) error {
	bad := func(field, got, want string) error {
		return fmt.Errorf("%s is %q, %s: the file was changed or is not devk's, and devk acts on nothing it names; restore it, or remove the cluster by hand", field, got, want)
	}
	if err := ValidateName(c.Name); err != nil {
		return err
	}
	if c.Name != dirName {
		return bad("name", c.Name, "but the cluster's directory is "+dirName)
	}
	if c.Bridge != BridgeName(c.Name) {
		return bad("bridge", c.Bridge, "want "+BridgeName(c.Name))
	}
	if c.CgroupRoot != CgroupRoot(c.Name) {
		return bad("cgroupRoot", c.CgroupRoot, "want "+CgroupRoot(c.Name))
	}
	for field, cidr := range map[string]string{"serviceCIDR": c.ServiceCIDR, "podCIDR": c.PodCIDR} {
		if _, n, err := net.ParseCIDR(cidr); err != nil || n.IP.To4() == nil {
			return bad(field, cidr, "want an IPv4 CIDR")
		}
	}
	if err := c.Network.validate(c, bad); err != nil {
		return err
	}
	if c.ControlPlaneEndpoint != "" && c.ControlPlaneEndpoint != c.LoadBalancerEndpoint() {
		return bad("controlPlaneEndpoint", c.ControlPlaneEndpoint, "want the host's bridge address and the API server's port, "+c.LoadBalancerEndpoint())
	}
	if errs := validation.IsDNS1123Subdomain(c.DNSDomain); len(errs) > 0 {
		return bad("dnsDomain", c.DNSDomain, strings.Join(errs, "; "))
	}
	for field, p := range map[string]int{"apiserver": c.Ports.APIServer, "etcdClient": c.Ports.EtcdClient, "etcdPeer": c.Ports.EtcdPeer,
		"etcdMetrics": c.Ports.EtcdMetrics, "kubelet": c.Ports.Kubelet, "kubeletHealthz": c.Ports.KubeletHealthz,
		"controllerManager": c.Ports.ControllerManager, "scheduler": c.Ports.Scheduler} {
		if p < 1 || p > 65535 {
			return bad("ports."+field, strconv.Itoa(p), "want a port (1-65535)")
		}
	}
	if host, port, err := net.SplitHostPort(c.Registry); err != nil || host == "" || port == "" {
		return bad("registry", c.Registry, "want host:port")
	}
	if c.CRISocket != "" && (!filepath.IsAbs(c.CRISocket) || filepath.Clean(c.CRISocket) != c.CRISocket) {
		return bad("criSocket", c.CRISocket, "want an absolute path")
	}
	for comp, ref := range c.Images {
		if _, err := name.NewDigest(ref); err != nil {
			return bad("images."+comp, ref, "want repo@sha256:…")
		}
	}
	return nil
}

// ServiceIP is the first address of the service range (kubernetes.default).
func (c Config) ServiceIP() (net.IP, error) {
	_, n, err := net.ParseCIDR(c.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", c.ServiceCIDR, err)
	}
	ip := n.IP.To4()
	if ip == nil {
		return nil, fmt.Errorf("service CIDR %q: only IPv4 is supported", c.ServiceCIDR)
	}
	out := make(net.IP, 4)
	copy(out, ip)
	out[3]++
	return out, nil
}

// DNSIP is the tenth address of the service range, as kubeadm.
func (c Config) DNSIP() string {
	ip, err := c.ServiceIP()
	if err != nil {
		return ""
	}
	ip[3] += 9
	return ip.String()
}

// APIServerURL is the URL clients use: the control-plane endpoint when
// the cluster has one, else node 0's API server.
func (c Config) APIServerURL() string {
	if c.ControlPlaneEndpoint != "" {
		return "https://" + c.ControlPlaneEndpoint
	}
	return c.NodeAPIServerURL(c.FirstNode().IP)
}

// NodeAPIServerURL is the API server of the control-plane node at ip
// itself (what the load balancer checks and forwards to).
func (c Config) NodeAPIServerURL(ip string) string {
	return "https://" + net.JoinHostPort(ip, strconv.Itoa(c.Ports.APIServer))
}

// LoadBalancerEndpoint is the control-plane endpoint a cluster with a
// load balancer has: the host's bridge address, the API server's port.
func (c Config) LoadBalancerEndpoint() string {
	return net.JoinHostPort(c.Network.HostIP, strconv.Itoa(c.Ports.APIServer))
}

// HA says the cluster has a load balancer in front of its API servers.
func (c Config) HA() bool { return c.ControlPlaneEndpoint != "" }

// ControlPlaneNames are the names of the cluster's control-plane nodes.
func (c Config) ControlPlaneNames() []string {
	var out []string
	for _, n := range c.ControlPlanes() {
		out = append(out, n.Name)
	}
	return out
}

// ControlPlanes are the cluster's control-plane nodes, node 0 first.
func (c Config) ControlPlanes() []NodeNet {
	var out []NodeNet
	for _, n := range c.Network.Nodes {
		if n.IsControlPlane() {
			out = append(out, n)
		}
	}
	return out
}

// ReadConfig reads and validates a cluster.json.
func ReadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	cfg, err := ParseConfig(data, filepath.Base(filepath.Dir(path)))
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig reads cluster.json of the cluster directory dirName, of
// any version this devk knows (decodeConfig), and validates every field
// before anything acts on it.
func ParseConfig(data []byte, dirName string) (Config, error) {
	cfg, err := decodeConfig(data)
	if err != nil {
		return cfg, err
	}
	if err := cfg.Validate(dirName); err != nil {
		return cfg, err
	}
	if cfg.Images == nil {
		cfg.Images = map[string]string{}
	}
	return cfg, nil
}
