// Package registry is devk's embedded image registry: go-containerregistry's
// pkg/registry with blobs and manifests kept on disk, so what was pushed
// survives a restart. `devk registry serve` runs it on loopback.
package registry

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/image"
)

// Options configure a Registry.
type Options struct {
	// Log receives one line per request when set.
	Log *log.Logger
	// AllowDelete lets clients delete manifests and blobs; without it
	// a DELETE is answered 405 UNSUPPORTED.
	AllowDelete bool
	// CredentialFile holds the secret every write (PUT, POST, PATCH,
	// DELETE) must carry, as the password of user image.RegistryUser in
	// basic auth; made when missing (image.EnsureCredential). Required:
	// reads are open to anyone who reaches the registry, writes only to
	// whoever can read this file.
	CredentialFile string
	// MaxBlobSize bounds one blob; zero means DefaultMaxBlobSize.
	MaxBlobSize int64
	// MaxStorage bounds what blobs and manifests take under the root
	// together; zero means DefaultMaxStorage.
	MaxStorage int64
}

// How much a push may store: refused beyond these (413 DENIED, saying
// how to raise them: `devk registry serve --max-blob-size/--max-storage`),
// and whenever a write would leave less than MinFreeSpace free on the
// root's file system.
const (
	DefaultMaxBlobSize = 4 << 30
	DefaultMaxStorage  = 64 << 30
	MinFreeSpace       = 2 << 30
)

// Registry is the registry's HTTP handler and its storage.
type Registry struct {
	inner          http.Handler
	root           *os.Root
	allowDelete    bool
	log            *log.Logger
	secret         string
	credentialFile string
	quota          *quota
	// mu orders manifest changes, so memory and disk agree on which of
	// two concurrent pushes of one tag came last.
	mu sync.Mutex
}

// New returns a registry whose content lives under the directory root,
// which must belong to the running user and be writable by no one else
// (see openRoot); it is created when missing. Manifests stored there by
// earlier runs are loaded back; every manifest pushed or deleted is on
// disk before the client is told it succeeded. o may be nil.
func New(root string, o *Options) (*Registry, error) {
	r, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	reg, err := newRegistry(r, o)
	if err != nil {
		r.Close()
		return nil, err
	}
	return reg, nil
}

// newRegistry serves the content under root, which it takes over.
func newRegistry(root *os.Root, o *Options) (*Registry, error) {
	if o == nil || o.CredentialFile == "" {
		return nil, errors.New("the registry needs a credential file for writes (Options.CredentialFile)")
	}
	secret, err := image.EnsureCredential(o.CredentialFile)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{blobsDir, manifestsDir, tmpDir} {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("registry storage %s: %w", root.Name(), err)
		}
	}
	if err := clearTmp(root); err != nil {
		return nil, fmt.Errorf("registry storage %s: %w", root.Name(), err)
	}
	logger := o.Log
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	q, err := newQuota(root, o.MaxBlobSize, o.MaxStorage)
	if err != nil {
		return nil, fmt.Errorf("registry storage %s: %w", root.Name(), err)
	}
	r := &Registry{
		inner:          ggcr.New(ggcr.WithBlobHandler(&diskBlobs{root: root, quota: q}), ggcr.Logger(logger)),
		root:           root,
		allowDelete:    o.AllowDelete,
		log:            logger,
		secret:         secret,
		credentialFile: o.CredentialFile,
		quota:          q,
	}
	if err := r.replay(); err != nil {
		return nil, err
	}
	return r, nil
}

// Close releases the storage directory; requests after it fail.
func (r *Registry) Close() error { return r.root.Close() }

// A repository name component and a tag or digest, as the distribution
// spec allows them; anything else never reaches the file system.
var (
	repoRE = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	refRE  = regexp.MustCompile(`^([A-Za-z0-9_][A-Za-z0-9._-]{0,127}|sha256:[a-f0-9]{64})$`)
)

