package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

// eachNode runs f on every node, node 0 last, and joins what each says.
func (c *Cluster) eachNode(ctx context.Context, f func(context.Context, Node) (phase.Outcome, error)) (phase.Outcome, error) {
	ns, err := c.nodesLastFirst()
	if err != nil {
		return phase.Done, err
	}
	if len(ns) == 1 {
		return f(ctx, ns[0])
	}
	var out phase.Outcome
	var details []string
	for _, n := range ns {
		o, err := f(ctx, n)
		if err != nil {
			return phase.Done, fmt.Errorf("node %s: %w", n.Name(), err)
		}
		out.Changed = out.Changed || o.Changed
		details = append(details, n.Name()+": "+o.Detail)
	}
	out.Detail = strings.Join(details, "; ")
	return out, nil
}

func (c *Cluster) downKubelet(ctx context.Context) (phase.Outcome, error) {
	return c.eachNode(ctx, stopKubelet)
}

// stopKubelet stops node n's kubelet.
func stopKubelet(ctx context.Context, n Node) (phase.Outcome, error) {
	stopped, err := n.Files.Procs().Stop(ctx, "kubelet", downGrace)
	if err != nil {
		return phase.Done, err
	}
	if stopped {
		return phase.Changed("stopped"), nil
	}
	return phase.Unchanged("not running"), nil
}

// ownsPod says whether a pod sandbox belongs to this cluster: every pod
// of the private containerd does; on a shared runtime, the pods this
// cluster's kubelet made (it keeps a dir per pod UID).
func (c *Cluster) ownsPod(uid string) bool {
	if c.Config.OwnRuntime {
		return true
	}
	dir, err := validname.PathIn(c.FirstNode().Files.KubeletRoot(), "pods", uid)
	if err != nil {
		return false // a UID from the runtime that is not one path element is no pod of ours
	}
	_, err = os.Stat(dir)
	return err == nil
}

func (c *Cluster) downPods(ctx context.Context) (phase.Outcome, error) {
	return c.eachNode(ctx, c.removePods)
}

// removePods stops and removes node n's pod sandboxes and containers.
func (c *Cluster) removePods(ctx context.Context, n Node) (phase.Outcome, error) {
	socket := c.criSocket(n)
	if c.Config.OwnRuntime {
		socket = n.Files.ContainerdSocket()
	}
	if socket == "" {
		return phase.Unchanged("no runtime recorded"), nil
	}
	if c.Config.OwnRuntime {
		if _, ok := n.Files.Procs().Running("containerd"); !ok {
			return phase.Unchanged("containerd not running; leftovers are killed below"), nil
		}
	}
	rt, err := cri.Dial(socket)
	if err != nil {
		return phase.Done, err
	}
	defer rt.Close()
	if _, err := rt.Version(ctx); err != nil {
		if !c.Config.OwnRuntime {
			return phase.Done, fmt.Errorf("the CRI runtime at %s does not answer (%v): start it so devk can remove this cluster's pods", socket, err)
		}
		return phase.Unchanged("containerd does not answer; leftovers are killed below"), nil
	}
	removed, err := rt.RemoveAll(ctx, c.ownsPod)
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(removed > 0, "%d pod sandboxes removed", removed), nil
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

func (c *Cluster) downRuntime(ctx context.Context) (phase.Outcome, error) {
	if !c.Config.OwnRuntime {
		return phase.Unchanged("not devk's (%s)", c.Config.CRISocket), nil
	}
	return c.eachNode(ctx, stopRuntime)
}

// stopRuntime stops node n's containerd and any shim it left.
func stopRuntime(ctx context.Context, n Node) (phase.Outcome, error) {
	stopped, err := n.Files.Procs().Stop(ctx, "containerd", downGrace)
	if err != nil {
		return phase.Done, err
	}
	shims := supervise.Processes(func(argv []string) bool { return isShimOf(argv, n.Files.ContainerdSocket()) })
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

func (c *Cluster) downMounts(ctx context.Context) (phase.Outcome, error) {
	return c.eachNode(ctx, removeNodeMounts)
}

// cgroupRoots are the cgroup hierarchies: each v1 controller mount, or
// the one v2 mount.
func cgroupRoots() []string {
	if CgroupVersion() == 2 {
		return []string{"/sys/fs/cgroup"}
	}
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// removeCgroupTree kills what is left in a cgroup tree and removes it,
// deepest first.
func removeCgroupTree(ctx context.Context, root string) (int, error) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	killed := 0
	for _, d := range dirs {
		if data, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = supervise.KillWait(ctx, pid, leftoverGrace)
					killed++
				}
			}
		}
		// A killed task leaves its cgroup a little later.
		var rmErr error
		err := wait.PollUntilContextTimeout(ctx, cgroupRemoveInterval, cgroupRemoveTimeout, true, func(context.Context) (bool, error) {
			rmErr = os.Remove(d)
			return rmErr == nil || errors.Is(rmErr, fs.ErrNotExist), nil
		})
		if poll.TimedOut(ctx, err) {
			return killed, fmt.Errorf("remove cgroup %s: %w", d, rmErr)
		}
		if err != nil {
			return killed, err
		}
	}
	return killed, nil
}

