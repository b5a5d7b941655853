package skew

import (
	"errors"
	"strings"
	"testing"
)

func cluster(api, cm, kubelet, kubectl string) []Running {
	return []Running{
		{Component: APIServer, Node: "devk", Version: api},
		{Component: ControllerManager, Node: "devk", Version: cm},
		{Component: Scheduler, Node: "devk", Version: cm},
		{Component: Kubelet, Node: "devk", Version: kubelet},
		{Component: Kubelet, Node: "devk-w1", Version: kubelet},
		{Component: Kubectl, Version: kubectl},
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		rs   []Running
		want []string // violations, as substrings; none: within the policy
	}{
		{"one version", cluster("v1.34.4", "v1.34.4", "v1.34.4", "v1.34.4"), nil},
		{"kubelet three behind", cluster("v1.35.0", "v1.35.0", "v1.32.9", "v1.35.0"), nil},
		{"kubelet four behind", cluster("v1.35.0", "v1.35.0", "v1.31.0", "v1.35.0"), []string{"kubelet v1.31.0 on devk: 4 minor versions behind", "kubelet v1.31.0 on devk-w1"}},
		{"kubelet newer", cluster("v1.34.4", "v1.34.4", "v1.35.4", "v1.34.4"), []string{"kubelet v1.35.4 on devk: newer than kube-apiserver 1.34: never newer"}},
		{"controllers one behind", cluster("v1.35.4", "v1.34.4", "v1.34.4", "v1.35.4"), nil},
		{"controllers two behind", cluster("v1.36.0", "v1.34.4", "v1.34.4", "v1.35.4"), []string{"kube-controller-manager v1.34.4 on devk: 2 minor versions behind", "kube-scheduler"}},
		{"controller newer", cluster("v1.34.4", "v1.35.4", "v1.34.4", "v1.34.4"), []string{"kube-controller-manager v1.35.4 on devk: newer than"}},
		{"kubectl two ahead", cluster("v1.34.4", "v1.34.4", "v1.34.4", "v1.36.1"), []string{"kubectl v1.36.1: 2 minor versions newer"}},
		{"kubectl one behind", cluster("v1.35.4", "v1.35.4", "v1.35.4", "v1.34.0"), nil},
		{"dirty builds", cluster("v1.34.4-dirty", "v1.34.4-3+abcdef", "v1.34.4", "v1.34.4"), nil},
		{"HA spread of two", append(cluster("v1.36.0", "v1.35.0", "v1.35.0", "v1.35.0"), Running{Component: APIServer, Node: "devk-cp2", Version: "v1.34.0"}),
			[]string{"kube-apiserver v1.34.0 on devk-cp2: 2 minor versions behind the newest kube-apiserver"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check("the cluster", tc.rs)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("Check: %v, want a *skew.Error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v\nwant %q in it", err, w)
				}
			}
		})
	}
}

func TestUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name string
		rs   []Running
		to   string
		want string // "" allowed
	}{
		{"one minor", cluster("v1.34.4", "v1.34.4", "v1.34.4", "v1.34.4"), "v1.35.4", ""},
		{"a patch", cluster("v1.34.4", "v1.34.4", "v1.34.4", "v1.34.4"), "v1.34.5", ""},
		{"the same", cluster("v1.34.4", "v1.34.4", "v1.34.4", "v1.34.4"), "v1.34.4", ""},
		{"skips a minor", cluster("v1.34.4", "v1.34.4", "v1.34.4", "v1.34.4"), "v1.36.0", "upgrade one minor version at a time (to v1.35 first)"},
		{"a downgrade", cluster("v1.35.4", "v1.35.4", "v1.35.4", "v1.35.4"), "v1.34.4", "an upgrade goes forward"},
		// The API server at v1.36 would leave a v1.32 kubelet four behind.
		{"an old kubelet left behind", cluster("v1.35.0", "v1.35.0", "v1.32.0", "v1.35.0"), "v1.36.0", "after kube-apiserver v1.36.0 on devk"},
		{"skewed already", cluster("v1.34.4", "v1.34.4", "v1.35.4", "v1.34.4"), "v1.35.4", "the cluster as it runs"},
		{"a bad version", cluster("v1.34.4", "v1.34.4", "v1.34.4", "v1.34.4"), "latest", `version "latest"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Upgrade(tc.rs, tc.to)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Upgrade: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Upgrade: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestMinor(t *testing.T) {
	if m, err := Minor("v1.35.4-dirty"); err != nil || m != "v1.35" {
		t.Fatalf("Minor = %q, %v", m, err)
	}
	if _, err := Minor("x"); err == nil {
		t.Fatal("Minor(x): no error")
	}
}
