// Package mountns gives a node a mount namespace of its own, as kind's
// node container gives it: the paths a node's components hard-code
// (/var/lib/kubelet/device-plugins, /var/log/containers, /var/lib/cni,
// /run/containerd, and for a kubeadm node /etc/kubernetes, /var/lib/etcd)
// are, inside it, the node's own directories, so nothing is written to
// the host's and nodes share nothing.
//
// A namespace is described by a Spec: where it is kept (a bind mount of
// its ns/mnt, as `ip netns` keeps network namespaces), the host
// directories it covers with an overlay whose upper layer is a tmpfs of
// the namespace's own (so mount points can be made inside without
// creating anything on the host), and the bind mounts (path inside → the
// node's directory on the host), and files bound over the host's where
// the host has them (FileBind: a node's /usr/bin/systemctl is devk's).
// The namespace is a slave of the host's
// mounts: what the host mounts later appears in it, nothing it mounts
// appears on the host. Processes enter it with `nsenter --mount=<File>`.
package mountns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/supervise"
)

// Bind is one path inside the namespace and the node's directory on the
// host that it is.
type Bind struct {
	// Path is where the directory appears inside (e.g. /var/lib/cni).
	Path string
	// Dir is the node's own directory, the same files seen from the host.
	Dir string
}

// Spec is a node's mount namespace.
type Spec struct {
	// File is where the namespace is kept; its directory is made a
	// private mount on the host (a mount namespace cannot be bound onto
	// a mount that propagates) and holds the namespace's other files.
	File string
	// Covers are host directories overlaid inside the namespace, with an
	// upper layer on the namespace's own tmpfs: every Bind's Path is
	// under one, so its mount point is made there, not on the host.
	Covers []string
	// Binds are the node's directories, in order.
	Binds []Bind
	// Files are files bound over the host's (EnsureFiles), where the
	// host has them.
	Files []FileBind
}

// source names the namespace's own tmpfs and overlays in mountinfo.
const source = "devk-mntns"

func (s Spec) dir() string { return filepath.Dir(s.File) }

// upper is the mount point, inside the namespace, of the tmpfs the
// covers' upper and work dirs are on.
func (s Spec) upper() string { return filepath.Join(s.dir(), "upper") }

// marker records that the namespace kept in File was made completely,
// and to which Spec: the namespace's inode and the Spec's hash.
func (s Spec) marker() string { return filepath.Join(s.dir(), "ready") }

// stamp is the marker's content for the namespace with inode ino.
func (s Spec) stamp(ino uint64) string {
	h := sha256.New()
	for _, c := range s.Covers {
		fmt.Fprintf(h, "cover %s\n", c)
	}
	for _, b := range s.Binds {
		fmt.Fprintf(h, "bind %s %s\n", b.Path, b.Dir)
	}
	return fmt.Sprintf("%d %s\n", ino, hex.EncodeToString(h.Sum(nil))[:16])
}

// under says whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Validate checks a Spec before anything is mounted: absolute, clean
// paths that overlay options can carry; every bind inside a cover; none
// of the node's own directories inside a cover (they would be seen
// through the overlay inside, and an overlay cannot hold containerd's).
func (s Spec) Validate() error {
	paths := append([]string{s.File}, s.Covers...)
	for _, b := range s.Binds {
		paths = append(paths, b.Path, b.Dir)
	}
	for _, f := range s.Files {
		paths = append(paths, f.Path, f.Source)
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("mount namespace path %q: want an absolute, clean path", p)
		}
		if strings.ContainsAny(p, ",:\\ \t\n") {
			return fmt.Errorf("mount namespace path %q holds a comma, colon, backslash or space, which mount options cannot carry: use a DEVK_HOME without them", p)
		}
	}
	for _, b := range s.Binds {
		covered := false
		for _, c := range s.Covers {
			covered = covered || (under(b.Path, c) && b.Path != c)
		}
		if !covered {
			return fmt.Errorf("mount namespace: %s is under none of %v", b.Path, s.Covers)
		}
	}
	for _, c := range s.Covers {
		for _, own := range append(append([]string{s.dir()}, bindDirs(s.Binds)...), fileSources(s.Files)...) {
			if under(own, c) {
				return fmt.Errorf("%s is under %s, which a node's mount namespace overlays: put DEVK_HOME elsewhere (the default is ~/.devk)", own, c)
			}
		}
	}
	return nil
}

func fileSources(fs []FileBind) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Source)
	}
	return out
}

func bindDirs(bs []Bind) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Dir)
	}
	return out
}

// ID is the persisted namespace's identity (device and inode of its
// nsfs file), ok false when File holds none.
func ID(file string) (dev, ino uint64, ok bool) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(file, &sfs); err != nil || sfs.Type != unix.NSFS_MAGIC {
		return 0, 0, false
	}
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return 0, 0, false
	}
	return st.Dev, st.Ino, true
}

