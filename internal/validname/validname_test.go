package validname

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

type nameCase struct {
	name  string
	value string
	ok    bool
}

// hostile are values every validator refuses, made from a valid one.
func hostile(valid string) []nameCase {
	return []nameCase{
		{"empty", "", false},
		{"parent dir", "..", false},
		{"climbs out", "../" + valid, false},
		{"climbs out after", valid + "/../../../../victim", false},
		{"slash", valid + "/x", false},
		{"absolute", "/" + valid, false},
		{"absolute elsewhere", "/etc/passwd", false},
		{"backslash", valid + `\..\x`, false},
		{"NUL", valid + "\x00", false},
		{"NUL inside", valid[:1] + "\x00" + valid[1:], false},
		{"newline", valid + "\n", false},
		{"leading space", " " + valid, false},
		{"fullwidth solidus", valid + "\uff0f..", false},
		{"division slash", valid + "\u2215x", false},
		{"one dot leader for a dot", strings.Replace(valid, ".", "\u2024", 1) + "\u2024", false},
		{"cyrillic a", "\u0430" + valid, false},
		{"invalid UTF-8", valid + "\xff", false},
		{"too long", valid + strings.Repeat("1", 200), false},
		{"valid", valid, true},
	}
}

func check(t *testing.T, validate func(string) error, want string, cases []nameCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validate(tc.value)
			if tc.ok {
				if err != nil {
					t.Fatalf("%q refused: %v", tc.value, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%q accepted", tc.value)
			}
			// Errors say what is accepted and show an example.
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "e.g.") {
				t.Fatalf("%q: error %q lacks %q or an example", tc.value, err, want)
			}
			if strings.ContainsRune(err.Error(), 0) {
				t.Fatalf("error holds a raw NUL: %q", err)
			}
		})
	}
}

func TestKubeRelease(t *testing.T) {
	check(t, KubeRelease, "v1.MINOR.PATCH", append(hostile("v1.34.4"),
		nameCase{"alpha", "v1.35.0-alpha.1", true},
		nameCase{"beta", "v1.35.0-beta.0", true},
		nameCase{"rc", "v1.35.0-rc.2", true},
		nameCase{"big minor", "v1.123.45", true},
		nameCase{"no v", "1.34.4", false},
		nameCase{"upper V", "V1.34.4", false},
		nameCase{"two components", "v1.34", false},
		nameCase{"four components", "v1.34.4.1", false},
		nameCase{"major 2", "v2.0.0", false},
		nameCase{"major 0", "v0.34.4", false},
		nameCase{"leading zero", "v1.034.4", false},
		nameCase{"other pre-release", "v1.35.0-foo.1", false},
		nameCase{"pre-release without number", "v1.35.0-rc", false},
		nameCase{"pre-release with slash", "v1.35.0-rc.1/..", false},
		nameCase{"build metadata", "v1.34.4+abc", false},
		nameCase{"git describe", "v1.34.4-3+0123456789abcd", false},
		nameCase{"dirty", "v1.34.4-dirty", false},
		nameCase{"overflow", "v1.99999999999999999999.0", false},
		nameCase{"latest", "latest", false},
	))
}

func TestEtcdVersion(t *testing.T) {
	check(t, EtcdVersion, "v3.MINOR.PATCH", append(hostile("v3.6.5"),
		nameCase{"rc", "v3.6.0-rc.5", true},
		nameCase{"alpha", "v3.6.0-alpha.0", true},
		nameCase{"no v", "3.6.5", false},
		nameCase{"kubeadm image revision form", "3.6.5-0", false},
		nameCase{"the reported attack", "v1/../../../../victim", false},
		nameCase{"major 2", "v2.3.4", false},
		nameCase{"major 1", "v1.34.4", false},
		nameCase{"two components", "v3.6", false},
		nameCase{"leading zero", "v3.06.5", false},
		nameCase{"build metadata", "v3.6.5+incompatible", false},
		nameCase{"pre-release with slash", "v3.6.5-rc/1", false},
		nameCase{"pre-release dot dot", "v3.6.5-rc..1", false},
	))
}

