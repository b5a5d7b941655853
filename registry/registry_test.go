package registry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/devk/devk/image"
)

func serve(t *testing.T, root string) string {
	t.Helper()
	return serveWith(t, root, nil)
}

// serveWith serves a registry on root over HTTP on loopback until the
// test ends, and returns its host:port.
func serveWith(t *testing.T, root string, o *Options) string {
	t.Helper()
	r, err := New(root, opts(o))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		srv.Close()
		r.Close()
	})
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t *testing.T, ref string, img v1.Image) v1.Hash {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, testAuth()); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestContentSurvivesRestart pushes to one registry, starts another on the
// same directory and pulls everything back, by tag and by digest; an
// index and a deletion survive too.
func TestContentSurvivesRestart(t *testing.T) {
	root := t.TempDir()
	addr := serveWith(t, root, &Options{AllowDelete: true})
	img := randomImage(t)
	d := push(t, addr+"/team/kube-apiserver:v1.34.0", img)
	other := push(t, addr+"/kubectl:v1", randomImage(t))
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: img})
	idxRef, _ := name.ParseReference(addr + "/team/kube-apiserver:multi")
	if err := remote.WriteIndex(idxRef, idx, testAuth()); err != nil {
		t.Fatal(err)
	}
	gone, _ := name.ParseReference(addr + "/kubectl:v1")
	if err := remote.Delete(gone, testAuth()); err != nil {
		t.Fatal(err)
	}

	addr2 := serve(t, root)
	for _, ref := range []string{addr2 + "/team/kube-apiserver:v1.34.0", addr2 + "/team/kube-apiserver@" + d.String()} {
		r, _ := name.ParseReference(ref)
		got, err := remote.Image(r)
		if err != nil {
			t.Fatalf("after restart %s: %v", ref, err)
		}
		if err := validate.Image(got); err != nil {
			t.Fatalf("after restart %s is not whole: %v", ref, err)
		}
		if gd, _ := got.Digest(); gd != d {
			t.Fatalf("%s has digest %s, pushed %s", ref, gd, d)
		}
	}
	r, _ := name.ParseReference(addr2 + "/team/kube-apiserver:multi")
	if _, err := remote.Index(r); err != nil {
		t.Fatalf("index after restart: %v", err)
	}
	r, _ = name.ParseReference(addr2 + "/kubectl:v1")
	if _, err := remote.Head(r); err == nil {
		t.Fatal("a deleted tag came back after restart")
	}
	r, _ = name.ParseReference(addr2 + "/kubectl@" + other.String())
	if _, err := remote.Head(r); err != nil {
		t.Fatalf("the digest of a deleted tag is gone: %v", err)
	}
	if tmp, _ := os.ReadDir(filepath.Join(root, tmpDir)); len(tmp) != 0 {
		t.Fatalf("uploads left in %s: %v", filepath.Join(root, tmpDir), tmp)
	}
}

func TestRejectsUnsafeNames(t *testing.T) {
	root := t.TempDir()
	h, err := New(root, opts(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	manifest := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`
	for path, want := range map[string]int{
		"/v2/../../etc/manifests/x":     http.StatusBadRequest,
		"/v2/a/manifests/..":            http.StatusBadRequest,
		"/v2/UPPER/manifests/v1":        http.StatusBadRequest,
		"/v2/a/manifests/sha256:nothex": http.StatusBadRequest,
		"/v2//manifests/v1":             http.StatusBadRequest,
		// pkg/registry alone would take these as a:v1, in memory only.
		"/x/a/manifests/v1": http.StatusNotFound,
		"//a/manifests/v1":  http.StatusNotFound,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPut, "http://x/", strings.NewReader(manifest))
		req.URL.Path = path // keep the dots as a raw client would send them
		req.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		h.ServeHTTP(rec, withCredential(req))
		if rec.Code != want {
			t.Errorf("PUT %s: %d, want %d", path, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v2/a/manifests/v1", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("a refused PUT is served: GET a:v1 answers %d", rec.Code)
	}
	var files []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 0 {
		t.Fatalf("files written: %v", files)
	}
}

func TestCorruptBlobUploadLeavesNothing(t *testing.T) {
	root := t.TempDir()
	addr := serve(t, root)
	// A monolithic upload whose body does not match its digest.
	bad := "sha256:" + strings.Repeat("a", 64)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v2/x/blobs/uploads/?digest="+bad, strings.NewReader("not that"))
	resp, err := http.DefaultClient.Do(withCredential(req))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Fatalf("a blob with the wrong digest was accepted: %d", resp.StatusCode)
	}
	blobs, _ := filepath.Glob(filepath.Join(root, blobsDir, "sha256", "*"))
	tmp, _ := os.ReadDir(filepath.Join(root, tmpDir))
	if len(blobs)+len(tmp) != 0 {
		t.Fatalf("left behind: %v %v", blobs, tmp)
	}
}

func TestList(t *testing.T) {
	addr := serve(t, t.TempDir())
	d1 := push(t, addr+"/kube-apiserver:v1.34.0", randomImage(t))
	d2 := push(t, addr+"/kube-apiserver:v1.34.1", randomImage(t))
	d3 := push(t, addr+"/team/kubectl:v1", randomImage(t))
	r, err := image.NewRemote(addr, image.RemoteOptions{Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	repos, err := List(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, repo := range repos {
		for _, tag := range repo.Tags {
			got += repo.Name + ":" + tag.Tag + "@" + tag.Digest + "\n"
		}
	}
	want := "kube-apiserver:v1.34.0@" + d1.String() + "\nkube-apiserver:v1.34.1@" + d2.String() + "\nteam/kubectl:v1@" + d3.String() + "\n"
	if got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}

	// With a prefix, only what lies under it.
	r, _ = image.NewRemote(addr+"/team", image.RemoteOptions{Keychain: authn.NewMultiKeychain()})
	repos, err = List(context.Background(), r)
	if err != nil || len(repos) != 1 || repos[0].Name != "team/kubectl" {
		t.Fatalf("prefixed list %+v, %v", repos, err)
	}
}

// opts is o (nil: none) with the tests' credential file.
func opts(o *Options) *Options {
	c := Options{}
	if o != nil {
		c = *o
	}
	c.CredentialFile = testCredential
	return &c
}

func testSecret() string {
	s, err := image.LoadCredential(testCredential)
	if err != nil {
		panic(err)
	}
	return s
}

// testAuth has go-containerregistry's clients send the tests' credential.
func testAuth() remote.Option {
	return remote.WithAuth(&authn.Basic{Username: image.RegistryUser, Password: testSecret()})
}

// withCredential adds the tests' credential to a raw request.
func withCredential(req *http.Request) *http.Request {
	req.SetBasicAuth(image.RegistryUser, testSecret())
	return req
}
