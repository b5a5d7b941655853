package source

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
)

func TestParseEtcdVersion(t *testing.T) {
	tests := []struct {
		name, in, want string // want "" means refused
	}{
		{"kubeadm's form", "3.6.5-0", "v3.6.5"},
		{"kubeadm's form, later revision", "3.5.21-12", "v3.5.21"},
		{"plain", "3.6.5", "v3.6.5"},
		{"with v", "v3.6.5", "v3.6.5"},
		{"pre-release", "v3.6.0-rc.5", "v3.6.0-rc.5"},
		{"pre-release in kubeadm's form", "3.6.0-rc.5-0", "v3.6.0-rc.5"},
		{"the reported attack", "v1/../../../../victim", ""},
		{"climbing with a revision", "../../x-0", ""},
		{"absolute", "/etc/passwd", ""},
		{"empty", "", ""},
		{"only a revision", "-0", ""},
		{"NUL", "3.6.5\x00-0", ""},
		{"fullwidth digit", "3.6.\uff15", ""},
		{"etcd 2", "2.3.8-0", ""},
		{"two v", "vv3.6.5", ""},
		{"too long", "3.6." + strings.Repeat("5", 100), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEtcdVersion(tc.in)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "e.g. v3.6.5") {
					t.Fatalf("ParseEtcdVersion(%q) = %q, %v; want refused", tc.in, got, err)
				}
				// The error quotes what was written, not the "v"-prefixed form.
				if shown := strconv.Quote(tc.in); !strings.Contains(err.Error(), shown[:min(len(shown), 40)]) {
					t.Errorf("error %q does not show %s", err, shown)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseEtcdVersion(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseCoreDNSVersion(t *testing.T) {
	tests := []struct {
		name, in, want string // want "" means refused
	}{
		{"kubeadm's form", "v1.12.1", "v1.12.1"},
		{"without v", "1.12.1", "v1.12.1"},
		{"pre-release", "v1.12.0-rc.1", "v1.12.0-rc.1"},
		{"a path", "v1.12.1/../../../victim", ""},
		{"absolute", "/etc/passwd", ""},
		{"empty", "", ""},
		{"NUL", "v1.12.1\x00", ""},
		{"major 2", "v2.0.0", ""},
		{"an image tag, not a version", "latest", ""},
		{"two v", "vv1.12.1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCoreDNSVersion(tc.in)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "e.g. v1.12.1") {
					t.Fatalf("ParseCoreDNSVersion(%q) = %q, %v; want refused", tc.in, got, err)
				}
				if shown := strconv.Quote(tc.in); !strings.Contains(err.Error(), shown[:min(len(shown), 40)]) {
					t.Errorf("error %q does not show %s", err, shown)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseCoreDNSVersion(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestTreeCoreDNSVersion reads the constant as the compiler does: a
// comment or a var of the same name is not it, and a value that is not
// a version is refused with the file and the flag named.
func TestTreeCoreDNSVersion(t *testing.T) {
	tests := []struct {
		name, src, want, wantErr string
	}{
		{"kubeadm's file", "", "v1.12.1", ""},
		{"a lone const", "package constants\nconst CoreDNSVersion = \"v1.11.3\"\n", "v1.11.3", ""},
		{"in a comment only", "package constants\n// CoreDNSVersion = \"v1.11.3\"\nconst X = 1\n", "", "no CoreDNSVersion string constant"},
		{"a var", "package constants\nvar CoreDNSVersion = \"v1.11.3\"\n", "", "no CoreDNSVersion string constant"},
		{"a path", "package constants\nconst CoreDNSVersion = \"v1/../../victim\"\n", "", `CoreDNSVersion in `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := testtree.Copy(t)
			path := filepath.Join(root, filepath.FromSlash(KubeadmConstantsFile))
			if tc.src != "" {
				if err := os.WriteFile(path, []byte(tc.src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := (&Tree{Root: root}).CoreDNSVersion()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--coredns-version") {
					t.Fatalf("CoreDNSVersion = %q, %v; want an error with %q, the file and the flag", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("CoreDNSVersion = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestTreeEtcdVersionRefusesPaths: the tree is input; a DefaultEtcdVersion
// that is a path is refused with the file named.
func TestTreeEtcdVersionRefusesPaths(t *testing.T) {
	root := testtree.Copy(t)
	path := filepath.Join(root, "cmd", "kubeadm", "app", "constants", "constants.go")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), `"3.6.5-0"`, `"v1/../../../../victim"`, 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := (&Tree{Root: root}).EtcdVersion()
	if err == nil || !strings.Contains(err.Error(), "DefaultEtcdVersion in "+path) || !strings.Contains(err.Error(), `"v1/../../../../victim"`) {
		t.Fatalf("EtcdVersion = %q, %v", v, err)
	}
}

// TestGetRefusesPathVersions: a release that is a path is refused before
// the target directory is made.
func TestGetRefusesPathVersions(t *testing.T) {
	for _, v := range []string{"../../x", "v1.34.4/../../x", "/tmp/x", "v1.34.4\x00", "v1.34.4-rc.1/..", "v1.34.\u0664"} {
		dir := filepath.Join(t.TempDir(), "k")
		if _, err := get(dir, v); err == nil || !strings.Contains(err.Error(), "not a Kubernetes release tag") || !strings.Contains(err.Error(), "e.g. v1.34.4") {
			t.Errorf("%q: err = %v", v, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%q: %s was made", v, dir)
		}
	}
}
