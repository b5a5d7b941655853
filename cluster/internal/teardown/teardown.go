// Package teardown is what down and node remove do on the machine to a
// node (kubeadm's reset, cleanup-node): stop its kubelet and containerd
// (and the shims it left), remove its pods through CRI and its cgroups,
// and remove its directory once nothing runs in or is mounted beneath
// it. Each takes the node's processes and paths explicitly; the phases
// that call it are cluster's.
package teardown

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/devk/devk/cluster/internal/cgroups"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

const (
	// stopGrace is how long down gives the kubelet and containerd to
	// stop before they are killed; it removes what they leave anyway.
	stopGrace = 5 * time.Second
	// shimGrace is a containerd shim's, once its containerd is gone.
	shimGrace = 2 * time.Second
)

// NodeProcs are a node's supervised processes.
type NodeProcs struct {
	// Name is the node's name.
	Name  string
	Procs supervise.Dir
}

// StopKubelet stops the kubelet of the node whose processes procs are.
func StopKubelet(ctx context.Context, procs supervise.Dir) (phase.Outcome, error) {
	stopped, err := procs.Stop(ctx, "kubelet", stopGrace)
	if err != nil {
		return phase.Done, err
	}
	if stopped {
		return phase.Changed("stopped"), nil
	}
	return phase.Unchanged("not running"), nil
}

// Pods is what RemovePods needs of a node.
type Pods struct {
	// Socket is the node's CRI runtime ("" when none is recorded).
	Socket string
	// OwnRuntime says the runtime is devk's containerd, supervised in
	// Procs; then every pod in it is the cluster's.
	OwnRuntime bool
	Procs      supervise.Dir
	// KubeletRoot is where the kubelet keeps a dir per pod UID: on a
	// shared runtime, the pods with one are the cluster's.
	KubeletRoot string
}

// RemovePods stops and removes a node's pod sandboxes and containers.
func RemovePods(ctx context.Context, p Pods) (phase.Outcome, error) {
	if p.Socket == "" {
		return phase.Unchanged("no runtime recorded"), nil
	}
	if p.OwnRuntime {
		if _, ok := p.Procs.Running("containerd"); !ok {
			return phase.Unchanged("containerd not running; leftovers are killed below"), nil
		}
	}
	rt, err := cri.Dial(p.Socket)
	if err != nil {
		return phase.Done, err
	}
	defer rt.Close()
	if _, err := rt.Version(ctx); err != nil {
		if !p.OwnRuntime {
			return phase.Done, fmt.Errorf("the CRI runtime at %s does not answer (%v): start it so devk can remove this cluster's pods", p.Socket, err)
		}
		return phase.Unchanged("containerd does not answer; leftovers are killed below"), nil
	}
	removed, err := rt.RemoveAll(ctx, p.owns)
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(removed > 0, "%d pod sandboxes removed", removed), nil
}

// owns says whether a pod sandbox belongs to this cluster: every pod of
// the private containerd does; on a shared runtime, the pods this
// cluster's kubelet made (it keeps a dir per pod UID).
func (p Pods) owns(uid string) bool {
	if p.OwnRuntime {
		return true
	}
	dir, err := validname.PathIn(p.KubeletRoot, "pods", uid)
	if err != nil {
		return false // a UID from the runtime that is not one path element is no pod of ours
	}
	_, err = os.Stat(dir)
	return err == nil
}

// isShimOf reports whether argv is a containerd shim serving the
// containerd at socket.
func isShimOf(argv []string, socket string) bool {
	if len(argv) == 0 || !strings.Contains(filepath.Base(argv[0]), "containerd-shim") {
		return false
	}
	for i, a := range argv {
		if a == "-address" && i+1 < len(argv) && argv[i+1] == socket {
			return true
		}
		if a == "-address="+socket || a == "--address="+socket {
			return true
		}
	}
	return false
}

// StopRuntime stops a node's containerd (supervised in procs, serving
// socket) and any shim it left.
func StopRuntime(ctx context.Context, procs supervise.Dir, socket string) (phase.Outcome, error) {
	stopped, err := procs.Stop(ctx, "containerd", stopGrace)
	if err != nil {
		return phase.Done, err
	}
	shims := supervise.Processes(func(argv []string) bool { return isShimOf(argv, socket) })
	for _, pid := range shims {
		if err := supervise.KillWait(ctx, pid, shimGrace); err != nil {
			return phase.Done, fmt.Errorf("stop containerd shim %d: %w", pid, err)
		}
	}
	state := "not running"
	if stopped {
		state = "stopped"
	}
	return phase.ChangedIf(stopped || len(shims) > 0, "containerd %s, %d shims stopped", state, len(shims)), nil
}

