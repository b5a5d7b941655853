package images

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/execx"
)

// A cluster kubeadm bootstraps runs the images kubeadm names:
// <imageRepository>/kube-apiserver:<version> …, etcd and CoreDNS at
// kubeadm's own tags, pause at kubeadm's. devk pushes its images under
// the same repositories (kube-apiserver, etcd, coredns, pause…), so
// kubeadm's names are devk's images with kubeadm's tags: the list is
// asked of the tree's kubeadm, so that a kubeadm change to it is
// followed.

// kubeadmImageList is what `kubeadm config images list -o json` prints
// (output.kubeadm.k8s.io Images).
type kubeadmImageList struct {
	Kind   string   `json:"kind"`
	Images []string `json:"images"`
}

// KubeadmImages are the images kubeadm (the binary) needs for the
// cluster its config file describes, in its order.
func KubeadmImages(ctx context.Context, kubeadm, config string) ([]string, error) {
	out, err := execx.Output(ctx, execx.Cmd{Name: kubeadm, Args: []string{"config", "images", "list", "--config", config, "-o", "json"}})
	if err != nil {
		return nil, fmt.Errorf("list the images kubeadm needs: %w", err)
	}
	var l kubeadmImageList
	if err := json.Unmarshal(out, &l); err != nil || l.Kind != "Images" {
		return nil, fmt.Errorf("kubeadm config images list -o json printed no image list (%v): %.200s", err, out)
	}
	return l.Images, nil
}

// TagForKubeadm gives each image kubeadm wants (want: repository:tag)
// the manifest of devk's image of that repository (pushed: references by
// digest, as cluster.json records them), unless the tag already has it.
// It returns the tags it moved; an image of a repository devk has no
// image in is an error naming it.
func TagForKubeadm(ctx context.Context, r *image.Remote, pushed map[string]string, want []string) ([]string, error) {
	byRepo := map[string]name.Reference{}
	for _, ref := range pushed {
		p, err := r.ParseReference(ref)
		if err != nil {
			return nil, err
		}
		byRepo[p.Context().Name()] = p
	}
	var moved []string
	for _, w := range want {
		ref, err := r.ParseReference(w)
		if err != nil {
			return moved, err
		}
		tag, ok := ref.(name.Tag)
		if !ok {
			return moved, fmt.Errorf("kubeadm wants image %s by digest: devk can only tag its own images for kubeadm", w)
		}
		from, ok := byRepo[tag.Context().Name()]
		if !ok {
			return moved, fmt.Errorf("kubeadm wants image %s, and devk builds no image of %s (it has %s): is imageRepository devk's registry?", w, tag.Context().Name(), strings.Join(slices.Sorted(maps.Keys(byRepo)), ", "))
		}
		if d, err := r.Head(ctx, tag); err == nil && d.Digest.String() == from.Identifier() {
			continue
		}
		if err := r.Tag(ctx, from, tag); err != nil {
			return moved, fmt.Errorf("tag %s for kubeadm: %w", w, err)
		}
		moved = append(moved, w)
	}
	return moved, nil
}
