package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/phase"
)

// A node is a network namespace and a mount namespace. In its mount
// namespace (internal/mountns) the paths its components write whatever
// devk configures are the node's own directories (layout.Paths.NodeFS),
// so a node writes nothing to the host's and shares nothing with other
// nodes or a kubelet or containerd of the host's. containerd, the kubelet
// and every command devk runs for the node enter both (Node.Enter).

// nodeCovers are the host directories each node's mount namespace
// overlays (the upper layer on a tmpfs of the namespace's own), so that
// the mount points of nodeOwnPaths are made inside, not on the host.
var nodeCovers = []string{"/var/lib", "/var/log", "/run"}

// kubeadmCovers adds /etc to a kubeadm node's, for /etc/kubernetes.
var kubeadmCovers = []string{"/etc"}

// nodeOwnPaths are the paths that are the node's own directories inside
// its mount namespace.
var nodeOwnPaths = []string{
	// The kubelet's device-plugin socket, whatever --root-dir says.
	"/var/lib/kubelet/device-plugins",
	// The kubelet's links to container logs.
	"/var/log/containers",
	// The CNI plugins' result cache (containerd 1.6 sets libcni's
	// default, with no option to change it).
	"/var/lib/cni",
	// The shims' sockets (/run/containerd/s, fixed in containerd 1.6)
	// and runc's default state root (config.toml sets its own besides).
	"/run/containerd",
	// The pods' network namespaces, should containerd ignore
	// netns_mounts_under_state_dir.
	"/run/netns",
}

// Paths kubeadm hard-codes, which a kubeadm node's mount namespace
// binds to the node's directories where devk keeps the same files: the
// node's dir is laid out as kubeadm's /etc/kubernetes (pki/, manifests/,
// admin.conf, kubelet.conf…), its kubelet root as /var/lib/kubelet
// (config.yaml, pki/, kubeadm-flags.env) and its etcd dir as
// /var/lib/etcd, so every devk command finds kubeadm's files where it
// finds its own.
const (
	kubeadmEtcKubernetes = "/etc/kubernetes"
	kubeadmKubeletRoot   = "/var/lib/kubelet"
	kubeadmEtcd          = "/var/lib/etcd"
	// The kubelet's default podLogsDir, where devk's own kubelets are
	// told to write (NodeFiles.PodLogs).
	kubeadmPodLogs = "/var/log/pods"
	// The node's names (writeNames): kubeadm's preflight looks the node's
	// name up, and a pod with dnsPolicy Default gets the node's DNS.
	kubeadmResolvConf = "/etc/resolv.conf"
	kubeadmHosts      = "/etc/hosts"
)

// writeNames writes a kubeadm node's /etc/resolv.conf and /etc/hosts:
// the node's name at its address (kubeadm's preflight looks it up), and
// as the only DNS server devk's bridge address on the host, where
// nothing answers DNS: no lookup in the node (kubeadm's, the kubelet's,
// CoreDNS's upstream for pods) leaves the machine. It reports whether it
// changed either.
func (n Node) writeNames() (bool, error) {
	changed := false
	for _, f := range []struct{ path, data string }{
		{n.Files.ResolvConf(), fmt.Sprintf("# devk: no DNS server beyond the machine (devk's bridge on the host answers none)\nnameserver %s\n", n.Config.Network.HostIP)},
		{n.Files.Hosts(), fmt.Sprintf("127.0.0.1 localhost\n::1 localhost\n%s %s\n", n.IP(), n.Name())},
	} {
		ch, err := atomicfile.WriteIfChanged(f.path, []byte(f.data), 0o644, "")
		if err != nil {
			return changed, fmt.Errorf("node %s: %w", n.Name(), err)
		}
		changed = changed || ch
	}
	return changed, nil
}

