package layout

import (
	"os"
	"path/filepath"
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
	get := func(flag, def string) string {
		if v := flags[etcdFlagPrefix+flag]; v != "" {
			return v
		}
		return def
	}
	e := Etcd{
		CACert: get("cafile", n.EtcdCACert()),
		Cert:   get("certfile", filepath.Join(n.PKIDir, APIServerEtcdClient+".crt")),
		Key:    get("keyfile", filepath.Join(n.PKIDir, APIServerEtcdClient+".key")),
		Prefix: get("prefix", DefaultEtcdPrefix),
	}
	for _, ep := range strings.Split(get("servers", n.EtcdURL), ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			e.Endpoints = append(e.Endpoints, ep)
		}
	}
	return e
}
