package registry

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// TestBlobSizeLimit: a blob above the limit is refused 413 DENIED, saying
// the limit and the flag that raises it, whether it comes in one request
// (POST with the data) or streamed (PATCH, as go-containerregistry
// pushes), and nothing of it is stored.
func TestBlobSizeLimit(t *testing.T) {
	root := t.TempDir()
	addr := serveWith(t, root, &Options{MaxBlobSize: 64 << 10})
	big := make([]byte, 100<<10)
	rand.Read(big)

	code, e := request(t, http.MethodPost, "http://"+addr+"/v2/lim/x/blobs/uploads/?digest="+digestOf(big), bytes.NewReader(big), withCredentialFunc)
	if code != http.StatusRequestEntityTooLarge || len(e.Errors) != 1 || e.Errors[0].Code != "DENIED" ||
		!strings.Contains(e.Errors[0].Message, "64.0 KiB per blob") || !strings.Contains(e.Errors[0].Message, "--max-blob-size") {
		t.Errorf("monolithic upload of 100 KiB: %d %+v, want 413 DENIED naming 64 KiB and --max-blob-size", code, e)
	}

	img, err := random.Image(100<<10, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(addr + "/lim/x:big")
	err = remote.Write(ref, img, testAuth(), remote.WithRetryBackoff(remote.Backoff{Steps: 1}))
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(err.Error(), "--max-blob-size") {
		t.Fatalf("streamed push of a 100 KiB layer: %v, want 413 naming --max-blob-size", err)
	}
	// Nothing of the big blobs is stored (the image's small config blob
	// may be: it was within the limit); uploads still in flight when the
	// client gave up end within moments.
	ls, _ := img.Layers()
	ld, _ := ls[0].Digest()
	for _, h := range []string{digestOf(big), ld.String()} {
		if _, err := os.Stat(filepath.Join(root, blobsDir, "sha256", strings.TrimPrefix(h, "sha256:"))); err == nil {
			t.Errorf("the refused blob %s is stored", h)
		}
	}
	waitNoUploads(t, root)
	// Below the limit, pushes go through.
	push(t, addr+"/lim/x:small", randomImageOf(t, 16<<10))
}

// TestStorageLimit: what is under the root, counted at start and as
// pushes come, stays under --max-storage; a push past it is refused,
// naming the flag.
func TestStorageLimit(t *testing.T) {
	root := t.TempDir()
	o := &Options{MaxStorage: 200 << 10}
	addr := serveWith(t, root, o)
	push(t, addr+"/lim/x:1", randomImageOf(t, 120<<10))
	ref, _ := name.ParseReference(addr + "/lim/x:2")
	err := remote.Write(ref, randomImageOf(t, 120<<10), testAuth(), remote.WithRetryBackoff(remote.Backoff{Steps: 1}))
	if err == nil || !strings.Contains(err.Error(), "--max-storage") || !strings.Contains(err.Error(), "past its limit of 200.0 KiB") {
		t.Fatalf("a push past the storage limit: %v, want a refusal naming --max-storage", err)
	}
	waitNoUploads(t, root)
	// A restart counts what is stored.
	addr2 := serveWith(t, root, o)
	ref, _ = name.ParseReference(addr2 + "/lim/x:3")
	if err := remote.Write(ref, randomImageOf(t, 120<<10), testAuth(), remote.WithRetryBackoff(remote.Backoff{Steps: 1})); err == nil {
		t.Fatal("after a restart a push past the storage limit went through")
	}
	// Deleting frees space again.
	o2 := &Options{MaxStorage: 200 << 10, AllowDelete: true}
	addr3 := serveWith(t, root, o2)
	d, _ := remote.Head(mustRef(t, addr3+"/lim/x:1"))
	img1, _ := remote.Image(mustRef(t, addr3+"/lim/x:1"))
	ls, _ := img1.Layers()
	ld, _ := ls[0].Digest()
	for _, p := range []string{"/v2/lim/x/manifests/" + d.Digest.String(), "/v2/lim/x/blobs/" + ld.String()} {
		if code, e := request(t, http.MethodDelete, "http://"+addr3+p, nil, withCredentialFunc); code != http.StatusAccepted {
			t.Fatalf("DELETE %s: %d %+v", p, code, e)
		}
	}
	push(t, addr3+"/lim/x:4", randomImageOf(t, 120<<10))
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// randomImageOf is an image of one random layer of about size bytes.
func randomImageOf(t *testing.T, size int64) v1.Image {
	t.Helper()
	img, err := random.Image(size, 1)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// waitNoUploads waits for the uploads under root to end: those still in
// flight when the client gave up finish (and are removed) within moments.
func waitNoUploads(t *testing.T, root string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for tmp, _ := os.ReadDir(filepath.Join(root, tmpDir)); len(tmp) != 0; tmp, _ = os.ReadDir(filepath.Join(root, tmpDir)) {
		if time.Now().After(deadline) {
			t.Fatalf("uploads left after the refusals: %v", tmp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