func TestCoreDNSVersion(t *testing.T) {
	check(t, CoreDNSVersion, "v1.MINOR.PATCH", append(hostile("v1.12.1"),
		nameCase{"rc", "v1.12.0-rc.1", true},
		nameCase{"no v", "1.12.1", false},
		nameCase{"major 2", "v2.0.0", false},
		nameCase{"two components", "v1.12", false},
		nameCase{"leading zero", "v1.012.1", false},
		nameCase{"build metadata", "v1.12.1+incompatible", false},
		nameCase{"a path", "v1.12.1/../../victim", false},
	))
}

func TestImagePath(t *testing.T) {
	// A path may hold a slash, be absolute and be longer than a name.
	var cases []nameCase
	for _, c := range hostile("/usr/local/bin/kubectl") {
		if c.name != "slash" && c.name != "absolute elsewhere" && c.name != "too long" {
			cases = append(cases, c)
		}
	}
	check(t, ImagePath, "an absolute path", append(cases,
		nameCase{"too long", "/" + strings.Repeat("a", 256), false},
		nameCase{"at the root", "/agnhost", true},
		nameCase{"dots inside a name", "/opt/app.v1/bin", true},
		nameCase{"relative", "agnhost", false},
		nameCase{"the root", "/", false},
		nameCase{"trailing slash", "/agnhost/", false},
		nameCase{"double slash", "//agnhost", false},
		nameCase{"dot element", "/./agnhost", false},
		nameCase{"dot-dot element", "/usr/../agnhost", false},
		nameCase{"hidden", "/.agnhost", false},
		nameCase{"space", "/my app", false},
	))
}

func TestComponent(t *testing.T) {
	check(t, Component, "lowercase letters, digits and '-'", append(hostile("apiserver"),
		nameCase{"kube- name", "kube-apiserver", true},
		nameCase{"with dash", "controller-manager", true},
		nameCase{"etcd", "etcd", true},
		nameCase{"63 characters", strings.Repeat("a", 63), true},
		nameCase{"64 characters", strings.Repeat("a", 64), false},
		nameCase{"upper case", "APIServer", false},
		nameCase{"leading dash", "-apiserver", false},
		nameCase{"trailing dash", "apiserver-", false},
		nameCase{"dot", "kube.apiserver", false},
		nameCase{"underscore", "kube_apiserver", false},
		nameCase{"looks like a flag", "--help", false},
	))
}

func TestCluster(t *testing.T) {
	check(t, Cluster, "1-32 lowercase letters, digits and '-'", append(hostile("devk"),
		nameCase{"digit", "dev2", true},
		nameCase{"with dash", "my-cluster", true},
		nameCase{"one character", "a", true},
		nameCase{"32 characters", strings.Repeat("a", 32), true},
		nameCase{"33 characters", strings.Repeat("a", 33), false},
		nameCase{"upper case", "Dev", false},
		nameCase{"leading dash", "-x", false},
		nameCase{"trailing dash", "x-", false},
		nameCase{"dots", "a..b", false},
		nameCase{"slash", "x/y", false},
	))
}

func TestNode(t *testing.T) {
	check(t, Node, "1-63 lowercase letters, digits and '-'", append(hostile("devk-worker"),
		nameCase{"kind's second worker", "devk-worker2", true},
		nameCase{"control plane", "devk-control-plane", true},
		nameCase{"one character", "w", true},
		nameCase{"digits only", "1", true},
		nameCase{"63 characters", strings.Repeat("a", 63), true},
		nameCase{"64 characters", strings.Repeat("a", 64), false},
		nameCase{"upper case", "Worker", false},
		nameCase{"leading dash", "-w", false},
		nameCase{"trailing dash", "w-", false},
		nameCase{"dot (a subdomain, not a label)", "worker.local", false},
		nameCase{"underscore (the cgroup root's separator)", "a_b", false},
		nameCase{"a path", "nodes/w", false},
	))
}