// RemoveCgroups removes the kubelet cgroup roots of nodes (only those:
// another kubelet's pods live elsewhere), killing what is left in them,
// each process given grace to exit. With ownRuntime it also removes the
// k8s.io cgroup runc may leave behind, if empty: other containerds (not
// devk's) may use it.
func RemoveCgroups(ctx context.Context, nodes []layout.NodeNet, ownRuntime bool, grace time.Duration) (phase.Outcome, error) {
	removed, killed := 0, 0
	for _, n := range nodes {
		r, k, err := cgroups.RemoveRoot(ctx, n.CgroupRoot, grace)
		removed, killed = removed+r, killed+k
		if err != nil {
			return phase.Done, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	for _, root := range cgroups.Roots() {
		if !ownRuntime {
			break
		}
		if err := cgroups.RemoveEmptyTree(filepath.Join(root, "k8s.io")); err == nil {
			removed++
		}
	}
	return phase.ChangedIf(removed > 0, "%d removed, %d leftover processes killed", removed, killed), nil
}

// RemoveCgroupRoot removes one node's kubelet cgroup root (node
// remove's cgroups phase); see RemoveCgroups.
func RemoveCgroupRoot(ctx context.Context, cgroupRoot string, grace time.Duration) (phase.Outcome, error) {
	removed, killed, err := cgroups.RemoveRoot(ctx, cgroupRoot, grace)
	return phase.ChangedIf(removed > 0, "%d removed, %d leftover processes killed", removed, killed), err
}

// removableDir refuses to remove dir while anything could still use it
// or reach outside it: it must be a real directory (not a symlink) of
// this user, nothing may be mounted beneath it (mountinfo read now, not
// when a mounts phase ran, which may have been skipped), and no kubelet
// or containerd of nodes may run. A dir that is not there is removable
// and exists is false. what says what to run instead.
func removableDir(dir string, nodes []NodeProcs, what string) (exists bool, err error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return true, fmt.Errorf("refusing to remove %s: it is not a directory (a symlink?); remove it by hand", dir)
	}
	if st, ok := fi.Sys().(*unix.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return true, fmt.Errorf("refusing to remove %s: it belongs to uid %d, not to you", dir, st.Uid)
	}
	for _, n := range nodes {
		for _, proc := range []string{"kubelet", "containerd"} {
			if pid, ok := n.Procs.Running(proc); ok {
				return true, fmt.Errorf("refusing to remove %s: node %s's %s (pid %d) still runs: %s", dir, n.Name, proc, pid, what)
			}
		}
	}
	mounts, err := mountns.Host()
	if err != nil {
		return true, err
	}
	if mps := mountns.Under(mounts, dir); len(mps) > 0 {
		return true, fmt.Errorf("refusing to remove %s: %d mounts beneath it, e.g. %s: %s", dir, len(mps), mps[0], what)
	}
	return true, nil
}

// keptByKeepData are what --keep-data keeps.
var keptByKeepData = []string{"pki", "etcd", "cluster.json"}

// SafeToRemove refuses to remove the cluster directory dir unless it is
// under home's clusters/ and removableDir, with every node's processes.
func SafeToRemove(dir, home string, nodes []NodeProcs) error {
	if filepath.Dir(filepath.Dir(dir)) != home || filepath.Base(filepath.Dir(dir)) != "clusters" {
		return fmt.Errorf("refusing to remove %s: not a cluster directory under %s/clusters", dir, home)
	}
	_, err := removableDir(dir, nodes, "run all of `devk down`, or `devk down phase kubelet`, `devk down phase runtime` and `devk down phase mounts` first")
	return err
}

// RemoveClusterDir removes the cluster directory dir (all but
// keptByKeepData with keepData) when SafeToRemove lets it.
func RemoveClusterDir(dir, home string, nodes []NodeProcs, keepData bool) (phase.Outcome, error) {
	removeContainerLogLinks(dir)
	if err := SafeToRemove(dir, home, nodes); err != nil {
		return phase.Done, err
	}
	if !keepData {
		if err := os.RemoveAll(dir); err != nil {
			return phase.Done, fmt.Errorf("remove %s: %w", dir, err)
		}
		return phase.Changed("removed %s", dir), nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return phase.Done, err
	}
	for _, e := range ents {
		if slices.Contains(keptByKeepData, e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return phase.Done, fmt.Errorf("remove %s: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	return phase.Changed("kept pki, etcd and cluster.json in %s", dir), nil
}

// RemoveNodeDir removes node n's directory dir, after the checks
// RemoveClusterDir makes: a real directory under the cluster's nodesDir,
// nothing mounted beneath it, no kubelet or containerd of the node
// running. what says what to run instead.
func RemoveNodeDir(dir, nodesDir string, n NodeProcs, what string) (phase.Outcome, error) {
	removeContainerLogLinks(dir)
	if filepath.Dir(dir) != nodesDir {
		return phase.Done, fmt.Errorf("refusing to remove %s: not a node directory under %s", dir, nodesDir)
	}
	exists, err := removableDir(dir, []NodeProcs{n}, what)
	if err != nil || !exists {
		return phase.Unchanged("no %s", dir), err
	}
	if err := os.RemoveAll(dir); err != nil {
		return phase.Done, fmt.Errorf("remove %s: %w", dir, err)
	}
	os.Remove(nodesDir) // when it was the last
	return phase.Changed("removed %s", dir), nil
}

// removeContainerLogLinks removes the links into dir that a kubelet made
// in /var/log/containers (one per container log).
func removeContainerLogLinks(dir string) {
	links, err := filepath.Glob("/var/log/containers/*.log")
	if err != nil {
		return
	}
	for _, l := range links {
		if t, err := os.Readlink(l); err == nil && strings.HasPrefix(t, dir+"/") {
			_ = os.Remove(l)
		}
	}
}
