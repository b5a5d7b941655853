// Package cluster brings up and tears down a throwaway single-node
// Kubernetes cluster: kubeadm's bootstrap phases made for a laptop, run by
// the phase engine. A cluster is one directory,
// $DEVK_HOME/clusters/<name>/, holding everything it owns: PKI,
// kubeconfigs, static pod manifests, the kubelet's root dir, a private
// containerd (config, socket, root and state), registry storage, logs and
// pid files. Processes are supervised by pid file, not systemd.
package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/devk/devk/internal/fileutil"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/validname"
)

// DefaultName is the cluster name when none is given.
const DefaultName = "devk"

// Options are what `devk up` and `devk down` are told.
type Options struct {
	// Name names the cluster (and its directory); default "devk".
	Name string
	// Home is $DEVK_HOME; empty means $DEVK_HOME, else ~/.devk.
	Home string
	// TreeDir is the Kubernetes tree the images and the kubelet are built
	// from; empty means the tree around the working directory.
	TreeDir string
	// CRISocket, when set, is a running CRI runtime to use instead of
	// starting the private containerd.
	CRISocket string
	// Registry, when set, is a running registry (host:port) to push to
	// instead of starting the embedded one.
	Registry string
	// ImagesFrom, when set, is a registry holding the component images
	// already (repo/kube-apiserver:TAG…); nothing is built or pushed.
	ImagesFrom string
	// ImagesTag is the tag of the images in ImagesFrom (e.g. v1.34.4).
	ImagesTag string
	// Kubeconfig is the user's kubeconfig that gets context devk-<name>;
	// empty means $KUBECONFIG, else ~/.kube/config.
	UserKubeconfig string
	// WaitTimeout bounds wait-control-plane; zero means 4 minutes.
	WaitTimeout time.Duration
	// KeepData, for down, keeps pki/ and etcd/ (and cluster.json).
	KeepData bool

	Reporter progress.Reporter
}

// ValidateName checks a cluster name: it becomes a directory, part of the
// node name, a bridge, a cgroup and a kubeconfig context.
func ValidateName(name string) error { return validname.Cluster(name) }

// HomeDir resolves DEVK_HOME.
func HomeDir(home string) (string, error) {
	if home != "" {
		return filepath.Abs(home)
	}
	if h := os.Getenv("DEVK_HOME"); h != "" {
		return filepath.Abs(h)
	}
	uh, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory to put ~/.devk in: set DEVK_HOME: %w", err)
	}
	return filepath.Join(uh, ".devk"), nil
}

// Config is a cluster's persistent description, written to cluster.json
// on first `up` and read by every later command.
type Config struct {
	Name     string `json:"name"`
	NodeName string `json:"nodeName"`
	// AdvertiseIP is where every component listens (loopback).
	AdvertiseIP string `json:"advertiseIP"`
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
		NodeName:    name + "-control-plane",
		AdvertiseIP: "127.0.0.1",
		ServiceCIDR: "10.96.0.0/16",
		PodCIDR:     "10.244.0.0/24",
		DNSDomain:   "cluster.local",
		Ports:       DefaultPorts,
		Registry:    DefaultRegistry,
		OwnRegistry: true,
		OwnRuntime:  true,
		Bridge:      bridgeName(name),
		CgroupRoot:  cgroupRootOf(name),
		Images:      map[string]string{},
	}
}

// bridgeName is the cluster's CNI bridge: "devk-<name>" when that fits
// Linux's 15-byte interface names, else "devk_" and 10 hex digits of the
// name's SHA-256. Cluster names have no '_', so the two forms never meet,
// and two long names that share a prefix get different bridges.
func bridgeName(name string) string {
	if name == DefaultName {
		return "devk0"
	}
	if b := "devk-" + name; len(b) <= 15 {
		return b
	}
	sum := sha256.Sum256([]byte(name))
	return "devk_" + hex.EncodeToString(sum[:])[:10]
}

// cgroupRootOf is the cluster's kubelet cgroupRoot.
func cgroupRootOf(name string) string { return "/devk-" + name }