func (c *Cluster) downCgroups(ctx context.Context) (phase.Outcome, error) {
	// Only the cgroup roots of the cluster's own nodes (validated when
	// cluster.json was read): another kubelet's pods live elsewhere.
	ns, err := c.nodesLastFirst()
	if err != nil {
		return phase.Done, err
	}
	removed, killed := 0, 0
	for _, n := range ns {
		r, k, err := removeCgroupRoot(ctx, n.Net.CgroupRoot)
		removed, killed = removed+r, killed+k
		if err != nil {
			return phase.Done, fmt.Errorf("node %s: %w", n.Name(), err)
		}
	}
	// runc may leave an empty k8s.io behind; it is removed only if empty,
	// for other containerds (not devk's) may use it.
	for _, root := range cgroupRoots() {
		if !c.Config.OwnRuntime {
			break
		}
		if err := removeEmptyTree(filepath.Join(root, "k8s.io")); err == nil {
			removed++
		}
	}
	return phase.ChangedIf(removed > 0, "%d removed, %d leftover processes killed", removed, killed), nil
}

// removeCgroupRoot removes a node's kubelet cgroup root in every
// hierarchy, killing what is left in it; it says how many hierarchies
// had it and how many processes it killed.
func removeCgroupRoot(ctx context.Context, cgroupRoot string) (removed, killed int, err error) {
	if cgroupRoot == "" || cgroupRoot == "/" {
		return 0, 0, nil
	}
	for _, root := range cgroupRoots() {
		p := filepath.Join(root, cgroupRoot)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		k, err := removeCgroupTree(ctx, p)
		killed += k
		if err != nil {
			return removed, killed, err
		}
		removed++
	}
	return removed, killed, nil
}

// removeEmptyTree removes a cgroup tree only if no process is in it.
func removeEmptyTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if data, err := os.ReadFile(filepath.Join(p, "cgroup.procs")); err == nil && len(bytes.TrimSpace(data)) > 0 {
				return fmt.Errorf("cgroup %s is in use", p)
			}
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := os.Remove(d); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) downKubeconfig(ctx context.Context) (phase.Outcome, error) {
	removed, err := c.removeUserContext(ctx)
	if err != nil {
		return phase.Done, err
	}
	if removed {
		return phase.Changed("context %s removed", ContextName(c.Config.Name)), nil
	}
	return phase.Unchanged("no context %s", ContextName(c.Config.Name)), nil
}

// safeToRemove refuses to remove the cluster directory unless it is
// under $DEVK_HOME/clusters and removableDir, with every node's
// processes.
func (c *Cluster) safeToRemove() error {
	if filepath.Dir(filepath.Dir(c.FirstNode().Files.Dir)) != c.Home || filepath.Base(filepath.Dir(c.FirstNode().Files.Dir)) != "clusters" {
		return fmt.Errorf("refusing to remove %s: not a cluster directory under %s/clusters", c.FirstNode().Files.Dir, c.Home)
	}
	ns, err := c.nodes()
	if err != nil {
		return err
	}
	_, err = removableDir(c.FirstNode().Files.Dir, ns, "run all of `devk down`, or `devk down phase kubelet`, `devk down phase runtime` and `devk down phase mounts` first")
	return err
}

// removableDir refuses to remove dir while anything could still use it
// or reach outside it: it must be a real directory (not a symlink) of
// this user, nothing may be mounted beneath it (mountinfo read now, not
// when a mounts phase ran, which may have been skipped), and no kubelet
// or containerd of nodes may run. A dir that is not there is removable
// and exists is false. what says what to run instead.
func removableDir(dir string, nodes []Node, what string) (exists bool, err error) {
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
			if pid, ok := n.Files.Procs().Running(proc); ok {
				return true, fmt.Errorf("refusing to remove %s: node %s's %s (pid %d) still runs: %s", dir, n.Name(), proc, pid, what)
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

func (c *Cluster) downFiles(ctx context.Context) (phase.Outcome, error) {
	removeContainerLogLinks(c.FirstNode().Files.Dir)
	if err := c.safeToRemove(); err != nil {
		return phase.Done, err
	}
	if !c.KeepData {
		if err := os.RemoveAll(c.FirstNode().Files.Dir); err != nil {
			return phase.Done, fmt.Errorf("remove %s: %w", c.FirstNode().Files.Dir, err)
		}
		return phase.Changed("removed %s", c.FirstNode().Files.Dir), nil
	}
	ents, err := os.ReadDir(c.FirstNode().Files.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return phase.Done, err
	}
	for _, e := range ents {
		if slices.Contains(keptByKeepData, e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(c.FirstNode().Files.Dir, e.Name())); err != nil {
			return phase.Done, fmt.Errorf("remove %s: %w", filepath.Join(c.FirstNode().Files.Dir, e.Name()), err)
		}
	}
	return phase.Changed("kept pki, etcd and cluster.json in %s", c.FirstNode().Files.Dir), nil
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
