package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The layout beneath a registry's root. Every name is used through the
// root's *os.Root, so no symlink can take a read or a write outside it.
//
//	blobs/sha256/<hex>                 blobs, by digest
//	manifests/<repository>/<reference> manifests, by tag and by digest
//	tmp/                               files being written
//	.lock                              held by the running server
const (
	blobsDir     = "blobs"
	manifestsDir = "manifests"
	tmpDir       = "tmp"
	lockFile     = ".lock"
)

// Files in tmp/ are named with one of these prefixes; start-up removes
// only those.
const (
	uploadPrefix   = "upload-"
	manifestPrefix = "manifest-"
)

// openRoot opens the registry's storage directory, creating it when
// missing, and refuses one that another user could plant links in: the
// directory must be ours and writable by no one else, and so must every
// directory above it be (root's, or sticky like /tmp, will do).
func openRoot(dir string) (*os.Root, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("registry root %s: %w", dir, err)
	}
	if err := checkAncestors(abs); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(abs); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if uid := ownerOf(fi); uid != os.Geteuid() {
			return nil, fmt.Errorf("registry root %s is a symlink owned by uid %d, not by you (uid %d): remove it (rm %s) or pass another --root", abs, uid, os.Geteuid(), abs)
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("registry root %s: %w", abs, err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("registry root %s: %w", abs, err)
	}
	// Checked through the open directory, not the path: what is checked
	// is what gets written to, whatever happens to the path meanwhile.
	fi, err := root.Stat(".")
	if err == nil {
		err = checkRootDir(abs, fi)
	}
	if err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}

