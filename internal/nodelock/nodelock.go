// Package nodelock is the locks of nodes and clusters: whatever changes
// what a node runs holds its node's lock for the whole change, so two
// changes never interleave (two swaps sharing one backup and journal, a
// kubelet restarted in the middle of a teardown, a node removed while a
// swap replaces its API server).
//
// A node is named by its kubelet's manifests directory (a devk cluster's
// <dir>/manifests or <dir>/nodes/<node>/manifests, or
// /etc/kubernetes/manifests on a kubeadm node). A devk cluster has a lock
// of its own, named by its directory. There are two kinds of holder:
//
//   - a job that changes one node (a static pod's swap on a cluster with
//     one control-plane node, a swap or certs renew on a kubeadm node)
//     takes that node's lock (Acquire);
//   - a job that changes the set of nodes or may change more than one
//     node (up, down, node add and remove, a rolling swap, a kubelet swap
//     even with --node, certs renew on a devk cluster) takes the
//     cluster's lock and then every node's, in one order: the cluster
//     first, then the nodes sorted by their key (AcquireCluster); a node
//     it adds meanwhile it locks before it records it (Set.AddNode).
//
// So a one-node job and a cluster job exclude each other on the node's
// lock, two cluster jobs on the cluster's, and two one-node jobs on
// different nodes run side by side. Every lock is taken without waiting:
// the refusal names the holder.
//
// A lock is flock(2) on a file in a machine-wide directory
// (/run/devk/locks for root), so it is released by the kernel when its
// holder dies, even by kill -9, and holds across DEVK_HOMEs. Lock files
// are never removed: a removed lock file could be held by one process
// while another creates and locks a new one at the same path.
package nodelock

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// RootDir is where root's lock files live (tmpfs: a reboot frees them).
const RootDir = "/run/devk/locks"

// Dir is the lock directory of the running user: RootDir for root, else a
// directory of the user's own under the temp dir.
func Dir() string {
	if os.Geteuid() == 0 {
		return RootDir
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("devk-%d", os.Geteuid()), "locks")
}

// Holder says who holds a lock; it is the lock file's content.
type Holder struct {
	Command string    `json:"command"`
	PID     int       `json:"pid"`
	Since   time.Time `json:"since"`
	// Node is the lock's key: a node's manifests dir, or "cluster "
	// and a cluster's directory.
	Node string `json:"node"`
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "another devk process"
	}
	return fmt.Sprintf("%s (pid %d, since %s)", h.Command, h.PID, h.Since.Local().Format("15:04:05"))
}

// ErrBusy is wrapped by the error of a lock someone else holds.
var ErrBusy = errors.New("node is busy")

// BusyError names the holder of a lock that could not be taken.
type BusyError struct {
	Node   string
	Holder Holder
	File   string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%s is busy: %s is changing it (lock %s); wait for it to finish or stop it, then run this again", e.Node, e.Holder, e.File)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// Lock is a held node lock.
type Lock struct {
	f    *os.File
	Path string
}

// clusterPrefix marks a cluster's key, so that no manifests dir shares
// its lock file.
const clusterPrefix = "cluster "

// clusterKey is the key of the cluster whose directory is clusterDir
// ("cluster /root/.devk/clusters/devk").
func clusterKey(clusterDir string) (string, error) {
	k, err := Key(clusterDir)
	if err != nil {
		return "", err
	}
	return clusterPrefix + k, nil
}

// Key is the node a manifests directory names: its absolute path with
// symlinks resolved as far as it exists, so that two spellings of one
// directory share a lock.
func Key(manifestsDir string) (string, error) {
	abs, err := filepath.Abs(manifestsDir)
	if err != nil {
		return "", err
	}
	// Resolve the longest existing prefix (the directory may not exist
	// yet: `devk up` takes the lock before it makes the cluster).
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// FileFor is the lock file of a node key in dir.
func FileFor(dir, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, hex.EncodeToString(sum[:8])+".lock")
}

// Acquire takes the lock of the node whose manifests dir is manifestsDir,
// without waiting: if another process holds it, the error is a
// *BusyError naming that process. command describes the holder for
// others ("devk swap apiserver").
func Acquire(manifestsDir, command string) (*Lock, error) {
	return AcquireIn(Dir(), manifestsDir, command)
}

// AcquireIn is Acquire with the lock directory given.
func AcquireIn(dir, manifestsDir, command string) (*Lock, error) {
	key, err := Key(manifestsDir)
	if err != nil {
		return nil, err
	}
	return acquireKey(dir, key, command)
}

// acquireKey takes the lock of key in dir, without waiting.
func acquireKey(dir, key, command string) (*Lock, error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	path := FileFor(dir, key)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &BusyError{Node: key, Holder: readHolder(f), File: path}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	h, _ := json.Marshal(Holder{Command: command, PID: os.Getpid(), Since: time.Now().UTC().Truncate(time.Second), Node: key})
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(h, '\n'), 0)
	}
	return &Lock{f: f, Path: path}, nil
}

