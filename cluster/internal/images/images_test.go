package images

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParseTags: --images-from takes the tags (or digests) it is
// told, etcd's included, and never picks one itself.
func TestParseTags(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tt := range []struct {
		in      string
		want    map[string]string // component: tag or digest
		wantErr string
	}{
		{in: "v1.34.4,etcd=3.6.5-0", want: map[string]string{"apiserver": "v1.34.4", "etcd": "3.6.5-0", "coredns": "v1.34.4"}},
		{in: "v1.34.4, etcd=" + digest + ", coredns=v1.12.1", want: map[string]string{"scheduler": "v1.34.4", "etcd": digest, "coredns": "v1.12.1"}},
		{in: "etcd=3.6.5-0,apiserver=v1,controller-manager=v1,scheduler=v1,kube-proxy=v1,coredns=v1", want: map[string]string{"apiserver": "v1", "etcd": "3.6.5-0"}},
		{in: "", wantErr: "--images-from needs --images-tag"},
		{in: "v1.34.4", wantErr: "names no tag for etcd"},
		{in: "etcd=3.6.5-0", wantErr: "names no tag for apiserver"},
		{in: "v1.34.4,etcd=3.6.5-0,kubelet=v1", wantErr: `"kubelet" is not a component with an image`},
		{in: "v1.34.4,v1.34.5,etcd=3.6.5-0", wantErr: "the default tag given twice"},
		{in: "v1.34.4,etcd=3.6.5-0,etcd=3.6.4-0", wantErr: "etcd given twice"},
		{in: "v1.34.4,etcd=sha256:abc", wantErr: `"sha256:abc" is not a digest`},
		{in: "../x,etcd=3.6.5-0", wantErr: "image tag"},
	} {
		got, err := ParseTags(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseTags(%q) = %v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseTags(%q): %v", tt.in, err)
			continue
		}
		for comp, want := range tt.want {
			if got.Tag(comp) != want {
				t.Errorf("ParseTags(%q) gives %s %q, want %q", tt.in, comp, got.Tag(comp), want)
			}
		}
	}
}

// TestPauseVersion: the pause program built from its embedded source
// answers -v and exits 0, as kubeadm's upgrade health check needs (its
// Job runs the pause image with -v and waits for it to complete).
func TestPauseVersion(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), pauseSource, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module devk.local/pause\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Env = src, append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build pause: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a pause that ignores -v never exits
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-v").Output()
	if err != nil || !strings.Contains(string(out), "pause") {
		t.Fatalf("pause -v: %v, %q", err, out)
	}
}