func TestPlatform(t *testing.T) {
	cases := hostile("linux/amd64")
	for _, p := range Platforms() {
		cases = append(cases, nameCase{p, p, true})
	}
	cases = append(cases,
		nameCase{"the reported attack", "linux/../../x", false},
		nameCase{"arch only", "arm64", false},
		nameCase{"os only", "linux", false},
		nameCase{"trailing slash", "linux/", false},
		nameCase{"three parts", "linux/arm/v7", false},
		nameCase{"underscore form", "linux_amd64", false},
		nameCase{"upper case", "Linux/AMD64", false},
		nameCase{"not built by Kubernetes", "plan9/386", false},
		nameCase{"unknown", "linux/vax", false},
	)
	check(t, Platform, "linux/amd64, linux/arm64", cases)

	// each refusal says why
	for in, why := range map[string]string{
		"linux/arm/v7":         "builds without a variant or OS version",
		"windows/amd64:10.0.1": "builds without a variant or OS version",
		"plan9/386":            "Kubernetes does not build release binaries for it",
		"linux/../../x":        "use os/arch, one of",
		"linux/amd64 ":         "use os/arch, one of",
		"linux/amd64/":         "use os/arch, one of",
		"/amd64":               "use os/arch, one of",
		"linux/amd64/v1/extra": "use os/arch, one of",
		"linux/amd64:":         "use os/arch, one of",
		"linux/amd64\x00/v2":   "builds without a variant",
		"linux/amd64:10.0/x":   "builds without a variant or OS version",
		"darwin/arm64/v8":      "builds without a variant",
		"linux/\u0430md64":     "Kubernetes does not build",
		"linux/amd64\u2215arm": "Kubernetes does not build",
	} {
		if err := Platform(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Platform(%q) = %v; want it to say %q", in, err, why)
		}
	}
}

func TestImageTag(t *testing.T) {
	check(t, ImageTag, "1-128 letters, digits", append(hostile("v1.34.4"),
		nameCase{"git describe made tag-safe", "v1.34.4-3_0123456789abcd", true},
		nameCase{"underscore first", "_x", true},
		nameCase{"128 characters", strings.Repeat("a", 128), true},
		nameCase{"129 characters", strings.Repeat("a", 129), false},
		nameCase{"plus", "v1.34.4+abc", false},
		nameCase{"leading dot", ".hidden", false},
		nameCase{"leading dash", "-x", false},
		nameCase{"colon", "a:b", false},
		nameCase{"at", "a@sha256", false},
	))
}

func TestPathIn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	tests := []struct {
		name string
		elem []string
		want string // "" means refused
	}{
		{"one name", []string{"etcd-build", "v3.6.5"}, filepath.Join(dir, "etcd-build", "v3.6.5")},
		{"several elements", []string{"staging", "src", "k8s.io", "api"}, filepath.Join(dir, "staging", "src", "k8s.io", "api")},
		{"element with dots", []string{"..x", "x.."}, filepath.Join(dir, "..x", "x..")},
		{"a path in one element", []string{"staging/src"}, ""},
		{"name with dots", []string{"kube-apiserver-v1.34.4.tar.gz"}, filepath.Join(dir, "kube-apiserver-v1.34.4.tar.gz")},
		{"the reported attack", []string{"etcd-build", "v1/../../../../victim"}, ""},
		{"climbs out", []string{"../victim"}, ""},
		{"parent", []string{".."}, ""},
		{"climbs back in", []string{"a/../b"}, ""},
		{"absolute", []string{"/etc/passwd"}, ""},
		{"empty", []string{""}, ""},
		{"dir itself", []string{"."}, ""},
		{"no element", nil, ""},
		{"trailing slash", []string{"a/"}, ""},
		{"NUL", []string{"a\x00b"}, ""},
		{"backslash", []string{`..\x`}, ""},
		{"second element climbs", []string{"bin", "../../x"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PathIn(dir, tc.elem...)
			if tc.want == "" {
				if err == nil || !errors.Is(err, ErrNotBeneath) {
					t.Fatalf("PathIn(%q) = %q, %v; want ErrNotBeneath", tc.elem, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PathIn(%q) = %q, %v; want %q", tc.elem, got, err, tc.want)
			}
		})
	}
}

// FuzzPathIn checks the property, not examples: whatever the elements,
// a path PathIn returns is strictly inside dir.
func FuzzPathIn(f *testing.F) {
	for _, s := range []string{"v3.6.5", "../x", "a/../../b", "/abs", "", ".", "a\x00"} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		dir := "/base/dir"
		p, err := PathIn(dir, a, b)
		if err != nil {
			return
		}
		rel, rerr := filepath.Rel(dir, p)
		if rerr != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
			t.Fatalf("PathIn(%q, %q, %q) = %q, outside", dir, a, b, p)
		}
	})
}
