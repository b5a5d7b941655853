package layout

import (
	"path/filepath"
	"strings"

	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/internal/validname"
)

// Where devk keeps files comes in three kinds, one type each: the home's
// (Home: the embedded registry and the kubectl up installs, shared by
// every cluster), a cluster's (ClusterFiles: cluster.json, the bootstrap
// token, the load balancer, and its nodes' directories) and a node's
// (NodeFiles: its PKI, manifests, kubelet, containerd, logs). A node's
// files are found through its cluster's (ClusterFiles.Node), never taken
// to be the cluster's own.

// Supervised is a directory whose processes devk supervises: their pid
// files in run/ and their logs in logs/.
type Supervised struct{ Dir string }

func (p Supervised) join(elem ...string) string {
	return filepath.Join(append([]string{p.Dir}, elem...)...)
}

// Run holds sockets and pid files.
func (p Supervised) Run() string { return p.join("run") }

// Logs holds the supervised processes' logs (and a node's pods' logs).
func (p Supervised) Logs() string { return p.join("logs") }

// PIDFile is where a supervised process's pid and start time are recorded.
func (p Supervised) PIDFile(name string) string { return filepath.Join(p.Run(), name+".pid") }

// LogFile is where a supervised process's output goes.
func (p Supervised) LogFile(name string) string { return filepath.Join(p.Logs(), name+".log") }

// Procs is where the processes devk supervises for this directory keep
// their pid files (run/<name>.pid) and logs (logs/<name>.log).
func (p Supervised) Procs() supervise.Dir {
	return supervise.Dir{PIDFile: p.PIDFile, LogFile: p.LogFile, Work: p.Dir}
}

// Home is devk's home ($DEVK_HOME, else ~/.devk): what its clusters
// share. Its supervised process is the embedded registry.
type Home struct{ Supervised }

// HomeFiles is the home at dir, resolved (HomeDir).
func HomeFiles(dir string) Home { return Home{Supervised{Dir: dir}} }

// Cluster is where the cluster name keeps its files.
func (h Home) Cluster(name string) ClusterFiles {
	return ClusterFiles{Dir: h.join("clusters", name)}
}

// Kubectl is the kubectl `devk up` installs for the user, built from the
// cluster's tree.
func (h Home) Kubectl() string { return h.join("bin", "kubectl") }

// RegistryCredentialFile is the name of the embedded registry's write
// credential in the home.
const RegistryCredentialFile = "registry-credential"

// RegistryCredential is the embedded registry's write credential: a
// secret only root (the running user) may read, which `devk registry
// serve` requires of every push and devk's own clients send.
func (h Home) RegistryCredential() string { return h.join(RegistryCredentialFile) }

// RegistryRoot is the embedded registry's storage (blobs and manifests),
// shared by every cluster in the home.
func (h Home) RegistryRoot() string { return h.join("registry") }

// DebianCache is where the Debian packages, layers and apt resolutions of
// image bases (kube-proxy's iptables base) are cached, shared by every
// tree and cluster of the home: the base depends only on the machine's apt.
func (h Home) DebianCache() string { return h.join("cache", "debian") }

// PauseCache is where the pause program is built, by its source's and
// Go's version, for every cluster of the home.
func (h Home) PauseCache() string { return h.join("cache", "pause") }

// E2EImages is what `devk e2e images` pushed to registry (host:port),
// which `devk e2e` pins: in the home, since the home's clusters share
// their registry.
func (h Home) E2EImages(registry string) string {
	return h.join("e2e-images", strings.NewReplacer("/", "_", ":", "_").Replace(registry)+".json")
}

// AgentCache holds the layer of devk's node agent image (its binary's).
func (h Home) AgentCache() string { return h.join("cache", "agent") }

// ClusterFiles are where one cluster keeps its files,
// <home>/clusters/<name>/. Node 0, the node `devk up` makes, keeps its
// own files in this directory too (FirstNode), as before clusters had
// more nodes, so that an existing cluster keeps its paths; every other
// node in nodes/<name>/.
type ClusterFiles struct{ Dir string }

func (p ClusterFiles) join(elem ...string) string {
	return filepath.Join(append([]string{p.Dir}, elem...)...)
}

// ConfigFile is cluster.json.
func (p ClusterFiles) ConfigFile() string { return p.join("cluster.json") }

// NodesDir holds the directories of the cluster's nodes other than node 0.
func (p ClusterFiles) NodesDir() string { return p.join("nodes") }

// FirstNode is where node 0 keeps its files.
func (p ClusterFiles) FirstNode() NodeFiles { return NodeFiles{Supervised{Dir: p.Dir}} }

