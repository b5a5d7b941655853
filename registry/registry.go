// Package registry is devk's embedded image registry: go-containerregistry's
// pkg/registry with blobs and manifests kept on disk, so what was pushed
// survives a restart. `devk registry serve` runs it on loopback.
package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/devk/devk/internal/fileutil"
)

// Dir is where a registry rooted at root keeps its content.
//
//	<root>/blobs/sha256/<hex>                 blobs, by digest
//	<root>/manifests/<repository>/<reference> manifests, by tag and by digest
//	<root>/tmp/                               uploads in progress
func blobsDir(root string) string     { return filepath.Join(root, "blobs") }
func manifestsDir(root string) string { return filepath.Join(root, "manifests") }
func tmpDir(root string) string       { return filepath.Join(root, "tmp") }

// New returns a registry handler whose content lives under root. Manifests
// stored there by earlier runs are loaded back; every manifest pushed or
// deleted is written to disk before the client is told it succeeded.
func New(root string, logger *log.Logger) (http.Handler, error) {
	for _, d := range []string{blobsDir(root), manifestsDir(root), tmpDir(root)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("registry storage: %w", err)
		}
	}
	// Uploads that a crash interrupted are of no use to anyone.
	if old, err := filepath.Glob(filepath.Join(tmpDir(root), "*")); err == nil {
		for _, f := range old {
			os.Remove(f)
		}
	}
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	inner := ggcr.New(ggcr.WithBlobHandler(newDiskBlobs(blobsDir(root), tmpDir(root))), ggcr.Logger(logger))
	h := &persisted{inner: inner, dir: manifestsDir(root), log: logger}
	if err := h.replay(); err != nil {
		return nil, err
	}
	return h, nil
}

// persisted stores manifests that go-containerregistry's registry keeps
// in memory only, and replays them into it on start.
type persisted struct {
	inner http.Handler
	dir   string
	log   *log.Logger
	// mu orders manifest changes, so memory and disk agree on which of
	// two concurrent pushes of one tag came last.
	mu sync.Mutex
}

// A repository name component and a tag or digest, as the distribution
// spec allows them; anything else never reaches the file system.
var (
	repoRE = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	refRE  = regexp.MustCompile(`^([A-Za-z0-9_][A-Za-z0-9._-]{0,127}|sha256:[a-f0-9]{64})$`)
)

// manifestTarget splits /v2/<repo>/manifests/<ref>.
func manifestTarget(path string) (repo, ref string, ok bool) {
	rest, found := strings.CutPrefix(path, "/v2/")
	if !found {
		return "", "", false
	}
	i := strings.LastIndex(rest, "/manifests/")
	if i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+len("/manifests/"):], true
}

