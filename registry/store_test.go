package registry

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/devk/devk/internal/testutil"
)

func sameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range after {
		if before[p] != v {
			t.Errorf("outside the root, %s changed: %q, was %q", p, v, before[p])
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("outside the root, %s is gone", p)
		}
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestSymlinksLeadNowhere plants symlinks inside a registry's root that
// point outside it, before the registry starts and while it runs, then
// pushes. Whatever the push does, nothing outside the root changes.
func TestSymlinksLeadNowhere(t *testing.T) {
	img := randomImage(t)
	tests := []struct {
		name string
		// plant makes links in root pointing to outside.
		plant func(t *testing.T, root, outside string)
		// beforeStart plants before the registry starts; a registry
		// that then refuses to start is fine too.
		beforeStart bool
		wantPushed  bool
	}{
		{
			// The reproduced attack: a link at the manifest's path. The
			// push succeeds; the link is replaced, not written through.
			name: "manifest file links out",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, filepath.Join(outside, "authorized_keys"), filepath.Join(root, "manifests/keys/authorized_keys"))
			},
			wantPushed: true,
		},
		{
			name: "repository dir links out, absolute",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, outside, filepath.Join(root, "manifests/keys"))
			},
		},
		{
			name: "repository dir links out, relative",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, "../../outside", filepath.Join(root, "manifests/keys"))
			},
		},
		{
			name: "manifests dir links out",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, outside, filepath.Join(root, "manifests"))
			},
		},
		{
			name: "blob dir links out",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, outside, filepath.Join(root, "blobs/sha256"))
			},
		},
		{
			name: "blobs dir links out",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, "../outside", filepath.Join(root, "blobs"))
			},
		},
		{
			name: "tmp dir links out",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, outside, filepath.Join(root, "tmp"))
			},
		},
		{
			// Start-up clears tmp/: not through a link.
			name: "tmp dir links out at start",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, outside, filepath.Join(root, "tmp"))
			},
			beforeStart: true,
		},
		{
			// Replay reads stored manifests: not through a link.
			name: "stored manifest links out at start",
			plant: func(t *testing.T, root, outside string) {
				mustSymlink(t, filepath.Join(outside, "authorized_keys"), filepath.Join(root, "manifests/y/z"))
			},
			beforeStart: true,
			wantPushed:  true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			root, outside := filepath.Join(parent, "root"), filepath.Join(parent, "outside")
			for _, d := range []string{root, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// What an attacker would want to overwrite or remove.
			if err := os.WriteFile(filepath.Join(outside, "authorized_keys"), []byte("ssh-ed25519 AAAA owner\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(outside, uploadPrefix+"1"), []byte("not an upload"), 0o600); err != nil {
				t.Fatal(err)
			}
			before := testutil.DirSnapshot(t, outside)

			if tc.beforeStart {
				tc.plant(t, root, outside)
			}
			r, err := New(root, opts(nil))
			if err != nil {
				if !tc.beforeStart {
					t.Fatal(err)
				}
				t.Logf("refused to start: %v", err)
				sameSnapshot(t, before, testutil.DirSnapshot(t, outside))
				return
			}
			t.Cleanup(func() { r.Close() })
			if !tc.beforeStart {
				tc.plant(t, root, outside)
			}
			// Not remote.Write alone: the chosen Content-Type of the
			// reported attack is refused first, by media type.
			addr := serveHandler(t, r)
			req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/v2/keys/manifests/authorized_keys", strings.NewReader("ssh-ed25519 AAAA attacker\n"))
			req.Header.Set("Content-Type", "ssh-ed25519 AAAA attacker")
			resp, err := http.DefaultClient.Do(withCredential(req))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Errorf("a manifest of type %q: %d, want 4xx", req.Header.Get("Content-Type"), resp.StatusCode)
			}

			ref, err := name.ParseReference(addr + "/keys:authorized_keys")
			if err != nil {
				t.Fatal(err)
			}
			err = remote.Write(ref, img, testAuth(), remote.WithRetryBackoff(remote.Backoff{Steps: 1})) // fail at once
			if tc.wantPushed && err != nil {
				t.Errorf("push: %v", err)
			}
			if !tc.wantPushed && err == nil {
				t.Error("the push succeeded through a link out of the root")
			}
			sameSnapshot(t, before, testutil.DirSnapshot(t, outside))
		})
	}
}

func serveHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestUnsafeRootRefused: a root another user could plant links in is
// refused at start, with the command that fixes it.
func TestUnsafeRootRefused(t *testing.T) {
	const nobody = 65534
	tests := []struct {
		name string
		// make returns the --root to use, made under parent.
		make     func(t *testing.T, parent string) string
		asRoot   bool // needs os.Chown
		wantErr  string
		wantMode os.FileMode // of a root that was accepted
	}{
		{
			name:     "missing, created",
			make:     func(t *testing.T, parent string) string { return filepath.Join(parent, "a/b/registry") },
			wantMode: 0o755,
		},
		{
			name:     "ours, 0700",
			make:     func(t *testing.T, parent string) string { return mkdirMode(t, parent, "registry", 0o700) },
			wantMode: 0o700,
		},
		{
			name:    "world-writable",
			make:    func(t *testing.T, parent string) string { return mkdirMode(t, parent, "registry", 0o777) },
			wantErr: "writable by group or others (mode 0777), who could plant symlinks in it: run `chmod 0755 ",
		},
		{
			name:    "group-writable",
			make:    func(t *testing.T, parent string) string { return mkdirMode(t, parent, "registry", 0o775) },
			wantErr: "writable by group or others (mode 0775)",
		},
		{
			name:    "world-writable and sticky",
			make:    func(t *testing.T, parent string) string { return mkdirMode(t, parent, "registry", 0o777|os.ModeSticky) },
			wantErr: "writable by group or others",
		},
		{
			name: "under a world-writable dir",
			make: func(t *testing.T, parent string) string {
				return filepath.Join(mkdirMode(t, parent, "shared", 0o777), "registry")
			},
			wantErr: "which is writable by group or others (mode 0777) and not sticky: run `chmod go-w ",
		},
		{
			name: "a file",
			make: func(t *testing.T, parent string) string {
				p := filepath.Join(parent, "registry")
				os.WriteFile(p, nil, 0o644)
				return p
			},
			wantErr: "registry",
		},
		{
			name: "our symlink to our dir",
			make: func(t *testing.T, parent string) string {
				mkdirMode(t, parent, "real", 0o755)
				mustSymlink(t, "real", filepath.Join(parent, "registry"))
				return filepath.Join(parent, "registry")
			},
			wantMode: 0o755,
		},
		{
			name: "owned by another user",
			make: func(t *testing.T, parent string) string {
				p := mkdirMode(t, parent, "registry", 0o755)
				chown(t, p, nobody)
				return p
			},
			asRoot:  true,
			wantErr: "belongs to uid 65534, not to you (uid 0), who could plant symlinks in it: run `chown -R 0 ",
		},
		{
			name: "a symlink owned by another user",
			make: func(t *testing.T, parent string) string {
				mkdirMode(t, parent, "real", 0o755)
				p := filepath.Join(parent, "registry")
				mustSymlink(t, "real", p)
				if err := os.Lchown(p, nobody, nobody); err != nil {
					t.Fatal(err)
				}
				return p
			},
			asRoot:  true,
			wantErr: "is a symlink owned by uid 65534, not by you (uid 0): remove it",
		},
		{
			name: "under another user's dir",
			make: func(t *testing.T, parent string) string {
				p := mkdirMode(t, parent, "home", 0o755)
				chown(t, p, nobody)
				return filepath.Join(p, "registry")
			},
			asRoot:  true,
			wantErr: "which belongs to uid 65534, who could swap what lies beneath it",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.asRoot && os.Geteuid() != 0 {
				t.Skip("making a directory another user's takes os.Chown, which needs root")
			}
			root := tc.make(t, t.TempDir())
			r, err := New(root, opts(nil))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				r.Close()
				fi, err := os.Stat(root)
				if err != nil || fi.Mode().Perm() != tc.wantMode {
					t.Fatalf("root mode %v, %v; want %v", fi.Mode(), err, tc.wantMode)
				}
				return
			}
			if err == nil {
				r.Close()
				t.Fatal("an unsafe root was accepted")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %q, want it to say %q", err, tc.wantErr)
			}
		})
	}
}

func mkdirMode(t *testing.T, parent, name string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(parent, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Chown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}
