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