// Node is where node of c keeps its files: FirstNode for node 0,
// nodes/<node>/ for any other. A node c does not have is an error naming
// those it has.
func (p ClusterFiles) Node(c Config, node string) (NodeFiles, error) {
	_, i, err := c.FindNode(node)
	if err != nil {
		return NodeFiles{}, err
	}
	if i == 0 {
		return p.FirstNode(), nil
	}
	dir, err := validname.PathIn(p.NodesDir(), node)
	if err != nil {
		return NodeFiles{}, err
	}
	return NodeFiles{Supervised{Dir: dir}}, nil
}

// BootstrapToken is the file holding the cluster's bootstrap token
// ("<id>.<secret>", 0600) that joining nodes authenticate and discover
// the cluster with.
func (p ClusterFiles) BootstrapToken() string { return p.join("bootstrap-token") }

// E2EImages is where devk before Home.E2EImages recorded the test images
// `devk e2e images` pushed for the cluster: read when the home has no
// record of the cluster's registry.
func (p ClusterFiles) E2EImages() string { return p.join("e2e-images.json") }

// Daemons is where the cluster's own processes on the host (its registry
// forwarders) keep their pid files and logs: run/ and logs/ of its
// directory, beside node 0's.
func (p ClusterFiles) Daemons() Supervised { return Supervised{Dir: p.Dir} }

// LoadBalancer is where an HA cluster keeps its HAProxy: haproxy.cfg,
// run/ (pid file, stats socket, saved server states) and logs/.
func (p ClusterFiles) LoadBalancer() LoadBalancerFiles {
	return LoadBalancerFiles{Supervised{Dir: p.join("haproxy")}}
}

// LoadBalancerFiles are an HA cluster's HAProxy's files.
type LoadBalancerFiles struct{ Supervised }

// Config is haproxy.cfg.
func (p LoadBalancerFiles) Config() string { return p.join("haproxy.cfg") }

// StatsSocket is HAProxy's runtime API socket (0600).
func (p LoadBalancerFiles) StatsSocket() string { return filepath.Join(p.Run(), "admin.sock") }

// StateFile is where the servers' states are saved across a reload.
func (p LoadBalancerFiles) StateFile() string { return filepath.Join(p.Run(), "servers.state") }

// Chroot is the empty, root-owned directory HAProxy's workers are
// chrooted in.
func (p LoadBalancerFiles) Chroot() string { return p.join("empty") }

// NodeFiles are where one node keeps its files: its PKI, kubeconfigs,
// static pod manifests, kubelet, containerd, CNI, logs and pid files, and
// its mount namespace (ClusterFiles.Node finds them).
type NodeFiles struct{ Supervised }

// PKI is the certificates dir (kubeadm's /etc/kubernetes/pki).
func (p NodeFiles) PKI() string { return p.join("pki") }

// Kubeconfig is one of admin, super-admin, controller-manager, scheduler, kubelet.
func (p NodeFiles) Kubeconfig(name string) string { return p.join(name + ".conf") }

// Manifests is the kubelet's staticPodPath.
func (p NodeFiles) Manifests() string { return p.join("manifests") }

// ManifestPath is a static pod's manifest file.
func (p NodeFiles) ManifestPath(podName string) string {
	return filepath.Join(p.Manifests(), podName+".yaml")
}

// Tmp is for temp files that must not appear in Manifests (same filesystem).
func (p NodeFiles) Tmp() string { return p.join("tmp") }

// KubeletRoot is the kubelet's --root-dir.
func (p NodeFiles) KubeletRoot() string { return p.join("kubelet") }

// KubeletPKI is the kubelet's --cert-dir: its rotating client
// certificate store.
func (p NodeFiles) KubeletPKI() string { return filepath.Join(p.KubeletRoot(), "pki") }

// KubeletClientCurrent is the kubelet's current client certificate and
// key (kubelet-client-current.pem in KubeletPKI, a symlink to the latest
// kubelet-client-<time>.pem), which kubelet.conf names once finalized.
func (p NodeFiles) KubeletClientCurrent() string {
	return filepath.Join(p.KubeletPKI(), "kubelet-client-current.pem")
}

// KubeletConfig is the kubelet's --config file.
func (p NodeFiles) KubeletConfig() string { return p.join("kubelet-config.yaml") }

// KubeadmBinary is the tree's kubeadm on a node kubeadm bootstraps,
// beside its kubelet (first on the PATH of a command run in the node).
func (p NodeFiles) KubeadmBinary() string { return p.join("bin", "kubeadm") }

// KubeadmConfig is the config devk writes for kubeadm init or join on
// the node: /etc/kubernetes/kubeadm.yaml inside it.
func (p NodeFiles) KubeadmConfig() string { return p.join("kubeadm.yaml") }

