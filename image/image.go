// Package image makes deterministic OCI images of built components and
// pushes them: the binary at /usr/local/bin/<name> (or where the
// component's layout says: /coredns, /agnhost) as the entrypoint,
// zero mtimes, fixed modes and owners, the created time of the source, on
// no base layer by default (kube-proxy on an iptables base made from
// Debian packages, see MakeDebianBase and image/debbase). Layers are
// cached by the binary's sha256, so an
// unchanged binary is neither compressed nor uploaded again. The image and
// push phases run after the build phases on one shared job.
package image

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Labels the image carries (OCI annotation keys, used as config labels).
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
)

// DebuggerPath is where a debug image holds Delve (Options.Debugger).
const DebuggerPath = BinDir + "/dlv"

// DebugTagSuffix ends the tag of an image of a debug build or with the
// debugger (<version>-debug), so that it does not take the normal
// image's tag.
const DebugTagSuffix = "-debug"

// Spec is everything an image is made of. The same Spec and binary give
// the same image digest.
type Spec struct {
	// Binary is the file name inside the image, under BinDir unless Path
	// says otherwise.
	Binary string
	// Path is the binary's absolute path inside the image; empty means
	// BinDir/Binary.
	Path string
	// Entrypoint is the image's; empty means [the binary's path]. Cmd is
	// its default arguments.
	Entrypoint, Cmd []string
	// Platform is os/arch[/variant].
	Platform string
	// Created is the image's creation time (the source's time, never now).
	Created time.Time
	// Version and Revision become the OCI version and revision labels
	// (left out when empty).
	Version  string
	Revision string
	// Base is the image to put the binary on; nil means no base layer.
	Base v1.Image
}

// BinaryPath is where the image holds the binary.
func (s Spec) BinaryPath() string {
	if s.Path != "" {
		return s.Path
	}
	return BinDir + "/" + s.Binary
}

// ParsePlatform turns os/arch[/variant] into a v1.Platform, with
// go-containerregistry's v1.ParsePlatform; both os and arch are needed.
func ParsePlatform(s string) (v1.Platform, error) {
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("platform %q: %v: use os/arch[/variant], e.g. linux/amd64", s, err)
	}
	if p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: use os/arch[/variant], e.g. linux/amd64", s)
	}
	return *p, nil
}

// layerMediaType matches the base's manifest flavour: an OCI layer on an
// OCI (or no) base, a Docker layer on a Docker schema 2 base.
func layerMediaType(base v1.Image) (types.MediaType, error) {
	if base == nil {
		return types.OCILayer, nil
	}
	mt, err := base.MediaType()
	if err != nil {
		return "", err
	}
	if mt == types.DockerManifestSchema2 {
		return types.DockerLayer, nil
	}
	return types.OCILayer, nil
}

// Assemble puts the layer on the base (or on nothing) and writes the
// config: platform, entrypoint, labels, created time and history.
func Assemble(spec Spec, layer v1.Layer) (v1.Image, error) {
	plat, err := ParsePlatform(spec.Platform)
	if err != nil {
		return nil, err
	}
	base := spec.Base
	if base == nil {
		base = mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	}
	created := v1.Time{Time: spec.Created.UTC()}
	binPath := spec.BinaryPath()
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "devk image: " + binPath,
			Comment:   spec.Version,
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read the config of the base image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = created
	cf.Author = ""
	cf.Config.Entrypoint = []string{binPath}
	if len(spec.Entrypoint) > 0 {
		cf.Config.Entrypoint = slices.Clone(spec.Entrypoint)
	}
	cf.Config.Cmd = slices.Clone(spec.Cmd)
	if spec.Base == nil {
		cf.Config.Env = []string{basePath}
	}
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	for k, v := range map[string]string{LabelVersion: spec.Version, LabelRevision: spec.Revision} {
		if v != "" {
			cf.Config.Labels[k] = v
		}
	}
	return mutate.ConfigFile(img, cf)
}

// PullBase fetches the base image's manifest and config for the platform
// (its layers are read only if the registry lacks them at push time).
func PullBase(ctx context.Context, ref string, platform string, r *Remote) (v1.Image, error) {
	plat, err := ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	img, err := r.Image(ctx, ref, plat)
	if err != nil {
		return nil, fmt.Errorf("base image %s cannot be pulled: %w (check the reference, that you are logged in to its registry, or drop --base)", ref, err)
	}
	return img, nil
}
