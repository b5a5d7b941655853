package layout

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/devk/devk/internal/staticpod"
)

// Kubeadm's layout of a control-plane node.
const (
	KubeadmDir            = "/etc/kubernetes"
	KubeadmCRISocket      = "/run/containerd/containerd.sock"
	DefaultKubeletRootDir = "/var/lib/kubelet"
	kubeadmEtcdURL        = "https://127.0.0.1:2379"
)

// The PKI files the API server talks to etcd with, by kubeadm's names.
const (
	EtcdCAName          = "etcd/ca"
	APIServerEtcdClient = "apiserver-etcd-client"
	apiserverPodName    = "kube-apiserver"
	etcdFlagPrefix      = "etcd-"
)

// DefaultEtcdPrefix is where the API server keeps its objects in etcd
// unless its --etcd-prefix says otherwise.
const DefaultEtcdPrefix = "/registry"

// Node is where one control-plane node keeps what devk reads and
// changes: a devk cluster's node (Paths.Node) or a kubeadm node (Kubeadm).
type Node struct {
	// ManifestsDir is the kubelet's staticPodPath.
	ManifestsDir string
	// PKIDir holds the certificates (kubeadm's /etc/kubernetes/pki).
	PKIDir string
	// Kubeconfig is an admin kubeconfig for the node's API server.
	Kubeconfig string
	// InCluster, with no Kubeconfig, reaches the API server as a pod
	// does (its ServiceAccount): devk's node agent swapping on the node.
	InCluster bool
	// CRISocket is the node's CRI runtime.
	CRISocket string
	// KubeletRootDir is the kubelet's --root-dir.
	KubeletRootDir string
	// EtcdURL is etcd's client URL when the API server's manifest does not
	// name one.
	EtcdURL string
	// NetNS is the node's network namespace (a path), where its loopback
	// health endpoints (etcd's) are; empty: this machine's (a kubeadm
	// node's).
	NetNS string
	// EtcKubernetes is the directory the node's own paths call
	// /etc/kubernetes: a devk node's mount namespace binds its files
	// there, and kubeadm's manifests name the in-node paths. Empty: the
	// paths are the host's (a kubeadm node's, or devk's own manifests).
	EtcKubernetes string
}

// reachable is etcd endpoint ep as this machine reaches it: on a node
// kubeadm made in a devk cluster, one on the loopback of the node's
// network namespace (kubeadm's API server talks to its etcd on
// 127.0.0.1) is the node's etcd URL, on its address.
func (n Node) reachable(ep string) string {
	if n.EtcKubernetes == "" || n.NetNS == "" || n.EtcdURL == "" {
		return ep
	}
	if u, err := url.Parse(ep); err == nil {
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return n.EtcdURL
		}
	}
	return ep
}

// HostPath is path, as the node's manifests name it, on this machine.
func (n Node) HostPath(path string) string {
	if n.EtcKubernetes == "" {
		return path
	}
	if rel, err := filepath.Rel(KubeadmDir, path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return filepath.Join(n.EtcKubernetes, rel)
	}
	return path
}

// Kubeadm is the layout of a kubeadm node whose files are in dir (empty:
// /etc/kubernetes).
func Kubeadm(dir string) Node {
	if dir == "" {
		dir = KubeadmDir
	}
	return Node{
		ManifestsDir:   filepath.Join(dir, "manifests"),
		PKIDir:         filepath.Join(dir, "pki"),
		Kubeconfig:     filepath.Join(dir, "admin.conf"),
		CRISocket:      KubeadmCRISocket,
		KubeletRootDir: DefaultKubeletRootDir,
		EtcdURL:        kubeadmEtcdURL,
	}
}

// Etcd is how the node's API server reaches etcd.
type Etcd struct {
	Endpoints         []string
	CACert, Cert, Key string
	// Prefix is the API server's --etcd-prefix.
	Prefix string
}

// EtcdCACert is the etcd CA's certificate file.
func (n Node) EtcdCACert() string { return filepath.Join(n.PKIDir, EtcdCAName+".crt") }

// Etcd is the API server's own view of its etcd: the --etcd-* flags of
// the node's kube-apiserver manifest, each missing one filled from the
// node's PKI files (kubeadm's names) and EtcdURL.
func (n Node) Etcd() Etcd {
	flags := map[string]string{}
	if data, err := os.ReadFile(filepath.Join(n.ManifestsDir, apiserverPodName+".yaml")); err == nil {
		if pod, err := staticpod.Parse(data); err == nil {
			flags = staticpod.Flags(pod, apiserverPodName)
		}
	}
	def := Etcd{
		CACert: n.EtcdCACert(),
		Cert:   filepath.Join(n.PKIDir, APIServerEtcdClient+".crt"),
		Key:    filepath.Join(n.PKIDir, APIServerEtcdClient+".key"),
		Prefix: DefaultEtcdPrefix,
	}
	if n.EtcdURL != "" {
		def.Endpoints = []string{n.EtcdURL}
	}
	e := EtcdOf(flags, def)
	e.CACert, e.Cert, e.Key = n.HostPath(e.CACert), n.HostPath(e.Cert), n.HostPath(e.Key)
	for i, ep := range e.Endpoints {
		e.Endpoints[i] = n.reachable(ep)
	}
	e.Endpoints = slices.Compact(e.Endpoints)
	return e
}

// EtcdOf is the etcd an API server's --etcd-* flags (staticpod.Flags of
// its container) name, each one missing taken from def.
func EtcdOf(flags map[string]string, def Etcd) Etcd {
	get := func(flag, d string) string {
		if v := flags[etcdFlagPrefix+flag]; v != "" {
			return v
		}
		return d
	}
	e := Etcd{CACert: get("cafile", def.CACert), Cert: get("certfile", def.Cert), Key: get("keyfile", def.Key), Prefix: get("prefix", def.Prefix)}
	for _, ep := range strings.Split(get("servers", strings.Join(def.Endpoints, ",")), ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			e.Endpoints = append(e.Endpoints, ep)
		}
	}
	return e
}