// KubeadmDone records that kubeadm init or join finished on the node
// (its command and time): without it a node's kubeadm files are the
// leftovers of one that failed or was killed, which `kubeadm reset`
// clears before the next try.
func (p NodeFiles) KubeadmDone() string { return p.join("kubeadm.done") }

// ResolvConf and Hosts are a kubeadm node's /etc/resolv.conf and
// /etc/hosts (bound over the host's inside the node).
func (p NodeFiles) ResolvConf() string { return p.join("resolv.conf") }
func (p NodeFiles) Hosts() string      { return p.join("hosts") }

// KubeletBinary is the kubelet the node runs (a copy of the built one,
// so that swapping it is an atomic rename).
func (p NodeFiles) KubeletBinary() string { return p.join("bin", "kubelet") }

// KubeletDebugger records that the node's kubelet runs under the
// debugger (`devk debug kubelet`, delve.Debugged); none: on its own.
func (p NodeFiles) KubeletDebugger() string { return p.join("kubelet-debugger.json") }

// AuditPolicy is the API server's --audit-policy-file: devk's policy,
// or a copy of the config file's audit.policyFile.
func (p NodeFiles) AuditPolicy() string { return p.join("audit-policy.yaml") }

// AuditLogDir holds the API server's audit log and its rotated backups
// (audit-<time>.log beside it), readable from the host.
func (p NodeFiles) AuditLogDir() string { return filepath.Join(p.Logs(), "audit") }

// AuditLog is the API server's --audit-log-path.
func (p NodeFiles) AuditLog() string { return filepath.Join(p.AuditLogDir(), "audit.log") }

// Etcd is etcd's data dir.
func (p NodeFiles) Etcd() string { return p.join("etcd") }

// Containerd is the private containerd's directory.
func (p NodeFiles) Containerd() string { return p.join("containerd") }

// ContainerdConfig is the private containerd's config.toml.
func (p NodeFiles) ContainerdConfig() string { return filepath.Join(p.Containerd(), "config.toml") }

// ContainerdRoot is the private containerd's root (images, snapshots).
func (p NodeFiles) ContainerdRoot() string { return filepath.Join(p.Containerd(), "root") }

// ContainerdState is the private containerd's state dir (its runtime
// state, runc's, and the pods' network namespaces).
func (p NodeFiles) ContainerdState() string { return filepath.Join(p.Containerd(), "state") }

// ContainerdSocket is the private containerd's gRPC socket.
func (p NodeFiles) ContainerdSocket() string { return filepath.Join(p.Run(), "containerd.sock") }

// CNIConfDir is containerd's CNI conf_dir.
func (p NodeFiles) CNIConfDir() string { return p.join("cni", "net.d") }

// CNINetworks is the host-local IPAM plugin's data dir.
func (p NodeFiles) CNINetworks() string { return p.join("cni", "networks") }

// PodLogs is the kubelet's podLogsDir.
func (p NodeFiles) PodLogs() string { return filepath.Join(p.Logs(), "pods") }

// MountNS is where the node's mount namespace is kept (a bind mount of
// its /proc/<pid>/ns/mnt, as `ip netns` keeps network namespaces): what
// `nsenter --mount=` enters. Its directory, mntns/, is a private mount on
// the host (a mount namespace can be bound only onto a mount that does
// not propagate) and holds the namespace's own tmpfs.
func (p NodeFiles) MountNS() string { return p.join("mntns", "mnt") }

// NodeFS is the node's own directory for a path the components hard-code
// (/var/lib/kubelet/device-plugins, /var/log/containers, /var/lib/cni,
// /run/containerd, /run/netns): inside the node's mount namespace that
// path is this directory, so the host's is never written.
func (p NodeFiles) NodeFS(path string) string { return p.join("fs", path) }

// kubeadmEtc is the node's directory when kubeadm bootstraps c (its
// manifests name the paths inside the node), else "".
func (p NodeFiles) kubeadmEtc(c Config) string {
	if !c.Spec.Kubeadm() {
		return ""
	}
	return p.join()
}

// ControlPlane is control-plane node n of the devk cluster c, laid out as
// Node describes, with these files.
func (p NodeFiles) ControlPlane(c Config, n NodeNet) Node {
	return Node{
		ManifestsDir:   p.Manifests(),
		PKIDir:         p.PKI(),
		Kubeconfig:     p.Kubeconfig("admin"),
		CRISocket:      c.NodeCRISocket(n, p),
		KubeletRootDir: p.KubeletRoot(),
		EtcdURL:        c.NodeEtcdURL(n),
		NetNS:          n.NetNSPath(),
		EtcKubernetes:  p.kubeadmEtc(c),
	}
}
