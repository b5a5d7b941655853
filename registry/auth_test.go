package registry

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/devk/devk/image"
)

// specErrors is a distribution-spec error body.
type specErrors struct {
	Errors []struct{ Code, Message string }
}

func request(t *testing.T, method, url string, body io.Reader, auth func(*http.Request)) (int, specErrors) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != nil {
		auth(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e specErrors
	data, _ := io.ReadAll(resp.Body)
	json.Unmarshal(data, &e)
	return resp.StatusCode, e
}

// TestWritesNeedCredential: every write without devk's credential (or
// with a wrong one) is refused UNAUTHORIZED and changes nothing; reads
// need none; devk's keychain finds the credential for a registry we run.
func TestWritesNeedCredential(t *testing.T) {
	root := t.TempDir()
	addr := serveWith(t, root, &Options{AllowDelete: true})
	img := randomImage(t)
	d := push(t, addr+"/e2e/agnhost:2.53", img)
	base := "http://" + addr + "/v2/e2e/agnhost"
	manifest, _ := img.RawManifest()
	mt, _ := img.MediaType()

	wrong := func(req *http.Request) { req.SetBasicAuth(image.RegistryUser, strings.Repeat("0", 64)) }
	otherUser := func(req *http.Request) { req.SetBasicAuth("admin", testSecret()) }
	for _, auth := range []struct {
		name string
		set  func(*http.Request)
	}{{"anonymous", nil}, {"wrong secret", wrong}, {"other user", otherUser}} {
		for _, w := range []struct{ method, url, body string }{
			{http.MethodPut, base + "/manifests/2.53", string(manifest)},
			{http.MethodPut, base + "/manifests/evil", string(manifest)},
			{http.MethodPost, base + "/blobs/uploads/", ""},
			{http.MethodPost, base + "/blobs/uploads/?digest=" + digestOf([]byte("x")), "x"},
			{http.MethodPatch, base + "/blobs/uploads/1", "x"},
			{http.MethodPut, base + "/blobs/uploads/1?digest=" + digestOf([]byte("x")), "x"},
			{http.MethodDelete, base + "/manifests/2.53", ""},
			{http.MethodDelete, base + "/blobs/" + d.String(), ""},
		} {
			req := func(r *http.Request) {
				r.Header.Set("Content-Type", string(mt))
				if auth.set != nil {
					auth.set(r)
				}
			}
			code, e := request(t, w.method, w.url, strings.NewReader(w.body), req)
			if code != http.StatusUnauthorized || len(e.Errors) != 1 || e.Errors[0].Code != "UNAUTHORIZED" ||
				!strings.Contains(e.Errors[0].Message, testCredential) || !strings.Contains(e.Errors[0].Message, "devk push") {
				t.Errorf("%s %s %s: %d %+v, want 401 UNAUTHORIZED naming the credential file and devk push", auth.name, w.method, w.url, code, e)
			}
		}
	}
	// Nothing changed: the tag is what was pushed, no other tag exists.
	for _, path := range []string{"/manifests/2.53", "/manifests/" + d.String(), "/blobs/" + mustLayerDigest(t, img)} {
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			if code, _ := request(t, m, base+path, nil, nil); code != http.StatusOK {
				t.Errorf("anonymous %s %s: %d, want 200 (reads are open)", m, path, code)
			}
		}
	}
	ref, _ := name.ParseReference(addr + "/e2e/agnhost:2.53")
	got, err := remote.Head(ref)
	if err != nil || got.Digest != d {
		t.Fatalf("after the refused writes the tag is %v (%v), pushed %s", got, err, d)
	}
	if code, _ := request(t, http.MethodGet, base+"/manifests/evil", nil, nil); code != http.StatusNotFound {
		t.Errorf("a refused tag is served: %d", code)
	}

	// go-containerregistry's own push, anonymous: refused, saying why.
	evil, _ := name.ParseReference(addr + "/e2e/agnhost:2.53")
	err = remote.Write(evil, randomImage(t), remote.WithRetryBackoff(remote.Backoff{Steps: 1}))
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized || !strings.Contains(err.Error(), testCredential) {
		t.Fatalf("anonymous push: %v, want 401 naming %s", err, testCredential)
	}
	if got, _ := remote.Head(ref); got.Digest != d {
		t.Fatalf("an anonymous push moved the tag to %s", got.Digest)
	}

	// devk's keychain: the credential for this registry, which we run.
	other := randomImage(t)
	if err := remote.Write(evil, other, remote.WithAuthFromKeychain(image.CredentialKeychain(testCredential))); err != nil {
		t.Fatalf("push with devk's keychain: %v", err)
	}
	if got, _ := remote.Head(ref); got.Digest == d {
		t.Fatal("the credentialed push did not move the tag")
	}
	// And with the credential, a delete goes through.
	if code, e := request(t, http.MethodDelete, base+"/manifests/2.53", nil, withCredentialFunc); code != http.StatusAccepted {
		t.Fatalf("credentialed DELETE: %d %+v", code, e)
	}
}

