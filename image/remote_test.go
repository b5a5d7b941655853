package image_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/registry"
)

// serveRegistry runs devk's registry in-process on loopback, plain HTTP,
// and returns its address and its credential file.
func serveRegistry(t *testing.T) (addr, credential string) {
	t.Helper()
	credential = filepath.Join(t.TempDir(), "registry-credential")
	r, err := registry.New(t.TempDir(), &registry.Options{CredentialFile: credential})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		srv.Close()
		r.Close()
	})
	return strings.TrimPrefix(srv.URL, "http://"), credential
}

// pushAndHead pushes an image through r and reads its digest back.
func pushAndHead(t *testing.T, r *image.Remote) {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := r.Repository("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Push(ctx, repo.Tag("v1"), img); err != nil {
		t.Fatal(err)
	}
	d, err := r.Head(ctx, repo.Tag("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := img.Digest(); d.Digest != want {
		t.Fatalf("pushed %s, the registry has %s", want, d.Digest)
	}
}

// TestPlainHTTPNeedsInsecure: --registry http://HOST (or DEVK_REGISTRY)
// gets plain HTTP without --insecure only when HOST is on loopback.
func TestPlainHTTPNeedsInsecure(t *testing.T) {
	loopback, credential := serveRegistry(t)
	tests := []struct {
		name     string
		addr     string
		env      bool // given as DEVK_REGISTRY
		insecure bool
		wantAddr string
		wantErr  string
		// push, when set, pushes through the remote and reads back.
		push bool
	}{
		{name: "loopback, http", addr: "http://" + loopback, wantAddr: loopback, push: true},
		{name: "loopback, bare", addr: loopback, wantAddr: loopback, push: true},
		{name: "loopback by env, http", addr: "http://" + loopback, env: true, wantAddr: loopback, push: true},
		{name: "localhost, http", addr: "http://localhost:5000", wantAddr: "localhost:5000"},
		{name: "::1, http", addr: "http://[::1]:5000/team", wantAddr: "[::1]:5000/team"},
		{name: "remote, http", addr: "http://10.0.0.5:5000", wantErr: "refusing plain HTTP to a registry that is not on loopback: pass --insecure to allow it"},
		{name: "remote, HTTP", addr: "HTTP://registry.example:5000/team", wantErr: "pass --insecure"},
		{name: "remote by env, http", addr: "http://registry.example", env: true, wantErr: "DEVK_REGISTRY http://registry.example: refusing plain HTTP"},
		{name: "remote, http, --insecure", addr: "http://10.0.0.5:5000", insecure: true, wantAddr: "10.0.0.5:5000"},
		{name: "remote, https", addr: "https://registry.example/team/", wantAddr: "registry.example/team"},
		{name: "remote, bare", addr: "registry.example:5000", wantAddr: "registry.example:5000"},
		{name: "unknown scheme", addr: "ftp://registry.example", wantErr: "unknown scheme ftp://"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr
			if tc.env {
				t.Setenv("DEVK_REGISTRY", tc.addr)
				addr = image.DefaultRegistry()
			}
			// devk's credential alone, found for the registry we serve:
			// no docker config of the machine applies.
			r, err := image.NewRemote(addr, image.RemoteOptions{Insecure: tc.insecure, Keychain: image.CredentialKeychain(credential)})
			if testutil.WantErr(t, err, tc.wantErr) {
				return
			}
			if r.Addr != tc.wantAddr {
				t.Fatalf("Addr %q, want %q", r.Addr, tc.wantAddr)
			}
			if tc.push {
				pushAndHead(t, r)
			}
		})
	}
}

// silentRegistry accepts connections and never answers on them.
func silentRegistry(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestSilentRegistryTimesOut: each registry call against a registry that
// takes the connection and never answers fails with ErrTimeout after its
// limit, instead of hanging.
func TestSilentRegistryTimesOut(t *testing.T) {
	const short, long = 300 * time.Millisecond, time.Hour
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		o    image.RemoteOptions
		call func(ctx context.Context, r *image.Remote, ref name.Tag) error
		// limit is the timeout the call must fail by (ggcr retries
		// a timed-out request twice, after 1 s and 3 s).
		limit time.Duration
		want  string
	}{
		{
			name: "head", o: image.RemoteOptions{Timeout: short, PushTimeout: long},
			call: func(ctx context.Context, r *image.Remote, ref name.Tag) error {
				_, err := r.Head(ctx, ref)
				return err
			},
			limit: short, want: "did not answer within 300ms",
		},
		{
			name: "manifest get", o: image.RemoteOptions{Timeout: short, PushTimeout: long},
			call: func(ctx context.Context, r *image.Remote, ref name.Tag) error {
				_, err := r.Image(ctx, ref.String(), v1.Platform{OS: "linux", Architecture: "amd64"})
				return err
			},
			limit: short, want: "did not answer within 300ms",
		},
		{
			name: "tags", o: image.RemoteOptions{Timeout: short, PushTimeout: long},
			call: func(ctx context.Context, r *image.Remote, ref name.Tag) error {
				_, err := r.Tags(ctx, ref.Repository)
				return err
			},
			limit: short, want: "did not answer within 300ms",
		},
		{
			name: "catalog", o: image.RemoteOptions{Timeout: short, PushTimeout: long},
			call: func(ctx context.Context, r *image.Remote, ref name.Tag) error {
				_, err := r.Catalog(ctx)
				return err
			},
			limit: short, want: "did not answer within 300ms",
		},
		{
			// Each request's wait for an answer, the push itself
			// unbounded.
			name: "push, per request", o: image.RemoteOptions{Timeout: short, PushTimeout: long},
			call: func(ctx context.Context, r *image.Remote, ref name.Tag) error {
				return r.Push(ctx, ref, img)
			},
			limit: 3*short + 5*time.Second, want: "did not answer within 300ms",
		},
		{
			// The push as a whole, each request unbounded.
			name: "push, whole", o: image.RemoteOptions{Timeout: long, PushTimeout: short},
			call: func(ctx context.Context, r *image.Remote, ref name.Tag) error {
				return r.Push(ctx, ref, img)
			},
			limit: short, want: "did not take the push within 300ms",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := silentRegistry(t)
			tc.o.Keychain = authn.NewMultiKeychain()
			r, err := image.NewRemote(addr, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			repo, _ := r.Repository("kube-apiserver")
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- tc.call(context.Background(), r, repo.Tag("v1")) }()
			select {
			case err = <-done:
			case <-time.After(tc.limit + 20*time.Second):
				t.Fatalf("still waiting after %s: the %s timeout did not apply", time.Since(start).Round(time.Second), tc.limit)
			}
			took := time.Since(start)
			if !errors.Is(err, image.ErrTimeout) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), addr) {
				t.Fatalf("err %v, want ErrTimeout saying %q about %s", err, tc.want, addr)
			}
			if took < short || took > tc.limit+2*time.Second {
				t.Fatalf("failed after %s, want about %s", took, tc.limit)
			}
		})
	}
}