// manifestMediaTypes are what a manifest PUT may carry: image manifests
// and indexes, OCI and Docker v2. Docker's schema 1 has been unsupported
// by Docker itself for years, and nothing devk pushes uses it.
var manifestMediaTypes = map[types.MediaType]bool{
	types.OCIManifestSchema1:    true,
	types.OCIImageIndex:         true,
	types.DockerManifestSchema2: true,
	types.DockerManifestList:    true,
}

// maxManifest bounds a manifest's size, as registries commonly do.
const maxManifest = 4 << 20

// manifestTarget splits /v2/<repo>/manifests/<ref> as pkg/registry does:
// by the next-to-last path element, so a ref holding a slash, or a repo
// holding "manifests", is no manifest here either.
func manifestTarget(path string) (repo, ref string, ok bool) {
	elems := strings.Split(path, "/") // "", "v2", repo..., "manifests", ref
	if len(elems) < 5 || elems[0] != "" || elems[1] != "v2" || elems[len(elems)-2] != "manifests" {
		return "", "", false
	}
	return strings.Join(elems[2:len(elems)-2], "/"), elems[len(elems)-1], true
}

// manifestName is where repo:ref is stored, beneath the root.
func manifestName(repo, ref string) string { return path.Join(manifestsDir, repo, ref) }

// checkManifest accepts a manifest push whose content type is one of
// manifestMediaTypes and whose body is a schema 2 manifest of that type
// (by the digest ref names, if it names one). It returns the media type
// without parameters.
func checkManifest(contentType, ref string, body []byte) (types.MediaType, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || !manifestMediaTypes[types.MediaType(mt)] {
		return "", fmt.Errorf("content type %q is not an OCI or Docker v2 image manifest or index", contentType)
	}
	var m struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return "", fmt.Errorf("manifest is not a JSON object: %v", err)
	}
	if m.SchemaVersion != 2 {
		return "", fmt.Errorf("manifest schemaVersion is %d, not 2", m.SchemaVersion)
	}
	if m.MediaType != "" && m.MediaType != mt {
		return "", fmt.Errorf("manifest says its mediaType is %q, but it was pushed as %q", m.MediaType, mt)
	}
	if want, ok := strings.CutPrefix(ref, "sha256:"); ok {
		h, _, _ := v1.SHA256(bytes.NewReader(body))
		if h.Hex != want {
			return "", fmt.Errorf("manifest has digest %s, not %s", h, ref)
		}
	}
	return types.MediaType(mt), nil
}

func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// pkg/registry serves any prefix (PUT /x/a/manifests/v1 would store
	// a:v1): only the API's own reaches it, and through the checks below.
	if req.URL.Path != "/v2" && !strings.HasPrefix(req.URL.Path, "/v2/") {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "not a registry API path: they begin /v2/")
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead && !r.authorized(req) {
		w.Header().Set("WWW-Authenticate", `Basic realm="devk registry"`)
		writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", fmt.Sprintf(
			"pushing to (or deleting from) devk's registry needs devk's credential: push with devk run by the user that runs this registry "+
				"(`devk push`, `devk build --push`, `devk up`), which sends it; another client logs in as user %q with the secret in %s "+
				"(`devk registry credential` prints it); reads need none", image.RegistryUser, r.credentialFile))
		return
	}
	if req.Method == http.MethodDelete && !r.allowDelete {
		writeError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry does not delete: start it with --allow-delete to allow it")
		return
	}
	repo, ref, isManifest := manifestTarget(req.URL.Path)
	if !isManifest || (req.Method != http.MethodPut && req.Method != http.MethodDelete) {
		if isBlobWrite(req) {
			r.limitedBlobWrite(w, req)
			return
		}
		r.inner.ServeHTTP(w, req)
		return
	}
	if !repoRE.MatchString(repo) || !refRE.MatchString(ref) {
		writeError(w, http.StatusBadRequest, "NAME_INVALID", fmt.Sprintf("invalid repository or reference %q:%q", repo, ref))
		return
	}
	if req.Method == http.MethodDelete {
		r.deleteManifest(w, req, repo, ref)
		return
	}
	r.putManifest(w, req, repo, ref)
}

