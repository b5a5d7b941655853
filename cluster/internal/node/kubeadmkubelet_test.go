package node

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestKubeadmKubeletArgs: the drop-in's command line with the flags of
// kubeadm-flags.env as kubeadm v1.34 writes it, and without the file.
func TestKubeadmKubeletArgs(t *testing.T) {
	root := t.TempDir()
	drop := []string{"/k/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml"}
	if got := kubeadmKubeletArgs("/k/bin/kubelet", root); !slices.Equal(got, drop) {
		t.Errorf("before kubeadm wrote its flags: %q", got)
	}
	env := "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/n/containerd.sock --hostname-override=devk-worker --node-ip=10.0.0.3\"\n"
	if err := os.WriteFile(filepath.Join(root, kubeadmFlagsEnv), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(drop), "--container-runtime-endpoint=unix:///run/n/containerd.sock", "--hostname-override=devk-worker", "--node-ip=10.0.0.3")
	if got := kubeadmKubeletArgs("/k/bin/kubelet", root); !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestEnvFileValue(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"double quotes", `A="x y"`, "x y"},
		{"single quotes", `A='x "y"'`, `x "y"`},
		{"bare", "A=x", "x"},
		{"escapes in double quotes", `A="a \"b\""`, `a "b"`},
		{"comments and other names", "# A=no\n; A=no\nB=no\n  A = yes \n", "yes"},
		{"the last wins", "A=1\nA=2", "2"},
		{"unset", "B=1", ""},
		{"a line without =", "A", ""},
	} {
		if got := envFileValue([]byte(tc.file), "A"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestKubeadmPhaseTag(t *testing.T) {
	for line, want := range map[string]string{
		"[wait-control-plane] Waiting for the kubelet to boot up": "wait-control-plane",
		"[kubelet-start] Starting the kubelet":                    "kubelet-start",
		"[upgrade/staticpods] Writing new Static Pod manifests":   "upgrade/staticpods",
		"W1203 01:14:45.633223   32630 common.go:198] WARNING":    "",
		"[a b] c": "",
		"Your Kubernetes control-plane has initialized": "",
	} {
		if got, ok := kubeadmPhaseTag(line); got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", line, got, ok, want)
		}
	}
}