// validate checks a config read from disk before anything acts on it:
// down kills what is in CgroupRoot and deletes Bridge, so a field that
// does not belong to this cluster must never get that far.
func (c Config) validate(dirName string) error {
	bad := func(field, got, want string) error {
		return fmt.Errorf("%s is %q, %s: the file was changed or is not devk's, and devk acts on nothing it names; restore it, or remove the cluster by hand", field, got, want)
	}
	if err := ValidateName(c.Name); err != nil {
		return err
	}
	if c.Name != dirName {
		return bad("name", c.Name, "but the cluster's directory is "+dirName)
	}
	if c.Bridge != bridgeName(c.Name) {
		return bad("bridge", c.Bridge, "want "+bridgeName(c.Name))
	}
	if c.CgroupRoot != cgroupRootOf(c.Name) {
		return bad("cgroupRoot", c.CgroupRoot, "want "+cgroupRootOf(c.Name))
	}
	if errs := validation.IsDNS1123Subdomain(c.NodeName); len(errs) > 0 {
		return bad("nodeName", c.NodeName, strings.Join(errs, "; "))
	}
	if ip := net.ParseIP(c.AdvertiseIP); ip == nil || ip.To4() == nil {
		return bad("advertiseIP", c.AdvertiseIP, "want an IPv4 address")
	}
	for field, cidr := range map[string]string{"serviceCIDR": c.ServiceCIDR, "podCIDR": c.PodCIDR} {
		if _, n, err := net.ParseCIDR(cidr); err != nil || n.IP.To4() == nil {
			return bad(field, cidr, "want an IPv4 CIDR")
		}
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

// APIServerURL is the URL clients use.
func (c Config) APIServerURL() string {
	return "https://" + net.JoinHostPort(c.AdvertiseIP, strconv.Itoa(c.Ports.APIServer))
}

// Paths are where a cluster keeps its things.
type Paths struct{ Dir string }

func (p Paths) join(elem ...string) string { return filepath.Join(append([]string{p.Dir}, elem...)...) }

// ConfigFile is cluster.json.
func (p Paths) ConfigFile() string { return p.join("cluster.json") }

// PKI is the certificates dir (kubeadm's /etc/kubernetes/pki).
func (p Paths) PKI() string { return p.join("pki") }

// Kubeconfig is one of admin, super-admin, controller-manager, scheduler, kubelet.
func (p Paths) Kubeconfig(name string) string { return p.join(name + ".conf") }

// Manifests is the kubelet's staticPodPath.
func (p Paths) Manifests() string { return p.join("manifests") }

// Tmp is for temp files that must not appear in Manifests (same filesystem).
func (p Paths) Tmp() string { return p.join("tmp") }

// KubeletRoot is the kubelet's --root-dir.
func (p Paths) KubeletRoot() string { return p.join("kubelet") }

// KubeletConfig is the kubelet's --config file.
func (p Paths) KubeletConfig() string { return p.join("kubelet-config.yaml") }

// KubeletBinary is the kubelet the cluster runs (a copy of the built one,
// so that swapping it is an atomic rename).
func (p Paths) KubeletBinary() string { return p.join("bin", "kubelet") }

// Etcd is etcd's data dir.
func (p Paths) Etcd() string { return p.join("etcd") }

// Containerd is the private containerd's directory.
func (p Paths) Containerd() string { return p.join("containerd") }

// ContainerdSocket is the private containerd's gRPC socket.
func (p Paths) ContainerdSocket() string { return p.join("run", "containerd.sock") }

// CNIConfDir is containerd's CNI conf_dir.
func (p Paths) CNIConfDir() string { return p.join("cni", "net.d") }

// Logs holds the supervised processes' logs and the pods' logs.
func (p Paths) Logs() string { return p.join("logs") }

// PodLogs is the kubelet's podLogsDir.
func (p Paths) PodLogs() string { return p.join("logs", "pods") }

// Run holds sockets and pid files.
func (p Paths) Run() string { return p.join("run") }

// Cluster is the state the up and down phases share.
type Cluster struct {
	Options
	Paths
	Config Config
	// Home is the resolved DEVK_HOME.
	Home string

	// results of phases, for their Detail lines
	detail map[string]string
	// existed says cluster.json was there before this run.
	existed bool
	// kubeletBuilt is the kubelet binary the images phase built.
	kubeletBuilt string
	// changed says a phase of this run changed something.
	changed bool
	// kubeletStarted is when this run started the kubelet (zero if it
	// found it running).
	kubeletStarted time.Time
}

// Open resolves the cluster's directory and reads its config if it has
// one; nothing is created.
func Open(o Options) (*Cluster, error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if err := ValidateName(o.Name); err != nil {
		return nil, err
	}
	home, err := HomeDir(o.Home)
	if err != nil {
		return nil, err
	}
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = 4 * time.Minute
	}
	// Mount points in /proc/self/mountinfo are real paths: a symlinked
	// $DEVK_HOME must be resolved, or down would unmount nothing and then
	// walk into live bind mounts.
	if real, err := filepath.EvalSymlinks(home); err == nil {
		home = real
	}
	c := &Cluster{Options: o, Home: home, Paths: Paths{Dir: filepath.Join(home, "clusters", o.Name)}, detail: map[string]string{}}
	cfg, err := readConfig(c.ConfigFile())
	switch {
	case err == nil:
		c.Config = cfg
		c.existed = true // readConfig checked that it names this directory's cluster
	case errors.Is(err, fs.ErrNotExist):
		c.Config = NewConfig(o.Name)
		c.Config.placeAmong(otherConfigs(home, o.Name))
	default:
		return nil, err
	}
	return c, nil
}

// Exists reports whether the cluster has a config (it was brought up, or
// half brought up, before).
func (c *Cluster) Exists() bool { return c.existed }

func readConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	cfg, err := parseConfig(data, filepath.Base(filepath.Dir(path)))
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// parseConfig reads cluster.json of the cluster directory dirName and
// validates every field before anything acts on it.
func parseConfig(data []byte, dirName string) (Config, error) {
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("not a devk cluster config (%v): restore it, or remove the cluster by hand", err)
	}
	if err := cfg.validate(dirName); err != nil {
		return cfg, err
	}
	if cfg.Images == nil {
		cfg.Images = map[string]string{}
	}
	return cfg, nil
}