// putManifest stores the manifest before the in-memory registry takes
// it, and moves it into place once it did: a client told "created" can
// rely on the manifest surviving a restart, and one told otherwise
// finds nothing changed.
func (r *Registry) putManifest(w http.ResponseWriter, req *http.Request, repo, ref string) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxManifest+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "MANIFEST_INVALID", err.Error())
		return
	}
	if len(body) > maxManifest {
		writeError(w, http.StatusRequestEntityTooLarge, "MANIFEST_INVALID", fmt.Sprintf("manifest larger than %d MiB", maxManifest>>20))
		return
	}
	mt, err := checkManifest(req.Header.Get("Content-Type"), ref, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "MANIFEST_INVALID", err.Error())
		return
	}
	// A push by tag is also stored by digest, as the registry does.
	h, _, _ := v1.SHA256(bytes.NewReader(body))
	names := []string{manifestName(repo, ref)}
	if ref != h.String() {
		names = append(names, manifestName(repo, h.String()))
	}
	data := append([]byte(string(mt)+"\n"), body...)
	var staged []string
	defer func() {
		for _, tmp := range staged {
			r.root.Remove(tmp) // a no-op once placed
		}
	}()
	fail := func(err error) {
		r.log.Printf("persist manifest %s:%s: %v", repo, ref, err)
		writeError(w, http.StatusInternalServerError, "UNKNOWN", "storing the manifest failed: "+err.Error())
	}
	taken := int64(len(data) * len(names))
	if err := r.quota.take(taken); err != nil {
		writeLimit(w, err)
		return
	}
	defer func() { r.quota.release(taken) }() // what was not placed
	if err := r.root.MkdirAll(path.Join(manifestsDir, repo), 0o755); err != nil {
		fail(err)
		return
	}
	for range names {
		tmp, err := stage(r.root, data)
		if err != nil {
			fail(err)
			return
		}
		staged = append(staged, tmp)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	req.Header.Set("Content-Type", string(mt))
	req.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	r.inner.ServeHTTP(rec, req)
	if rec.Code == http.StatusCreated {
		for i, name := range names {
			replaced := r.sizeOf(name)
			if err := place(r.root, staged[i], name); err != nil {
				fail(err)
				return
			}
			taken -= int64(len(data))
			r.quota.release(replaced)
		}
	}
	copyResponse(w, rec)
}

// sizeOf is the size of the regular file name beneath the root, 0 when
// there is none.
func (r *Registry) sizeOf(name string) int64 {
	if fi, err := r.root.Lstat(name); err == nil && fi.Mode().IsRegular() {
		return fi.Size()
	}
	return 0
}

// authorized reports whether a request carries the registry's credential.
func (r *Registry) authorized(req *http.Request) bool {
	user, pass, ok := req.BasicAuth()
	return ok && user == image.RegistryUser && subtle.ConstantTimeCompare([]byte(pass), []byte(r.secret)) == 1
}

// isBlobWrite is a request that sends blob data: POST, PATCH or PUT
// under /v2/<repo>/blobs/uploads/.
func isBlobWrite(req *http.Request) bool {
	switch req.Method {
	case http.MethodPost, http.MethodPatch, http.MethodPut:
		return strings.Contains(req.URL.Path, "/blobs/uploads")
	}
	return false
}

// limitKey carries, in a blob write's context, where diskBlobs.Put puts
// the limit a write ran into.
type limitKey struct{}

// limitedBlobWrite serves a blob upload within the size limits: a blob
// stored on disk (POST with the data, PUT) is counted as it is written;
// a chunk (PATCH), which pkg/registry keeps in memory until the PUT, is
// cut off at the per-blob limit. Either is answered 413 DENIED, saying
// how to raise the limit.
func (r *Registry) limitedBlobWrite(w http.ResponseWriter, req *http.Request) {
	var hit error
	ctx := context.WithValue(req.Context(), limitKey{}, &hit)
	req = req.WithContext(ctx)
	if req.Method == http.MethodPatch {
		var start int64
		if cr := req.Header.Get("Content-Range"); cr != "" {
			fmt.Sscanf(cr, "%d-", &start)
		}
		req.Body = &limitedBody{rc: req.Body, left: r.quota.maxBlob - start, hit: &hit, q: r.quota}
	}
	rec := httptest.NewRecorder()
	r.inner.ServeHTTP(rec, req)
	if hit != nil {
		writeLimit(w, hit)
		return
	}
	copyResponse(w, rec)
}

