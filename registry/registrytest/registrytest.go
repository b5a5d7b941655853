// Package registrytest serves devk's own registry in-process for tests:
// on loopback, plain HTTP, with a credential file of its own, and a
// client that writes with that credential.
package registrytest

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/image"
	"github.com/devk/devk/registry"
)

// Start serves an empty registry until the test ends; it returns its
// address (host:port) and a client that may push to it.
func Start(t *testing.T) (string, *image.Remote) {
	t.Helper()
	cred := filepath.Join(t.TempDir(), "registry-credential")
	h, err := registry.New(t.TempDir(), &registry.Options{CredentialFile: cred})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	addr := strings.TrimPrefix(srv.URL, "http://")
	r, err := image.NewRemote(addr, image.RemoteOptions{Keychain: image.CredentialKeychain(cred)})
	if err != nil {
		t.Fatal(err)
	}
	return addr, r
}