// Enter is argv run inside the namespace kept in file (and in the
// network namespace kept in netns, unless empty). nsenter opens both
// files before it enters either, and execs argv, so the pid is argv's.
func Enter(file, netns string, argv ...string) []string {
	out := []string{"nsenter"}
	if netns != "" {
		out = append(out, "--net="+netns)
	}
	out = append(out, "--mount="+file, "--")
	return append(out, argv...)
}

// Run runs argv inside the namespace kept in file.
func Run(ctx context.Context, file string, argv ...string) error {
	a := Enter(file, "", argv...)
	return execx.Run(ctx, execx.Cmd{Name: a[0], Args: a[1:]})
}

// Mounts is the mount table inside the namespace kept in file.
func Mounts(ctx context.Context, file string) ([]Mount, error) {
	a := Enter(file, "", "cat", "/proc/self/mountinfo")
	out, err := execx.Output(ctx, execx.Cmd{Name: a[0], Args: a[1:]})
	if err != nil {
		return nil, err
	}
	return parse(string(out))
}

// Processes are the processes in the mount namespace kept in file.
func Processes(file string) []int { return ProcessesIn(file, "mnt") }

// ProcessesIn are the processes in the namespace of the kind ("mnt",
// "net", as named under /proc/PID/ns) kept in file: the one scan of
// /proc that down and node remove use to find what still runs in a
// node's namespaces.
func ProcessesIn(file, kind string) []int {
	dev, ino, ok := ID(file)
	if !ok {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", e.Name(), "ns", kind), &st) == nil && st.Dev == dev && st.Ino == ino {
			out = append(out, pid)
		}
	}
	return out
}

// In says whether process pid is in the mount namespace (dev, ino).
func In(pid int, dev, ino uint64) bool {
	var st unix.Stat_t
	return unix.Stat(filepath.Join("/proc", strconv.Itoa(pid), "ns", "mnt"), &st) == nil && st.Dev == dev && st.Ino == ino
}

// Ensure makes the namespace unless it is there and complete, and
// reports whether it made it or bound a file. Complete is what the marker says: make
// writes it last, naming the namespace's inode and the Spec, so one cut
// short, one of another Spec (a devk that binds other paths) and one
// dropped since (a reboot) are told apart without entering it. One not
// complete is thrown away and made again, unless something runs in it.
// Then the file binds are ensured (EnsureFiles) in either, old or new.
func Ensure(ctx context.Context, s Spec) (bool, error) {
	if err := s.Validate(); err != nil {
		return false, err
	}
	if _, ino, ok := ID(s.File); ok {
		if m, err := os.ReadFile(s.marker()); err == nil && string(m) == s.stamp(ino) {
			return EnsureFiles(ctx, s)
		}
		if pids := Processes(s.File); len(pids) > 0 {
			return false, fmt.Errorf("the mount namespace %s was made by an interrupted run, or for other mounts, and processes %v run in it: stop them (`devk down`), then up again", s.File, pids)
		}
		if err := unix.Unmount(s.File, unix.MNT_DETACH); err != nil {
			return false, fmt.Errorf("drop the incomplete mount namespace %s: %w", s.File, err)
		}
	}
	if err := s.make(ctx); err != nil {
		return true, err
	}
	_, err := EnsureFiles(ctx, s)
	return true, err
}