// limitedBody ends a chunk's body with the per-blob limit's error past left
// bytes. (pkg/registry keeps what it read of a refused chunk in memory
// under its upload, at most the limit, until the registry stops.)
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	hit  *error
	q    *quota
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.left -= int64(n); b.left < 0 {
		*b.hit = b.q.blobTooLarge()
		return 0, *b.hit
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// writeLimit answers a write refused by a size limit, or failed.
func writeLimit(w http.ResponseWriter, err error) {
	var tl *tooLargeError
	if errors.As(err, &tl) {
		writeError(w, http.StatusRequestEntityTooLarge, "DENIED", tl.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
}

func (r *Registry) deleteManifest(w http.ResponseWriter, req *http.Request, repo, ref string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := httptest.NewRecorder()
	r.inner.ServeHTTP(rec, req)
	if rec.Code == http.StatusAccepted {
		name := manifestName(repo, ref)
		size := r.sizeOf(name)
		err := r.root.Remove(name)
		if err == nil {
			r.quota.release(size)
		}
		if err == nil {
			err = syncDir(r.root, path.Dir(name))
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.log.Printf("delete manifest %s:%s: %v", repo, ref, err)
			writeError(w, http.StatusInternalServerError, "UNKNOWN", "deleting the stored manifest failed: "+err.Error())
			return
		}
	}
	copyResponse(w, rec)
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

type storedManifest struct {
	repo, ref string
	mediaType types.MediaType
	body      []byte
}

// replay PUTs every stored manifest into the in-memory registry, images
// before indexes (an index is accepted only when its children exist).
// What is not a stored manifest is left alone, and logged.
func (r *Registry) replay() error {
	var stored []storedManifest
	err := fs.WalkDir(r.root.FS(), manifestsDir, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		if !d.Type().IsRegular() {
			r.log.Printf("ignoring %s: not a regular file", r.path(name))
			return nil
		}
		repo, ref := strings.TrimPrefix(path.Dir(name), manifestsDir+"/"), d.Name()
		data, err := r.root.ReadFile(name)
		if err != nil {
			return err
		}
		ct, body, _ := bytes.Cut(data, []byte("\n"))
		mt, err := checkManifest(string(ct), ref, body)
		if err == nil && (!repoRE.MatchString(repo) || !refRE.MatchString(ref)) {
			err = errors.New("not a repository and reference")
		}
		if err != nil {
			r.log.Printf("ignoring %s: not a stored manifest: %v (remove it to drop it)", r.path(name), err)
			return nil
		}
		stored = append(stored, storedManifest{repo: repo, ref: ref, mediaType: mt, body: body})
		return nil
	})
	if err != nil {
		return fmt.Errorf("load stored manifests from %s: %w", r.path(manifestsDir), err)
	}
	for pass := 0; pass < 2; pass++ {
		for _, m := range stored {
			if m.mediaType.IsIndex() != (pass == 1) {
				continue
			}
			req := httptest.NewRequest(http.MethodPut, "/v2/"+m.repo+"/manifests/"+m.ref, bytes.NewReader(m.body))
			req.Header.Set("Content-Type", string(m.mediaType))
			rec := httptest.NewRecorder()
			r.inner.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				return fmt.Errorf("load stored manifest %s:%s: registry answered %d %s (remove %s to drop it)",
					m.repo, m.ref, rec.Code, strings.TrimSpace(rec.Body.String()), r.path(manifestName(m.repo, m.ref)))
			}
		}
	}
	return nil
}

// path is name beneath the root as a path to show people.
func (r *Registry) path(name string) string {
	return filepath.Join(r.root.Name(), filepath.FromSlash(name))
}

// writeError answers with the distribution spec's error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	type specError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body, _ := json.Marshal(struct {
		Errors []specError `json:"errors"`
	}{[]specError{{code, msg}}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