// Release lets go of the lock (the file stays; see the package comment).
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}

func readHolder(f *os.File) Holder {
	var h Holder
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err == nil {
		_ = json.Unmarshal(data, &h)
	}
	return h
}

// ensureDir makes the lock directory, private to its owner, and refuses
// one that another user could plant files in.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make the lock directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("lock directory %s is not a directory (a symlink?): remove it", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("lock directory %s belongs to uid %d, not to you: remove it", dir, st.Uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("lock directory %s is writable by others (%v): chmod 0700 %s", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// Command describes this process for Holder: "devk swap apiserver".
func Command() string {
	if len(os.Args) == 0 {
		return "devk"
	}
	args := append([]string{filepath.Base(os.Args[0])}, os.Args[1:]...)
	s := strings.Join(args, " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Set is the locks a cluster job holds: its cluster's, then its nodes'.
type Set struct {
	dir, command string
	locks        []*Lock
	keys         map[string]bool
}

// AcquireCluster takes, without waiting, the lock of the cluster whose
// directory is clusterDir and then the lock of each of its nodes (their
// manifests dirs), sorted by key: the one order every cluster job takes
// them in. On a refusal it lets go of what it took and returns the
// *BusyError that names the holder.
func AcquireCluster(clusterDir string, nodes []string, command string) (*Set, error) {
	return AcquireClusterIn(Dir(), clusterDir, nodes, command)
}

// AcquireClusterIn is AcquireCluster with the lock directory given.
func AcquireClusterIn(dir, clusterDir string, nodes []string, command string) (*Set, error) {
	ck, err := clusterKey(clusterDir)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, n := range nodes {
		k, err := Key(n)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := &Set{dir: dir, command: command, keys: map[string]bool{}}
	for _, k := range append([]string{ck}, slices.Compact(keys)...) {
		if err := s.add(k); err != nil {
			s.Release()
			return nil, err
		}
	}
	return s, nil
}

func (s *Set) add(key string) error {
	if s.keys[key] {
		return nil
	}
	l, err := acquireKey(s.dir, key, s.command)
	if err != nil {
		return err
	}
	s.locks = append(s.locks, l)
	s.keys[key] = true
	return nil
}

// AddNode takes the lock of a node the job adds to its cluster (before
// it records the node, so that no one-node job can start on it
// meanwhile); a node the set holds already is a no-op.
func (s *Set) AddNode(manifestsDir string) error {
	k, err := Key(manifestsDir)
	if err != nil {
		return err
	}
	return s.add(k)
}

// Holds says whether the set holds the lock of the node whose manifests
// dir is manifestsDir.
func (s *Set) Holds(manifestsDir string) bool {
	if s == nil {
		return false
	}
	k, err := Key(manifestsDir)
	return err == nil && s.keys[k]
}

// Release lets go of every lock of the set, the nodes' first.
func (s *Set) Release() {
	if s == nil {
		return
	}
	for i := len(s.locks) - 1; i >= 0; i-- {
		s.locks[i].Release()
	}
	s.locks, s.keys = nil, map[string]bool{}
}
