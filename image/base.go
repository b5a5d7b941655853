package image

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image/debbase"
	"github.com/devk/devk/internal/layout"
)

// debianBases are the bases devk makes from Debian packages, by the
// kind a component names (build.Component.Base).
var debianBases = map[string]debbase.Spec{
	build.BaseIptables:   debbase.Iptables,
	build.BaseBusybox:    debbase.Busybox,
	build.BaseBusyboxNet: debbase.BusyboxNet,
	build.BaseDNSUtils:   debbase.DNSUtils,
}

// DebianBasePackages are the packages a base kind asks for (their
// dependencies come along), nil for a kind devk does not know.
func DebianBasePackages(kind string) []string { return slices.Clone(debianBases[kind].Packages) }

// LabelPackages lists a Debian base's packages, name=version separated by
// spaces, in name order.
const LabelPackages = "dev.devk.debian.packages"

// basePath is the PATH of every image devk makes (Debian's default for
// root): a binary at /usr/local/bin runs by its name, as kubeadm's
// manifests name them.
const basePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DebianBase is a base image made from Debian packages.
type DebianBase struct {
	Kind     string            `json:"kind"`
	Platform string            `json:"platform"`
	Packages []debbase.Package `json:"packages"`
	// Repository is <registry>/devk-<kind>-base; Tag is the first
	// package's version and the package set's key; Ref is
	// repository@digest once pushed.
	Repository  string `json:"repository"`
	Tag         string `json:"tag"`
	Ref         string `json:"ref,omitempty"`
	Digest      string `json:"digest"`
	Layer       string `json:"layer"`
	LayerCached bool   `json:"layerCached"`

	img v1.Image
}

// Image is the base image (its layer is read from the cache).
func (b *DebianBase) Image() v1.Image { return b.img }

// BaseRepository is the repository name a base kind is pushed under.
func BaseRepository(kind string) string { return "devk-" + kind + "-base" }

// DefaultBaseCacheDir is where Debian bases are cached when
// Options.BaseCache is empty: the home's (layout.Home.DebianCache).
func DefaultBaseCacheDir() (string, error) {
	home, err := layout.HomeDir("")
	if err != nil {
		return "", err
	}
	return layout.HomeFiles(home).DebianCache(), nil
}

// debianArch is the Debian architecture of a platform.
func debianArch(p v1.Platform) (string, error) {
	if p.OS == "linux" {
		switch {
		case p.Architecture == "arm" && (p.Variant == "" || p.Variant == "v7"):
			return "armhf", nil
		case p.Architecture == "ppc64le":
			return "ppc64el", nil
		case p.Architecture == "386":
			return "i386", nil
		case slices.Contains([]string{"amd64", "arm64", "s390x", "riscv64"}, p.Architecture):
			return p.Architecture, nil
		}
	}
	return "", fmt.Errorf("no Debian architecture for %s: the Debian bases are linux only", p)
}

// MakeDebianBase makes the base image of a kind (build.BaseIptables) for a
// platform from the machine's Debian packages, caching the packages and
// the layer in cacheDir (empty: DefaultBaseCacheDir) with compression
// (nil: DefaultCompression). The same package versions give the same
// digest; once cached, a rebuild downloads and compresses nothing. The
// image has one layer (the packages' files), os/arch of the platform,
// PATH, no entrypoint, the packages in LabelPackages and the newest
// package's date as its created time.
func MakeDebianBase(ctx context.Context, kind, platform, cacheDir string, compression *Compression) (*DebianBase, error) {
	spec, ok := debianBases[kind]
	if !ok {
		return nil, fmt.Errorf("unknown base kind %q (known: %s)", kind, strings.Join(slices.Sorted(maps.Keys(debianBases)), ", "))
	}
	plat, err := ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	if spec.Arch, err = debianArch(plat); err != nil {
		return nil, err
	}
	if cacheDir == "" {
		if cacheDir, err = DefaultBaseCacheDir(); err != nil {
			return nil, err
		}
	}
	pkgs, err := debbase.ResolveCached(ctx, spec, cacheDir)
	if err != nil {
		return nil, fmt.Errorf("the %s base (%s): %w", kind, strings.Join(spec.Packages, ", "), err)
	}
	key := debbase.Key(pkgs, spec)
	cache := &LayerCache{Dir: filepath.Join(cacheDir, "layers"), Compression: DefaultCompression, Keep: 3}
	if compression != nil {
		cache.Compression = *compression
	}
	cl, err := cache.LayerOf(BaseRepository(kind), key, types.OCILayer, func(w io.Writer) (time.Time, error) {
		return debbase.WriteRoot(ctx, w, filepath.Join(cacheDir, "debs"), pkgs, spec)
	})
	if err != nil {
		return nil, fmt.Errorf("the %s base: %w", kind, err)
	}
	var ids []string
	for _, p := range pkgs {
		ids = append(ids, p.ID())
	}
	created := v1.Time{Time: cl.MTime.UTC()}
	img, err := mutate.Append(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), mutate.Addendum{
		Layer:   cl.Layer,
		History: v1.History{Created: created, CreatedBy: "devk debian base: " + strings.Join(spec.Packages, " "), Comment: key},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = created
	cf.Config.Env = []string{basePath}
	cf.Config.Labels = map[string]string{LabelPackages: strings.Join(ids, " ")}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	ld, err := cl.Layer.Digest()
	if err != nil {
		return nil, err
	}
	// The tag names the main package's version for people; the key
	// tells package sets of the same version apart.
	version := ""
	for _, p := range pkgs {
		if p.Name == spec.Packages[0] {
			version = p.Version + "-"
		}
	}
	return &DebianBase{
		Kind: kind, Platform: platform, Packages: pkgs, Tag: Tag(version + key[:12]),
		Digest: d.String(), Layer: ld.String(), LayerCached: cl.Hit, img: img,
	}, nil
}

// PushDebianBase pushes a base to r as <registry>/devk-<kind>-base:<tag>
// and sets its Repository and Ref (by digest).
func PushDebianBase(ctx context.Context, r *Remote, b *DebianBase) error {
	repo, err := r.Repository(BaseRepository(b.Kind))
	if err != nil {
		return err
	}
	if err := r.Push(ctx, repo.Tag(b.Tag), b.img); err != nil {
		return fmt.Errorf("push the %s base: %w", b.Kind, err)
	}
	b.Repository, b.Ref = repo.Name(), repo.Name()+"@"+b.Digest
	return nil
}
