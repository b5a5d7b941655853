package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func do(t *testing.T, method, url, contentType string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(withCredential(req))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, got
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestManifestPutMediaTypes: only OCI and Docker v2 image manifests and
// indexes are stored, and only when the body is what the type says.
func TestManifestPutMediaTypes(t *testing.T) {
	addr := serve(t, t.TempDir())
	manifest := func(mediaType string) []byte {
		m := map[string]any{"schemaVersion": 2, "config": map[string]any{}, "layers": []any{}}
		if mediaType != "" {
			m["mediaType"] = mediaType
		}
		b, _ := json.Marshal(m)
		return b
	}
	index := func(mediaType string) []byte {
		b, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaType, "manifests": []any{}})
		return b
	}
	oci := manifest(string(types.OCIManifestSchema1))
	tests := []struct {
		name        string
		ref         string
		contentType string
		body        []byte
		want        int
	}{
		{"oci manifest", "v1", string(types.OCIManifestSchema1), oci, http.StatusCreated},
		{"oci manifest without mediaType", "v1", string(types.OCIManifestSchema1), manifest(""), http.StatusCreated},
		{"oci manifest with a parameter", "v1", string(types.OCIManifestSchema1) + "; charset=utf-8", oci, http.StatusCreated},
		{"oci index", "v1", string(types.OCIImageIndex), index(string(types.OCIImageIndex)), http.StatusCreated},
		{"docker manifest", "v1", string(types.DockerManifestSchema2), manifest(string(types.DockerManifestSchema2)), http.StatusCreated},
		{"docker list", "v1", string(types.DockerManifestList), index(string(types.DockerManifestList)), http.StatusCreated},
		{"by its digest", digestOf(oci), string(types.OCIManifestSchema1), oci, http.StatusCreated},

		{"by another digest", "sha256:" + strings.Repeat("a", 64), string(types.OCIManifestSchema1), oci, http.StatusBadRequest},
		{"no content type", "v1", "", oci, http.StatusBadRequest},
		{"text", "v1", "text/plain", oci, http.StatusBadRequest},
		{"a key as the type", "authorized_keys", "ssh-ed25519 AAAA attacker", []byte("ssh-ed25519 AAAA attacker\n"), http.StatusBadRequest},
		{"docker schema 1", "v1", string(types.DockerManifestSchema1), oci, http.StatusBadRequest},
		{"oci layer", "v1", string(types.OCILayer), oci, http.StatusBadRequest},
		{"type in body disagrees", "v1", string(types.OCIManifestSchema1), manifest(string(types.DockerManifestSchema2)), http.StatusBadRequest},
		{"not json", "v1", string(types.OCIManifestSchema1), []byte("ssh-ed25519 AAAA attacker\n"), http.StatusBadRequest},
		{"json array", "v1", string(types.OCIManifestSchema1), []byte("[]"), http.StatusBadRequest},
		{"json null", "v1", string(types.OCIManifestSchema1), []byte("null"), http.StatusBadRequest},
		{"schema 1", "v1", string(types.OCIManifestSchema1), []byte(`{"schemaVersion":1}`), http.StatusBadRequest},
		{"too large", "v1", string(types.OCIManifestSchema1), bytes.Repeat([]byte(" "), maxManifest+1), http.StatusRequestEntityTooLarge},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A repository per case: a refused push must leave nothing.
			url := "http://" + addr + "/v2/case" + string(rune('a'+i)) + "/manifests/" + tc.ref
			resp, msg := do(t, http.MethodPut, url, tc.contentType, tc.body)
			if resp.StatusCode != tc.want {
				t.Fatalf("PUT: %d %s, want %d", resp.StatusCode, msg, tc.want)
			}
			resp, got := do(t, http.MethodGet, url, "", nil)
			if tc.want != http.StatusCreated {
				if resp.StatusCode != http.StatusNotFound {
					t.Fatalf("a refused manifest answers GET with %d", resp.StatusCode)
				}
				return
			}
			if resp.StatusCode != http.StatusOK || !bytes.Equal(got, tc.body) {
				t.Fatalf("GET: %d, body %q, pushed %q", resp.StatusCode, got, tc.body)
			}
		})
	}
}

// TestDelete: deletes are refused unless the registry allows them.
func TestDelete(t *testing.T) {
	tests := []struct {
		name        string
		allowDelete bool
		want        int
	}{
		{"refused by default", false, http.StatusMethodNotAllowed},
		{"allowed with the option", true, http.StatusAccepted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			addr := serveWith(t, root, &Options{AllowDelete: tc.allowDelete})
			img := randomImage(t)
			d := push(t, addr+"/kubectl:v1", img)
			layers, _ := img.Layers()
			blob, _ := layers[0].Digest()
			for _, path := range []string{
				"/v2/kubectl/manifests/v1",
				"/v2/kubectl/manifests/" + d.String(),
				"/v2/kubectl/blobs/" + blob.String(),
			} {
				resp, body := do(t, http.MethodDelete, "http://"+addr+path, "", nil)
				if resp.StatusCode != tc.want {
					t.Fatalf("DELETE %s: %d %s, want %d", path, resp.StatusCode, body, tc.want)
				}
				if !tc.allowDelete && !strings.Contains(string(body), `"UNSUPPORTED"`) {
					t.Fatalf("DELETE %s: %s, want the distribution spec's UNSUPPORTED", path, body)
				}
			}
			// After a restart too: the tag is there only if deletes
			// were refused.
			addr2 := serve(t, root)
			for _, ref := range []string{addr + "/kubectl:v1", addr2 + "/kubectl:v1"} {
				r, _ := name.ParseReference(ref)
				_, err := remote.Head(r)
				var te *transport.Error
				switch {
				case !tc.allowDelete && err != nil:
					t.Fatalf("%s after a refused delete: %v", ref, err)
				case tc.allowDelete && !(errors.As(err, &te) && te.StatusCode == http.StatusNotFound):
					t.Fatalf("%s after a delete: %v, want 404", ref, err)
				}
			}
		})
	}
}