func (p *persisted) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	repo, ref, isManifest := manifestTarget(req.URL.Path)
	if !isManifest || (req.Method != http.MethodPut && req.Method != http.MethodDelete) {
		p.inner.ServeHTTP(w, req)
		return
	}
	if !repoRE.MatchString(repo) || !refRE.MatchString(ref) {
		writeError(w, http.StatusBadRequest, "NAME_INVALID", fmt.Sprintf("invalid repository or reference %q:%q", repo, ref))
		return
	}
	var body []byte
	if req.Method == http.MethodPut {
		var err error
		if body, err = io.ReadAll(io.LimitReader(req.Body, 4<<20+1)); err != nil {
			writeError(w, http.StatusBadRequest, "MANIFEST_INVALID", err.Error())
			return
		}
		if len(body) > 4<<20 {
			writeError(w, http.StatusRequestEntityTooLarge, "MANIFEST_INVALID", "manifest larger than 4 MiB")
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	// The answer waits until the change is on disk: a client told
	// "created" can rely on the manifest surviving a restart.
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := httptest.NewRecorder()
	p.inner.ServeHTTP(rec, req)
	var err error
	switch {
	case req.Method == http.MethodPut && rec.Code == http.StatusCreated:
		err = p.store(repo, ref, req.Header.Get("Content-Type"), body)
	case req.Method == http.MethodDelete && rec.Code == http.StatusAccepted:
		err = os.Remove(p.path(repo, ref))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		p.log.Printf("persist manifest %s:%s: %v", repo, ref, err)
		writeError(w, http.StatusInternalServerError, "UNKNOWN", "storing the manifest failed: "+err.Error())
		return
	}
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

func (p *persisted) path(repo, ref string) string {
	return filepath.Join(p.dir, filepath.FromSlash(repo), ref)
}

// A stored manifest is its content type, a newline, and its bytes exactly
// as pushed (its digest is over those bytes).
func (p *persisted) store(repo, ref, contentType string, body []byte) error {
	path := p.path(repo, ref)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data := append([]byte(contentType+"\n"), body...)
	if err := fileutil.WriteAtomic(path, data, 0o644, ""); err != nil {
		return err
	}
	// A push by tag is also stored by digest, as the registry does.
	if !strings.HasPrefix(ref, "sha256:") {
		h, _, err := v1.SHA256(bytes.NewReader(body))
		if err != nil {
			return err
		}
		return fileutil.WriteAtomic(p.path(repo, h.String()), data, 0o644, "")
	}
	return nil
}

type storedManifest struct {
	repo, ref, contentType string
	body                   []byte
}

// replay PUTs every stored manifest into the in-memory registry, images
// before indexes (an index is accepted only when its children exist).
func (p *persisted) replay() error {
	var stored []storedManifest
	err := filepath.WalkDir(p.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		rel, err := filepath.Rel(p.dir, path)
		if err != nil {
			return err
		}
		repo, ref := filepath.ToSlash(filepath.Dir(rel)), d.Name()
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		ct, body, ok := bytes.Cut(data, []byte("\n"))
		if !ok || !repoRE.MatchString(repo) || !refRE.MatchString(ref) {
			p.log.Printf("ignoring %s: not a stored manifest", path)
			return nil
		}
		stored = append(stored, storedManifest{repo: repo, ref: ref, contentType: string(ct), body: body})
		return nil
	})
	if err != nil {
		return fmt.Errorf("load stored manifests from %s: %w", p.dir, err)
	}
	for pass := 0; pass < 2; pass++ {
		for _, m := range stored {
			isIndex := strings.Contains(m.contentType, "index") || strings.Contains(m.contentType, "manifest.list")
			if isIndex != (pass == 1) {
				continue
			}
			req := httptest.NewRequest(http.MethodPut, "/v2/"+m.repo+"/manifests/"+m.ref, bytes.NewReader(m.body))
			req.Header.Set("Content-Type", m.contentType)
			rec := httptest.NewRecorder()
			p.inner.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				return fmt.Errorf("load stored manifest %s:%s: registry answered %d %s (remove %s to drop it)",
					m.repo, m.ref, rec.Code, strings.TrimSpace(rec.Body.String()), p.path(m.repo, m.ref))
			}
		}
	}
	return nil
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"errors":[{"code":%q,"message":%q}]}`, code, msg)
}

// diskBlobs stores blobs by digest in pkg/registry's disk layout and
// reads them with its disk handler; it writes them itself: to a temp dir,
// synced before the rename, failed uploads removed, so a crash never
// leaves a partial blob under a digest.
type diskBlobs struct {
	read     ggcr.BlobHandler
	dir, tmp string
}

func newDiskBlobs(dir, tmp string) *diskBlobs {
	return &diskBlobs{read: ggcr.NewDiskBlobHandler(dir), dir: dir, tmp: tmp}
}

func (d *diskBlobs) path(h v1.Hash) string { return filepath.Join(d.dir, h.Algorithm, h.Hex) }

func (d *diskBlobs) Get(ctx context.Context, repo string, h v1.Hash) (io.ReadCloser, error) {
	return d.read.Get(ctx, repo, h)
}

func (d *diskBlobs) Stat(ctx context.Context, repo string, h v1.Hash) (int64, error) {
	return d.read.(ggcr.BlobStatHandler).Stat(ctx, repo, h)
}

func (d *diskBlobs) Delete(ctx context.Context, repo string, h v1.Hash) error {
	return d.read.(ggcr.BlobDeleteHandler).Delete(ctx, repo, h)
}

func (d *diskBlobs) Put(_ context.Context, _ string, h v1.Hash, rc io.ReadCloser) error {
	defer rc.Close()
	if err := os.MkdirAll(filepath.Join(d.dir, h.Algorithm), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.tmp, "upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	// rc verifies the digest as it is read: a mismatch fails the copy.
	if _, err := io.Copy(f, rc); err != nil {
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
	return os.Rename(f.Name(), d.path(h))
}
