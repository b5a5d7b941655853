package registry

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

// FuzzManifestPut drives the registry's handler with a manifest PUT of a
// fuzzed repository, reference, content type and body, in a root holding
// symlinks that lead out of it. Properties: no panic; nothing appears
// outside the root; a PUT answered 201 can be read back byte for byte,
// also after a restart; a PUT answered otherwise leaves nothing behind.
func FuzzManifestPut(f *testing.F) {
	oci := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}`)
	index := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`)
	docker := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json"}`)
	for _, seed := range []struct {
		repo, ref, contentType string
		body                   []byte
	}{
		{"kube-apiserver", "v1.34.0", string(types.OCIManifestSchema1), oci},
		{"team/kubectl", digestOf(oci), string(types.OCIManifestSchema1), oci},
		{"team/kubectl", "sha256:" + strings.Repeat("0", 64), string(types.OCIManifestSchema1), oci},
		{"a", "multi", string(types.OCIImageIndex), index},
		{"a", "v1", string(types.DockerManifestSchema2), docker},
		{"a", "v1", string(types.DockerManifestList) + "; charset=utf-8", []byte(`{"schemaVersion":2,"manifests":[]}`)},
		{"out", "authorized_keys", string(types.OCIManifestSchema1), oci},     // a link out
		{"up/x", "authorized_keys", string(types.OCIManifestSchema1), oci},    // beneath a link out
		{"keys", "authorized_keys", string(types.OCIManifestSchema1), oci},    // a link out at the file
		{"keys", "authorized_keys", "ssh-ed25519 AAAA attacker", []byte("x")}, // the reported attack
		{"..", "..", string(types.OCIManifestSchema1), oci},
		{"a/../../..", "x", string(types.OCIManifestSchema1), oci},
		{"a", "../../../../tmp/x", string(types.OCIManifestSchema1), oci},
		{"a", "v1", "application/json", []byte(`{"schemaVersion":2}`)},
		{"a", "v1", string(types.OCIManifestSchema1), []byte(`{"schemaVersion":2,"mediaType":"text/plain"}`)},
	} {
		f.Add(seed.repo, seed.ref, seed.contentType, seed.body)
	}
	f.Fuzz(func(t *testing.T, repo, ref, contentType string, body []byte) {
		parent := fastTempDir(t)
		root, outside := filepath.Join(parent, "root"), filepath.Join(parent, "outside")
		for _, d := range []string{filepath.Join(root, "manifests/keys"), outside} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for link, target := range map[string]string{
			"manifests/out":                  outside,
			"manifests/up":                   "../../outside",
			"manifests/keys/authorized_keys": filepath.Join(outside, "authorized_keys"),
		} {
			if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
				t.Fatal(err)
			}
		}
		r, err := New(root, opts(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()

		target := "/v2/" + repo + "/manifests/" + ref
		put := httptest.NewRequest(http.MethodPut, "/", bytes.NewReader(body))
		put.URL.Path = target // as sent, dots and all
		put.Header.Set("Content-Type", contentType)
		withCredential(put)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, put)

		if entries := names(t, parent); entries != "outside root" {
			t.Fatalf("beside the root: %s", entries)
		}
		if entries := names(t, outside); entries != "" {
			t.Fatalf("written outside the root: %s", entries)
		}
		if !repoRE.MatchString(repo) || !refRE.MatchString(ref) {
			if rec.Code < 400 || rec.Code >= 500 {
				t.Fatalf("PUT %q: %d for an invalid name, want 4xx", target, rec.Code)
			}
			return
		}
		get := func(r *Registry) (int, []byte) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.URL.Path = target
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, req)
			return rec.Code, rec.Body.Bytes()
		}
		if rec.Code != http.StatusCreated {
			if code, _ := get(r); code != http.StatusNotFound {
				t.Fatalf("PUT %q answered %d, yet GET answers %d", target, rec.Code, code)
			}
			return
		}
		if code, got := get(r); code != http.StatusOK || !bytes.Equal(got, body) {
			t.Fatalf("GET %q after a 201: %d, %q; pushed %q", target, code, got, body)
		}
		restarted, err := New(root, opts(nil))
		if err != nil {
			t.Fatalf("restart after PUT %q: %v", target, err)
		}
		defer restarted.Close()
		if code, got := get(restarted); code != http.StatusOK || !bytes.Equal(got, body) {
			t.Fatalf("GET %q after a restart: %d, %q; pushed %q", target, code, got, body)
		}
	})
}

// names lists dir's entries, sorted, space-separated.
func names(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// fastTempDir is a temp dir in memory (/dev/shm) when there is one: the
// registry fsyncs every manifest, which on a disk costs milliseconds an
// exec and would leave the fuzzer a few execs a second.
func fastTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "devk-fuzz-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
