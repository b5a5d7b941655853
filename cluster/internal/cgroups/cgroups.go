// Package cgroups is a node's kubelet cgroup root in every hierarchy of
// the machine: which hierarchies there are, whether a root exists in
// one, its making (kubelet-start) and its removal (killing what is left
// in it), which down and node remove run. It imports nothing of cluster's.
package cgroups

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/supervise"
)

// mount is where the machine's cgroup hierarchies are mounted.
const mount = "/sys/fs/cgroup"

const (
	// removeTimeout bounds the wait for a cgroup to empty after its
	// tasks were killed (they leave it a little later).
	removeTimeout  = time.Second
	removeInterval = 20 * time.Millisecond
)

// Version is 2 on a unified hierarchy, else 1.
func Version() int {
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return 2
	}
	return 1
}

// Roots are the cgroup hierarchies: each v1 controller mount, or the one
// v2 mount.
func Roots() []string {
	if Version() == 2 {
		return []string{mount}
	}
	ents, err := os.ReadDir(mount)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(mount, e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// Exists says whether cgroup root exists in any hierarchy.
func Exists(root string) bool {
	if root == "" || root == "/" {
		return false
	}
	for _, h := range Roots() {
		if _, err := os.Stat(filepath.Join(h, root)); err == nil {
			return true
		}
	}
	return false
}

// EnsureRoot makes a node's kubelet cgroup root in every hierarchy (the
// kubelet refuses a cgroupRoot that does not exist). A new cpuset cgroup
// on v1 starts with no CPUs or memory nodes: copy its parent's.
func EnsureRoot(root string) error {
	if root == "" || root == "/" {
		return nil
	}
	for _, h := range Roots() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil || len(bytes.TrimSpace(cur)) > 0 {
				continue
			}
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("set %s of cgroup %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// RemoveRoot removes a node's kubelet cgroup root in every hierarchy,
// killing what is left in it (each process given grace to exit); it
// says how many hierarchies had it and how many processes it killed.
func RemoveRoot(ctx context.Context, cgroupRoot string, grace time.Duration) (removed, killed int, err error) {
	if cgroupRoot == "" || cgroupRoot == "/" {
		return 0, 0, nil
	}
	for _, root := range Roots() {
		p := filepath.Join(root, cgroupRoot)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		k, err := removeTree(ctx, p, grace)
		killed += k
		if err != nil {
			return removed, killed, err
		}
		removed++
	}
	return removed, killed, nil
}

// removeTree kills what is left in a cgroup tree and removes it,
// deepest first.
func removeTree(ctx context.Context, root string, grace time.Duration) (int, error) {
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
					_ = supervise.KillWait(ctx, pid, grace)
					killed++
				}
			}
		}
		// A killed task leaves its cgroup a little later.
		var rmErr error
		err := wait.PollUntilContextTimeout(ctx, removeInterval, removeTimeout, true, func(context.Context) (bool, error) {
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

// RemoveEmptyTree removes a cgroup tree only if no process is in it.
func RemoveEmptyTree(root string) error {
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
