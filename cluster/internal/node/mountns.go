package node

import (
	"context"
	"fmt"

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
// the mount points of nodeOwnPaths are made inside, not on the host. A
// kubeadm node adds /etc (for /etc/kubernetes).
var nodeCovers = []string{"/var/lib", "/var/log", "/run"}

// nodeOwnPaths are the paths that are the node's own directories inside
// its mount namespace. A kubeadm node adds /etc/kubernetes and
// /var/lib/etcd.
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

// mountNS is the mount namespace of the node whose files are at p.
func mountNS(p layout.NodeFiles) mountns.Spec {
	s := mountns.Spec{File: p.MountNS(), Covers: nodeCovers}
	for _, path := range nodeOwnPaths {
		s.Binds = append(s.Binds, mountns.Bind{Path: path, Dir: p.NodeFS(path)})
	}
	return s
}

// EnsureMountNS makes node n's mount namespace unless it is there and
// complete (a phase killed while making it leaves one that is made
// again).
func (n Node) EnsureMountNS(ctx context.Context) (bool, error) {
	changed, err := mountns.Ensure(ctx, mountNS(n.Files))
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
	had, err := mountns.Remove(ctx, mountNS(n.Files), LeftoverGrace)
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
