// Package images knows a cluster's component images apart from building
// them: which components have one, the images --images-from gives by
// --images-tag (tags or digests, resolved to digests), devk's pause
// image (built from its embedded source, pushed, referred to by digest)
// and the pull of a node's images into its runtime through CRI.
// cluster's images, runtime and pull phases call it.
package images

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/validname"
)

// controlPlaneComponents are the static pods' components.
var controlPlaneComponents = []string{"etcd", "apiserver", "controller-manager", "scheduler"}

// components is Components' list.
var components = append(slices.Clone(controlPlaneComponents), "kube-proxy", build.CoreDNS)

// Components are the components whose images up pushes: the control
// plane's and the addons'.
func Components() []string { return slices.Clone(components) }

// FromRegistry resolves the images of Components in the registry at
// from (reached with o), <from>/<binary>:<tag> (or @<digest>) as tags
// names them, to references by digest, by component.
func FromRegistry(ctx context.Context, from string, o image.RemoteOptions, tags Tags) (map[string]string, error) {
	src, err := image.NewRemote(from, o)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, comp := range components {
		bc, err := build.Lookup(comp)
		if err != nil {
			return nil, err
		}
		t := tags.Tag(comp)
		sep := ":"
		if strings.HasPrefix(t, "sha256:") {
			sep = "@"
		}
		ref, err := src.ParseReference(strings.TrimSuffix(from, "/") + "/" + bc.Image() + sep + t)
		if err != nil {
			return nil, err
		}
		d, err := src.Head(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("--images-from: %w", err)
		}
		out[comp] = ref.Context().Name() + "@" + d.Digest.String()
	}
	return out, nil
}

// Tags is --images-tag: the tag (or digest) of each component's image
// in --images-from.
type Tags struct {
	// Default is the Kubernetes images' tag (the tree's version).
	Default string
	// Of are the components' own (etcd always has one).
	Of map[string]string
}

// Tag is component's tag or digest.
func (t Tags) Tag(component string) string {
	if v, ok := t.Of[component]; ok {
		return v
	}
	return t.Default
}

// imagesTagExample is how --images-tag reads.
const imagesTagExample = "--images-tag v1.34.4,etcd=3.6.5-0 (a component's own with COMPONENT=TAG, or a digest: etcd=sha256:…)"

// ParseTags reads --images-tag: TAG[,COMPONENT=TAG|DIGEST…]. Every
// image --images-from gives must be named: devk never takes "the
// newest" tag, which whoever could push there would choose.
func ParseTags(s string) (Tags, error) {
	if strings.TrimSpace(s) == "" {
		return Tags{}, fmt.Errorf("--images-from needs --images-tag: name the images' tag and etcd's, e.g. %s; devk never takes the newest tag it finds", imagesTagExample)
	}
	t := Tags{Of: map[string]string{}}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		comp, v, isComp := strings.Cut(part, "=")
		if !isComp {
			comp, v = "", part
		}
		if isComp && !slices.Contains(components, comp) {
			return Tags{}, fmt.Errorf("--images-tag %q: %q is not a component with an image (%s)", s, comp, strings.Join(components, ", "))
		}
		if err := checkTagOrDigest(v); err != nil {
			return Tags{}, fmt.Errorf("--images-tag %q: %w", s, err)
		}
		if _, dup := t.Of[comp]; (isComp && dup) || (!isComp && t.Default != "") {
			return Tags{}, fmt.Errorf("--images-tag %q: %s given twice", s, cmp.Or(comp, "the default tag"))
		}
		if isComp {
			t.Of[comp] = v
		} else {
			t.Default = v
		}
	}
	for _, comp := range components {
		if t.Tag(comp) == "" || (comp == "etcd" && t.Of[comp] == "") {
			return Tags{}, fmt.Errorf("--images-tag %q names no tag for %s (etcd has versions of its own): e.g. %s", s, comp, imagesTagExample)
		}
	}
	return t, nil
}

func checkTagOrDigest(v string) error {
	if strings.HasPrefix(v, "sha256:") {
		if _, err := v1.NewHash(v); err != nil {
			return fmt.Errorf("%q is not a digest (sha256: and 64 hex digits)", v)
		}
		return nil
	}
	return validname.ImageTag(v)
}

// Summary lists images (by component) short, for plans and status:
// component@<the digest's first 12 hex digits>, sorted.
func Summary(images map[string]string) string {
	var parts []string
	for k, v := range images {
		if i := strings.Index(v, "@sha256:"); i >= 0 && len(v) >= i+20 {
			v = v[i+8 : i+20]
		}
		parts = append(parts, k+"@"+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