func withCredentialFunc(req *http.Request) { withCredential(req) }

func mustLayerDigest(t *testing.T, img v1.Image) string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil || len(ls) == 0 {
		t.Fatalf("layers: %v", err)
	}
	d, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// TestCredentialFile: made once (0600, ours), the same for every later
// use; one others may read, or a symlink, is refused.
func TestCredentialFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "registry-credential")
	s1, err := image.EnsureCredential(path)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := image.EnsureCredential(path)
	if err != nil || s2 != s1 {
		t.Fatalf("second EnsureCredential: %q, %v; want the first's secret", s2, err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential mode %v, want 0600", fi.Mode())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left beside the credential: %v", entries)
	}
	os.Chmod(path, 0o644)
	if _, err := image.LoadCredential(path); err == nil || !strings.Contains(err.Error(), "chmod 0600") {
		t.Fatalf("a credential of mode 0644: %v", err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(path, link)
	if _, err := image.EnsureCredential(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("a credential that is a symlink: %v", err)
	}
	// A registry whose credential file cannot be used does not start.
	if _, err := New(t.TempDir(), &Options{CredentialFile: path}); err == nil {
		t.Fatal("a registry started with a credential others may read")
	}
	if _, err := New(t.TempDir(), &Options{}); err == nil {
		t.Fatal("a registry started without a credential file")
	}
	if os.Geteuid() != 0 {
		return // giving the file to another user takes os.Chown, which needs root
	}
	os.Chmod(path, 0o600)
	os.Chown(path, 65534, 65534)
	if _, err := image.LoadCredential(path); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534, not to you") {
		t.Fatalf("a credential of uid 65534: %v", err)
	}
}

// TestKeychainOnlyForOurListener: devk's keychain offers the credential
// to a loopback registry this user runs, never to another host, nor to a
// loopback port no one (or someone else) listens on.
func TestKeychainOnlyForOurListener(t *testing.T) {
	addr := serve(t, t.TempDir())
	kc := image.CredentialKeychain(testCredential)
	resolve := func(reg string) authn.Authenticator {
		r, err := name.NewRegistry(reg)
		if err != nil {
			t.Fatal(err)
		}
		a, err := kc.Resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := resolve(addr); a == authn.Anonymous {
		t.Errorf("no credential for our own registry at %s", addr)
	}
	for _, reg := range []string{"registry.example:5000", "10.250.0.1:5000", "127.0.0.1:1"} {
		if a := resolve(reg); a != authn.Anonymous {
			t.Errorf("the credential offered to %s", reg)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("a listener of another user takes running one as uid 65534, which needs root")
	}
	// A port another local user took: devk's own forwarder, run as
	// nobody, is a listener of theirs.
	bin := devkBin(t)
	os.Chmod(filepath.Dir(bin), 0o755)
	cmd := exec.Command(bin, "registry", "forward", "--addr", "127.0.0.1:0", "--to", "127.0.0.1:1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the forwarder run as nobody printed no address: %v", err)
	}
	if a := resolve(strings.TrimSpace(line)); a != authn.Anonymous {
		t.Errorf("the credential offered to %s, which uid 65534 listens on", strings.TrimSpace(line))
	}
}