// make makes the namespace: a private mount on the host for its files,
// `unshare --mount=File --propagation slave` (util-linux binds the new
// namespace onto File from outside it), then inside: the nsfs mounts it
// copied from the host dropped (another node's namespaces, kept alive by
// a copy, would outlive their `down`), a tmpfs for the covers' upper
// layers, the covers, the binds; last the marker.
func (s Spec) make(ctx context.Context) error {
	_ = os.Remove(s.marker())
	if err := os.MkdirAll(s.dir(), 0o700); err != nil {
		return err
	}
	if err := privateMount(s.dir()); err != nil {
		return err
	}
	for _, d := range append([]string{s.upper()}, bindDirs(s.Binds)...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(s.File, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	if err := execx.Run(ctx, execx.Cmd{Name: "unshare", Args: []string{"--mount=" + s.File, "--propagation", "slave", "true"}}); err != nil {
		return fmt.Errorf("make the mount namespace %s: %w", s.File, err)
	}
	_, ino, ok := ID(s.File)
	if !ok {
		return fmt.Errorf("unshare kept no mount namespace in %s", s.File)
	}
	mounts, err := Mounts(ctx, s.File)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if m.FSType == "nsfs" {
			if err := s.dropNamespaceMount(ctx, m.Point); err != nil {
				return err
			}
		}
	}
	steps := [][]string{{"mount", "-t", "tmpfs", "-o", "mode=0700", source, s.upper()}}
	for i, c := range s.Covers {
		u, w := filepath.Join(s.upper(), strconv.Itoa(i), "upper"), filepath.Join(s.upper(), strconv.Itoa(i), "work")
		steps = append(steps, []string{"mkdir", "-p", u, w},
			[]string{"mount", "-t", "overlay", "-o", "lowerdir=" + c + ",upperdir=" + u + ",workdir=" + w, source, c})
	}
	for _, b := range s.Binds {
		steps = append(steps, []string{"mkdir", "-p", b.Path}, []string{"mount", "--bind", b.Dir, b.Path})
	}
	for _, st := range steps {
		if err := Run(ctx, s.File, st...); err != nil {
			return fmt.Errorf("make the mount namespace %s: %w", s.File, err)
		}
	}
	return atomicfile.Write(s.marker(), []byte(s.stamp(ino)), 0o600, "")
}

// dropNamespaceMount unmounts, inside the new namespace, a network
// namespace's file it copied from the host. The host may remove its own
// between the listing and the unmount (a node or test going down at the
// same time); that unmount propagates here, so a point no longer mounted
// is not an error.
func (s Spec) dropNamespaceMount(ctx context.Context, point string) error {
	err := Run(ctx, s.File, "umount", "-l", point)
	if err == nil {
		return nil
	}
	mounts, lerr := Mounts(ctx, s.File)
	if lerr != nil {
		return lerr
	}
	if m, ok := At(mounts, point); ok && m.FSType == "nsfs" {
		return fmt.Errorf("make the mount namespace %s: %w", s.File, err)
	}
	return nil
}

// privateMount makes dir a bind mount of itself with private
// propagation on the host, unless it is one; a run killed between the
// bind and the change of propagation is mended.
func privateMount(dir string) error {
	mounts, err := Host()
	if err != nil {
		return err
	}
	m, ok := At(mounts, dir)
	if !ok {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount %s onto itself: %w", dir, err)
		}
	}
	slave := slices.ContainsFunc(m.Optional, func(f string) bool { return strings.HasPrefix(f, "master:") })
	if !ok || m.Shared() || slave {
		if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make %s a private mount: %w", dir, err)
		}
	}
	return nil
}

// Remove ends the namespace: it stops whatever still runs in it (after
// grace), and unmounts File and its private directory on the host; with
// nothing left to hold it, the kernel unmounts everything inside (the
// pods' volumes with the rest). It reports whether there was one.
func Remove(ctx context.Context, s Spec, grace time.Duration) (bool, error) {
	had := false
	if _, _, ok := ID(s.File); ok {
		had = true
		for _, pid := range Processes(s.File) {
			if err := supervise.KillWait(ctx, pid, grace); err != nil {
				return had, fmt.Errorf("stop process %d in the mount namespace %s: %w", pid, s.File, err)
			}
		}
		if err := unix.Unmount(s.File, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return had, fmt.Errorf("unmount %s: %w", s.File, err)
		}
	}
	if err := os.Remove(s.marker()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return had, err
	}
	_, err := UnmountUnder(s.dir())
	return had, err
}

// UnmountUnder detaches every mount of the host's at or below dir,
// deepest first, and reports how many. A mount can hide another at the
// same point: it goes round until none is left (at most ten rounds).
func UnmountUnder(dir string) (int, error) {
	n := 0
	for range 10 {
		mounts, err := Host()
		if err != nil {
			return n, err
		}
		mps := Under(mounts, dir)
		if len(mps) == 0 {
			break
		}
		for _, mp := range mps {
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return n, fmt.Errorf("unmount %s: %w", mp, err)
			}
			n++
		}
	}
	return n, nil
}

// EnsureShared makes dir, inside the namespace kept in file, a mount
// that propagates to its peers (`mount --bind dir dir`, then
// `--make-rshared`), as the kubelet does with its root dir at start;
// it reads the propagation from the namespace's mountinfo, so a bind
// left private by a run killed between the two steps is mended. It
// reports whether it changed anything.
func EnsureShared(ctx context.Context, file, dir string) (bool, error) {
	mounts, err := Mounts(ctx, file)
	if err != nil {
		return false, err
	}
	m, ok := At(mounts, dir)
	if ok && m.Shared() {
		return false, nil
	}
	if !ok {
		if err := Run(ctx, file, "mount", "--bind", dir, dir); err != nil {
			return true, fmt.Errorf("bind-mount %s onto itself: %w", dir, err)
		}
	}
	if err := Run(ctx, file, "mount", "--make-rshared", dir); err != nil {
		return true, fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return true, nil
}