// SaveConfig writes cluster.json atomically.
func (c *Cluster) SaveConfig() error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("make the cluster directory: %w", err)
	}
	data, err := json.MarshalIndent(c.Config, "", "  ")
	if err != nil {
		return err
	}
	if err := fileutil.WriteAtomic(c.ConfigFile(), append(data, '\n'), 0o644, ""); err != nil {
		return err
	}
	c.existed = true
	return nil
}

// writeIfChanged writes data to path atomically unless it already holds
// exactly that; it reports whether it wrote.
func writeIfChanged(path string, data []byte, perm os.FileMode, tmpDir string) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() == perm {
			return false, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	if tmpDir != "" {
		if err := os.MkdirAll(tmpDir, 0o755); err != nil {
			return false, err
		}
	}
	return true, fileutil.WriteAtomic(path, data, perm, tmpDir)
}

func (c *Cluster) setDetail(phase, format string, args ...any) {
	c.detail[phase] = fmt.Sprintf(format, args...)
}

// did is setDetail for a phase that changed something.
func (c *Cluster) did(phase, format string, args ...any) {
	c.changed = true
	c.setDetail(phase, format, args...)
}

func (c *Cluster) changedIf(b bool) {
	if b {
		c.changed = true
	}
}

// Changed reports whether the run changed anything (false: the cluster
// was up and healthy already).
func (c *Cluster) Changed() bool { return c.changed }

func detailOf(phase string) func(*Cluster) string {
	return func(c *Cluster) string { return c.detail[phase] }
}

// timeNow is time.Now, truncated to seconds for cluster.json.
func timeNow() time.Time { return time.Now().UTC().Truncate(time.Second) }

func splitHostPort(s string) (string, string, error) { return net.SplitHostPort(s) }

// otherConfigs reads the configs of the other clusters under home.
func otherConfigs(home, except string) []Config {
	files, _ := filepath.Glob(filepath.Join(home, "clusters", "*", "cluster.json"))
	var out []Config
	for _, f := range files {
		if filepath.Base(filepath.Dir(f)) == except {
			continue
		}
		if cfg, err := readConfig(f); err == nil {
			out = append(out, cfg)
		}
	}
	return out
}

// placeAmong gives a new cluster the first loopback address no other
// cluster has (127.0.0.1, then 127.0.0.2, …) and a pod subnet of its own,
// so clusters run side by side on the same ports.
func (c *Config) placeAmong(others []Config) {
	used := map[string]bool{}
	for _, o := range others {
		used[o.AdvertiseIP] = true
	}
	for n := 1; n < 255; n++ {
		ip := fmt.Sprintf("127.0.0.%d", n)
		if !used[ip] {
			c.AdvertiseIP = ip
			c.PodCIDR = fmt.Sprintf("10.244.%d.0/24", n-1)
			return
		}
	}
}
