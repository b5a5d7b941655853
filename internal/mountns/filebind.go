package mountns

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/devk/devk/internal/execx"
)

// FileBind is a file of the host's that is, inside the namespace,
// another file: Source bound over Path. Only a Path that exists inside
// (as a regular file, after symlinks) is bound: the mount point is the
// file itself, so nothing is made on the host or in the namespace, and
// a Path the host lacks stays absent. A node's /usr/bin/systemctl is
// devk's this way.
type FileBind struct {
	// Path is the file inside the namespace (e.g. /usr/bin/systemctl).
	Path string
	// Source is the file on the host it becomes; a symlink is followed
	// when it is bound (the bind holds the file it named then).
	Source string
}

// fileBindCap bounds the binds unmounted at one point before a new one
// goes there: each was devk's earlier bind of a Source since replaced.
const fileBindCap = 10

// fileLookup prints, inside the namespace, $1 resolved and its device and
// inode ("<path>\n<dev> <ino>"), or nothing when it is not a regular file.
const fileLookup = `p=$(readlink -f -- "$1") && [ -f "$p" ] || exit 0
printf '%s\n' "$p"
exec stat -L -c '%d %i' -- "$p"`

// EnsureFiles binds each of s.Files whose Path is there inside the
// namespace kept in s.File, unless Path is its Source already (the same
// device and inode); it reports whether it bound any. A Path that is a
// bind of an earlier Source (devk rebuilt: the link names a new binary)
// has that bind unmounted first, so binds do not pile up holding old
// files. Two Paths that are one file (/bin is a link to /usr/bin) are
// bound once. Ensure calls it each time, so file binds follow their
// Source and what the host has: they are not part of the stamp.
func EnsureFiles(ctx context.Context, s Spec) (bool, error) {
	changed := false
	done := map[string]bool{}
	for _, f := range s.Files {
		var src syscall.Stat_t
		if err := syscall.Stat(f.Source, &src); err != nil {
			return changed, fmt.Errorf("bind %s over %s in the mount namespace %s: %w", f.Source, f.Path, s.File, err)
		}
		path, dev, ino, ok, err := fileInside(ctx, s.File, f.Path)
		if err != nil {
			return changed, err
		}
		if !ok || done[path] {
			continue // none to bind over (never made), or bound under another name
		}
		done[path] = true
		if dev == src.Dev && ino == src.Ino {
			continue
		}
		if err := unbindFile(ctx, s.File, path); err != nil {
			return changed, err
		}
		if err := Run(ctx, s.File, "mount", "--bind", f.Source, path); err != nil {
			return changed, fmt.Errorf("bind %s over %s in the mount namespace %s: %w", f.Source, path, s.File, err)
		}
		changed = true
	}
	return changed, nil
}

// fileInside is path resolved inside the namespace kept in file, and its
// device and inode there; ok false when it is not a regular file there.
func fileInside(ctx context.Context, file, path string) (resolved string, dev, ino uint64, ok bool, err error) {
	a := Enter(file, "", "sh", "-c", fileLookup, "sh", path)
	out, err := execx.Output(ctx, execx.Cmd{Name: a[0], Args: a[1:]})
	if err != nil {
		return "", 0, 0, false, fmt.Errorf("look at %s in the mount namespace %s: %w", path, file, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return "", 0, 0, false, nil
	}
	if _, err := fmt.Sscanf(lines[1], "%d %d", &dev, &ino); err != nil {
		return "", 0, 0, false, fmt.Errorf("look at %s in the mount namespace %s: stat said %q", path, file, lines[1])
	}
	return lines[0], dev, ino, true, nil
}

// unbindFile unmounts what is mounted at path inside the namespace kept
// in file (a file bind of devk's: the namespace is a slave, so the host
// mounts nothing at its files), top first, at most fileBindCap.
func unbindFile(ctx context.Context, file, path string) error {
	for range fileBindCap {
		mounts, err := Mounts(ctx, file)
		if err != nil {
			return err
		}
		if _, ok := At(mounts, path); !ok {
			return nil
		}
		if err := Run(ctx, file, "umount", "-l", path); err != nil {
			return fmt.Errorf("unmount the earlier bind over %s in the mount namespace %s: %w", path, file, err)
		}
	}
	return fmt.Errorf("%s in the mount namespace %s still has a mount after %d unmounts: end the namespace (`devk down`) and make it again", path, file, fileBindCap)
}