// mountNS is the mount namespace of the node whose files are at p; a
// node kubeadm bootstraps has kubeadm's paths besides.
func mountNS(p layout.NodeFiles, kubeadm bool) mountns.Spec {
	s := mountns.Spec{File: p.MountNS(), Covers: nodeCovers}
	for _, path := range nodeOwnPaths {
		if kubeadm && strings.HasPrefix(path, kubeadmKubeletRoot+"/") {
			continue // in the kubelet root bound below
		}
		s.Binds = append(s.Binds, mountns.Bind{Path: path, Dir: p.NodeFS(path)})
	}
	if kubeadm {
		s.Covers = append(slices.Clone(nodeCovers), kubeadmCovers...)
		s.Binds = append(s.Binds,
			mountns.Bind{Path: kubeadmEtcKubernetes, Dir: p.Dir},
			mountns.Bind{Path: kubeadmKubeletRoot, Dir: p.KubeletRoot()},
			mountns.Bind{Path: kubeadmEtcd, Dir: p.Etcd()},
			mountns.Bind{Path: kubeadmPodLogs, Dir: p.PodLogs()})
	}
	s.Files = systemctlBinds(p.KubeletBinary())
	if kubeadm {
		s.Files = append(s.Files,
			mountns.FileBind{Path: kubeadmResolvConf, Source: p.ResolvConf()},
			mountns.FileBind{Path: kubeadmHosts, Source: p.Hosts()})
	}
	return s
}

// mountNS is node n's mount namespace.
func (n Node) mountNS() mountns.Spec { return mountNS(n.Files, n.Config.Spec.Kubeadm()) }

// EnsureMountNS makes node n's mount namespace unless it is there and
// complete (a phase killed while making it leaves one that is made
// again). It points the node's systemctl link at the running devk first
// and binds it over the host's systemctl inside (again when the link
// changed): the runtime and kubelet-start phases of up and node add call
// it, so each refreshes them.
func (n Node) EnsureMountNS(ctx context.Context) (bool, error) {
	linked, err := n.installSystemctl()
	if err != nil {
		return linked, err
	}
	if n.Config.Spec.Kubeadm() {
		named, err := n.writeNames()
		if err != nil {
			return linked, err
		}
		linked = linked || named
	}
	changed, err := mountns.Ensure(ctx, n.mountNS())
	changed = changed || linked
	if err != nil {
		return changed, fmt.Errorf("node %s: %w", n.Name(), err)
	}
	return changed, nil
}

// inMountNS says whether process pid runs in node n's mount
// namespace.
func (n Node) inMountNS(pid int) bool {
	dev, ino, ok := mountns.ID(n.Files.MountNS())
	return ok && mountns.In(pid, dev, ino)
}

// outsideMountNS is the error of finding node n's containerd or kubelet
// (pid) outside the node's mount namespace: started by a devk from before
// nodes had one, or in a namespace since dropped. Restarted in the node's,
// it would not find its shims and pods (their sockets and runc's state are
// where it was), so the cluster is made again.
func (n Node) outsideMountNS(what string, pid int) error {
	return fmt.Errorf("node %s's %s (pid %d) runs outside the node's mount namespace %s (started by an older devk?): make the cluster again with `devk down%s` and `devk up%s`",
		n.Name(), what, pid, n.Files.MountNS(), NameFlag(n.Config.Name), NameFlag(n.Config.Name))
}

// RemoveMounts ends node n's mount namespace (stopping what is
// left in it; the kernel then unmounts the pods' volumes and everything
// else inside) and unmounts whatever is left under the node's dir on
// the host (what a devk from before mount namespaces mounted there: the
// kubelet's root, the pods' volumes).
func (n Node) RemoveMounts(ctx context.Context) (phase.Outcome, error) {
	had, err := mountns.Remove(ctx, n.mountNS(), LeftoverGrace)
	if err != nil {
		return phase.Done, err
	}
	unmounted, err := mountns.UnmountUnder(n.Files.Dir)
	if err != nil {
		return phase.Done, err
	}
	out := phase.ChangedIf(had || unmounted > 0, "%d unmounted", unmounted)
	if had {
		out.Detail = "mount namespace ended; " + out.Detail
	}
	return out, nil
}