func checkRootDir(dir string, fi fs.FileInfo) error {
	me := os.Geteuid()
	switch uid := ownerOf(fi); {
	case !fi.IsDir():
		return fmt.Errorf("registry root %s is not a directory: pass another --root", dir)
	case uid != me:
		return fmt.Errorf("registry root %s belongs to uid %d, not to you (uid %d), who could plant symlinks in it: run `chown -R %d %s`, or pass another --root", dir, uid, me, me, dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("registry root %s is writable by group or others (mode %04o), who could plant symlinks in it: run `chmod 0755 %s`, or pass another --root", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// checkAncestors refuses a path beneath a directory that someone other
// than us and root could change: they could swap what lies beneath it.
func checkAncestors(abs string) error {
	me := os.Geteuid()
	var parents []string
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		parents = append(parents, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(parents) - 1; i >= 0; i-- {
		p := parents[i]
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // created by us, below here
		}
		if err != nil {
			return fmt.Errorf("registry root %s: %w", abs, err)
		}
		uid := ownerOf(fi)
		if uid != me && uid != 0 {
			return fmt.Errorf("registry root %s lies under %s, which belongs to uid %d, who could swap what lies beneath it: pass a --root under directories only you (uid %d) and root control", abs, p, uid, me)
		}
		if fi.IsDir() && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("registry root %s lies under %s, which is writable by group or others (mode %04o) and not sticky: run `chmod go-w %s`, or pass another --root", abs, p, fi.Mode().Perm(), p)
		}
	}
	return nil
}

func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// createTemp makes a new file under tmp/ that no one else has opened.
func createTemp(root *os.Root, prefix string) (*os.File, string, error) {
	name := path.Join(tmpDir, prefix+rand.Text())
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	return f, name, err
}

// stage writes data to a new file under tmp/ and syncs it; place then
// renames it where it belongs. Between the two the file is whole but
// invisible: a crash leaves the old content, or the new, never a part.
func stage(root *os.Root, data []byte) (tmp string, err error) {
	f, tmp, err := createTemp(root, manifestPrefix)
	if err != nil {
		return "", err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// place renames a staged file to name (replacing a file or link there,
// never writing through it) and syncs the directory, so the rename
// survives a crash.
func place(root *os.Root, tmp, name string) error {
	if err := root.Rename(tmp, name); err != nil {
		return err
	}
	return syncDir(root, path.Dir(name))
}

func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// clearTmp removes what uploads and manifest writes a crash interrupted:
// of no use to anyone.
func clearTmp(root *os.Root) error {
	d, err := root.Open(tmpDir)
	if err != nil {
		return err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() && (strings.HasPrefix(e.Name(), uploadPrefix) || strings.HasPrefix(e.Name(), manifestPrefix)) {
			root.Remove(path.Join(tmpDir, e.Name()))
		}
	}
	return nil
}

// errBlobUnknown is pkg/registry's own, unexported, not-found error: the
// only one it answers 404 BLOB_UNKNOWN to. An empty in-memory blob
// handler hands it out.
var errBlobUnknown = func() error {
	_, err := ggcr.NewInMemoryBlobHandler().(ggcr.BlobStatHandler).Stat(context.Background(), "", v1.Hash{})
	return err
}()

// diskBlobs stores blobs by digest under blobs/. A blob is written to
// tmp/, synced, and renamed into place only once its digest checked out,
// so a crash or a bad upload never leaves a partial blob under a digest.
type diskBlobs struct {
	root  *os.Root
	quota *quota
}

// blobName is safe as a path: pkg/registry hands over only hashes that
// parsed (sha256 and 64 hex digits).
func blobName(h v1.Hash) string { return path.Join(blobsDir, h.Algorithm, h.Hex) }

func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errBlobUnknown
	}
	return err
}

func (d *diskBlobs) Stat(_ context.Context, _ string, h v1.Hash) (int64, error) {
	fi, err := d.root.Stat(blobName(h))
	if err != nil {
		return 0, notFound(err)
	}
	if !fi.Mode().IsRegular() {
		return 0, errBlobUnknown
	}
	return fi.Size(), nil
}

func (d *diskBlobs) Get(_ context.Context, _ string, h v1.Hash) (io.ReadCloser, error) {
	f, err := d.root.Open(blobName(h))
	if err != nil {
		return nil, notFound(err)
	}
	return f, nil
}

func (d *diskBlobs) Delete(_ context.Context, _ string, h v1.Hash) error {
	size, _ := d.Stat(context.Background(), "", h)
	if err := d.root.Remove(blobName(h)); err != nil {
		return notFound(err)
	}
	d.quota.release(size)
	return nil
}

// Put stores a blob within the registry's limits; a write past one
// fails, and the limit is handed to the request's limitedBlobWrite.
func (d *diskBlobs) Put(ctx context.Context, repo string, h v1.Hash, rc io.ReadCloser) error {
	err := d.put(h, rc)
	var tl *tooLargeError
	if errors.As(err, &tl) {
		if hit, ok := ctx.Value(limitKey{}).(*error); ok {
			*hit = tl
		}
	}
	return err
}

func (d *diskBlobs) put(h v1.Hash, rc io.ReadCloser) error {
	defer rc.Close()
	dir := path.Join(blobsDir, h.Algorithm)
	if err := d.root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, tmp, err := createTemp(d.root, uploadPrefix)
	if err != nil {
		return err
	}
	defer d.root.Remove(tmp) // a no-op once renamed
	qw := &quotaWriter{w: f, q: d.quota}
	kept := false
	defer func() {
		if !kept {
			d.quota.release(qw.written)
		}
	}()
	// rc verifies the digest as it is read: a mismatch fails the copy.
	if _, err := io.Copy(qw, rc); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	replaced, _ := d.Stat(context.Background(), "", h)
	if err := place(d.root, tmp, blobName(h)); err != nil {
		return err
	}
	kept = true
	d.quota.release(replaced)
	return nil
}

// quota keeps what blobs and manifests take under the root within the
// registry's limits.
type quota struct {
	root              *os.Root
	maxBlob, maxTotal int64
	mu                sync.Mutex
	used              int64 // stored, plus taken by writes in progress
}

// newQuota counts what the root holds already.
func newQuota(root *os.Root, maxBlob, maxTotal int64) (*quota, error) {
	if maxBlob <= 0 {
		maxBlob = DefaultMaxBlobSize
	}
	if maxTotal <= 0 {
		maxTotal = DefaultMaxStorage
	}
	q := &quota{root: root, maxBlob: maxBlob, maxTotal: maxTotal}
	for _, dir := range []string{blobsDir, manifestsDir} {
		err := fs.WalkDir(root.FS(), dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			fi, err := d.Info()
			if err == nil {
				q.used += fi.Size()
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return q, nil
}

// tooLargeError is a write refused by a limit: what, how much, and how
// to raise it.
type tooLargeError struct{ msg string }

func (e *tooLargeError) Error() string { return e.msg }

func (q *quota) blobTooLarge() error {
	return &tooLargeError{fmt.Sprintf("a blob larger than this registry's limit of %s per blob: raise it with `devk registry serve --max-blob-size SIZE`", humanBytes(q.maxBlob))}
}

// take counts n more bytes stored, or refuses them.
func (q *quota) take(n int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.used+n > q.maxTotal {
		return &tooLargeError{fmt.Sprintf("this push would take the registry's storage %s past its limit of %s (%s stored or being written): raise it with `devk registry serve --max-storage SIZE`, or start afresh (stop the registry, remove %s; `devk up` and `devk push` fill it again)",
			q.root.Name(), humanBytes(q.maxTotal), humanBytes(q.used), q.root.Name())}
	}
	var st syscall.Statfs_t
	if err := statfsRoot(q.root, &st); err == nil {
		if free := int64(st.Bavail) * int64(st.Bsize); free-n < MinFreeSpace {
			return &tooLargeError{fmt.Sprintf("the file system of %s has %s free and this registry keeps at least %s free: free some space",
				q.root.Name(), humanBytes(free), humanBytes(MinFreeSpace))}
		}
	}
	q.used += n
	return nil
}

// release counts n bytes no longer stored (or no longer being written).
func (q *quota) release(n int64) {
	q.mu.Lock()
	q.used -= n
	q.mu.Unlock()
}

func statfsRoot(root *os.Root, st *syscall.Statfs_t) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return syscall.Fstatfs(int(d.Fd()), st)
}

// quotaWriter writes one blob, counting it against the limits.
type quotaWriter struct {
	w       io.Writer
	q       *quota
	written int64
}

func (qw *quotaWriter) Write(p []byte) (int, error) {
	if qw.written+int64(len(p)) > qw.q.maxBlob {
		return 0, qw.q.blobTooLarge()
	}
	if err := qw.q.take(int64(len(p))); err != nil {
		return 0, err
	}
	n, err := qw.w.Write(p)
	qw.written += int64(len(p))
	return n, err
}

// humanBytes is n in binary units, as people read sizes.
func humanBytes(n int64) string {
	const unit = 1 << 10
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
