package images

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/devk/devk/registry/registrytest"
)

// TestTagForKubeadm: against devk's own registry (in-process), kubeadm's
// names get devk's images of the same repositories, a tag already right
// is left alone, and an image devk does not build is an error naming it.
func TestTagForKubeadm(t *testing.T) {
	addr, r := registrytest.Start(t)
	ctx := context.Background()
	pushed := map[string]string{}
	for comp, repo := range map[string]string{"apiserver": "kube-apiserver", "etcd": "etcd", "pause": "pause"} {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		rp, err := r.Repository(repo)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Push(ctx, rp.Tag("devk"), img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		pushed[comp] = rp.Name() + "@" + d.String()
	}
	want := []string{addr + "/kube-apiserver:v1.34.4", addr + "/etcd:3.6.5-0", addr + "/pause:3.10.1"}
	moved, err := TagForKubeadm(ctx, r, pushed, want)
	if err != nil || !slices.Equal(moved, want) {
		t.Fatalf("moved %v, %v; want all of %v", moved, err, want)
	}
	for i, comp := range []string{"apiserver", "etcd", "pause"} {
		ref, _ := r.ParseReference(want[i])
		d, err := r.Head(ctx, ref)
		if err != nil || !strings.HasSuffix(pushed[comp], "@"+d.Digest.String()) {
			t.Errorf("%s is %v (%v), want %s", want[i], d, err, pushed[comp])
		}
	}
	if moved, err := TagForKubeadm(ctx, r, pushed, want); err != nil || len(moved) != 0 {
		t.Errorf("again: moved %v, %v; want none", moved, err)
	}
	_, err = TagForKubeadm(ctx, r, pushed, []string{addr + "/coredns:v1.12.1"})
	if err == nil || !strings.Contains(err.Error(), "devk builds no image of "+addr+"/coredns") {
		t.Errorf("an image devk does not build: %v", err)
	}
}
