package cluster

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
)

//go:embed pause/main.go
var pauseSource []byte

const (
	pauseRepo = "pause"
	pauseTag  = "devk"
)

// controlPlaneComponents are the static pods' components.
var controlPlaneComponents = []string{"etcd", "apiserver", "controller-manager", "scheduler"}

// imageComponents are the components whose images up pushes: the control
// plane's and the addons'.
var imageComponents = append(slices.Clone(controlPlaneComponents), "kube-proxy", build.CoreDNS)

func (c *Cluster) kubeletSource() string {
	if c.ImagesFrom != "" {
		return ""
	}
	return c.kubeletBuilt
}

// runImages builds (incrementally) the control-plane components and the
// kubelet from the tree, pushes the images, builds and pushes the pause
// image, and records every digest in cluster.json.
func (c *Cluster) runImages(ctx context.Context) (phase.Outcome, error) {
	if c.ImagesFrom != "" {
		return c.imagesFrom(ctx)
	}
	t0 := time.Now()
	sub := progress.Under(c.Reporter, "images")
	bo := build.Options{TreeDir: c.TreeDir, Components: append([]string{"kubelet", "kubectl"}, imageComponents...), Reporter: sub}
	bj, err := build.Run(ctx, bo, phase.Options{})
	if err != nil {
		return phase.Done, fmt.Errorf("build the cluster's components: %w", err)
	}
	built := time.Since(t0)
	kubectlChanged := false
	for _, b := range bj.Binaries {
		switch b.Name {
		case "kubelet":
			c.kubeletBuilt = b.Path
		case "kubectl":
			if kubectlChanged, err = installBinary(b.Path, c.KubectlPath()); err != nil {
				return phase.Done, fmt.Errorf("install kubectl for you: %w", err)
			}
		}
	}
	c.Config.KubeVersion = bj.Version.GitVersion

	t1 := time.Now()
	ij, err := image.PushBuilt(ctx, bj, imageComponents, image.Options{Registry: c.Config.Registry, BaseCache: c.baseCache(), Remote: c.remoteOptions()}, phase.Options{Reporter: sub})
	if err != nil {
		return phase.Done, fmt.Errorf("push the cluster's images: %w", err)
	}
	changed := kubectlChanged
	for _, r := range ij.Images {
		changed = c.recordImage(r.Component, r.Ref) || changed
	}
	pauseRef, err := c.pushPause(ctx)
	if err != nil {
		return phase.Done, err
	}
	changed = c.recordImage("pause", pauseRef) || changed
	if err := c.SaveConfig(); err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(changed, "%s: built in %s, pushed %d images in %s", c.Config.KubeVersion,
		progress.Round(built), len(ij.Images)+1, progress.Round(time.Since(t1))), nil
}

// remoteOptions reach registries with this home's registry credential
// (for devk's own registry; docker's credentials for others).
func (c *Cluster) remoteOptions() image.RemoteOptions {
	return image.RemoteOptions{Keychain: image.KeychainFor(c.Home)}
}

// baseCache is where the Debian packages and layers of image bases
// (kube-proxy's iptables base) are kept, for every cluster of the home.
func (c *Cluster) baseCache() string { return filepath.Join(c.Home, "cache", "debian") }

// KubectlPath is the kubectl up installs, built from the cluster's tree.
func (c *Cluster) KubectlPath() string { return layout.HomePaths(c.Home).Kubectl() }

// recordImage records component's image in the config; it reports
// whether that changed it.
func (c *Cluster) recordImage(component, ref string) bool {
	changed := c.Config.Images[component] != ref
	c.Config.Images[component] = ref
	return changed
}

// imagesFrom takes the images from a registry that holds them already:
// <registry>/<binary>:<tag> (or @<digest>) for the tags --images-tag
// names, resolved to digests now.
func (c *Cluster) imagesFrom(ctx context.Context) (phase.Outcome, error) {
	tags, err := ParseImagesTag(c.ImagesTag)
	if err != nil {
		return phase.Done, err
	}
	src, err := image.NewRemote(c.ImagesFrom, c.remoteOptions())
	if err != nil {
		return phase.Done, err
	}
	changed := false
	for _, comp := range imageComponents {
		bc, err := build.Lookup(comp)
		if err != nil {
			return phase.Done, err
		}
		t := tags.of(comp)
		sep := ":"
		if strings.HasPrefix(t, "sha256:") {
			sep = "@"
		}
		ref, err := src.ParseReference(strings.TrimSuffix(c.ImagesFrom, "/") + "/" + bc.Image() + sep + t)
		if err != nil {
			return phase.Done, err
		}
		d, err := src.Head(ctx, ref)
		if err != nil {
			return phase.Done, fmt.Errorf("--images-from: %w", err)
		}
		changed = c.recordImage(comp, ref.Context().Name()+"@"+d.Digest.String()) || changed
	}
	if _, err := os.Stat(c.KubeletBinary()); err != nil {
		return phase.Done, fmt.Errorf("--images-from gives the control plane, not the kubelet: put a kubelet at %s or build one (`devk build kubelet`) and run without --images-from", c.KubeletBinary())
	}
	pauseRef, err := c.pushPause(ctx)
	if err != nil {
		return phase.Done, err
	}
	changed = c.recordImage("pause", pauseRef) || changed
	if err := c.SaveConfig(); err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(changed, "from %s: %s", c.ImagesFrom, c.imagesSummary()), nil
}

// ImagesTag is --images-tag: the tag (or digest) of each component's
// image in --images-from.
type ImagesTag struct {
	// Default is the Kubernetes images' tag (the tree's version).
	Default string
	// Of are the components' own (etcd always has one).
	Of map[string]string
}

func (t ImagesTag) of(component string) string {
	if v, ok := t.Of[component]; ok {
		return v
	}
	return t.Default
}

// imagesTagExample is how --images-tag reads.
const imagesTagExample = "--images-tag v1.34.4,etcd=3.6.5-0 (a component's own with COMPONENT=TAG, or a digest: etcd=sha256:…)"

// ParseImagesTag reads --images-tag: TAG[,COMPONENT=TAG|DIGEST…]. Every
// image --images-from gives must be named: devk never takes "the
// newest" tag, which whoever could push there would choose.
func ParseImagesTag(s string) (ImagesTag, error) {
	if strings.TrimSpace(s) == "" {
		return ImagesTag{}, fmt.Errorf("--images-from needs --images-tag: name the images' tag and etcd's, e.g. %s; devk never takes the newest tag it finds", imagesTagExample)
	}
	t := ImagesTag{Of: map[string]string{}}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		comp, v, isComp := strings.Cut(part, "=")
		if !isComp {
			comp, v = "", part
		}
		if isComp && !slices.Contains(imageComponents, comp) {
			return ImagesTag{}, fmt.Errorf("--images-tag %q: %q is not a component with an image (%s)", s, comp, strings.Join(imageComponents, ", "))
		}
		if err := checkTagOrDigest(v); err != nil {
			return ImagesTag{}, fmt.Errorf("--images-tag %q: %w", s, err)
		}
		if _, dup := t.Of[comp]; (isComp && dup) || (!isComp && t.Default != "") {
			return ImagesTag{}, fmt.Errorf("--images-tag %q: %s given twice", s, cmp.Or(comp, "the default tag"))
		}
		if isComp {
			t.Of[comp] = v
		} else {
			t.Default = v
		}
	}
	for _, comp := range imageComponents {
		if t.of(comp) == "" || (comp == "etcd" && t.Of[comp] == "") {
			return ImagesTag{}, fmt.Errorf("--images-tag %q names no tag for %s (etcd has versions of its own): e.g. %s", s, comp, imagesTagExample)
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

// pauseImage builds the pause program from its embedded source (cached
// by the source's and Go's version) and makes its image, deterministic,
// and the reference containerd is configured with:
// <registry>/pause@sha256:… (the registry --registry names, if given).
func (c *Cluster) pauseImage(ctx context.Context) (v1.Image, string, error) {
	goVersion := runtime.Version()
	if out, err := execx.Output(ctx, source.SelfGo("env", "GOVERSION")); err == nil {
		goVersion = strings.TrimSpace(string(out))
	}
	sum := sha256.Sum256(append(append([]byte{}, pauseSource...), goVersion+runtime.GOARCH...))
	key := hex.EncodeToString(sum[:])[:16]
	dir := filepath.Join(c.Home, "cache", "pause", key)
	bin := filepath.Join(dir, "pause")
	if _, err := os.Stat(bin); err != nil {
		src := filepath.Join(dir, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(filepath.Join(src, "main.go"), pauseSource, 0o644); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module devk.local/pause\n\ngo 1.21\n"), 0o644); err != nil {
			return nil, "", err
		}
		cmd := execx.Cmd{Name: "go", Args: []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", bin + ".tmp", "."},
			Dir: src, Env: []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH, "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local"}}
		if err := execx.Run(ctx, cmd); err != nil {
			return nil, "", fmt.Errorf("build the pause program (needs Go): %w", err)
		}
		if err := os.Rename(bin+".tmp", bin); err != nil {
			return nil, "", err
		}
	}
	binSHA, err := build.FileSHA256(bin)
	if err != nil {
		return nil, "", err
	}
	cache := image.NewLayerCache(dir)
	layer, _, err := cache.Layer(bin, "pause", binSHA, types.OCILayer)
	if err != nil {
		return nil, "", err
	}
	img, err := image.Assemble(image.Spec{Binary: "pause", Platform: "linux/" + runtime.GOARCH, Created: time.Unix(0, 0).UTC(), Version: "devk"}, layer)
	if err != nil {
		return nil, "", err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, "", err
	}
	registry := c.Config.Registry
	if c.Registry != "" {
		registry = c.Registry
	}
	return img, registry + "/" + pauseRepo + "@" + d.String(), nil
}

// pushPause pushes the pause image as <registry>/pause:devk (the tag only
// names it for people; containerd pulls it by digest) and returns its
// reference by digest.
func (c *Cluster) pushPause(ctx context.Context) (string, error) {
	img, _, err := c.pauseImage(ctx)
	if err != nil {
		return "", err
	}
	r, err := image.NewRemote(c.Config.Registry, c.remoteOptions())
	if err != nil {
		return "", err
	}
	repo, err := r.Repository(pauseRepo)
	if err != nil {
		return "", err
	}
	if err := r.Push(ctx, repo.Tag(pauseTag), img); err != nil {
		return "", fmt.Errorf("push the pause image: %w", err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return repo.Name() + "@" + d.String(), nil
}

// imagesSummary lists the recorded images, for plans and status.
func (c *Cluster) imagesSummary() string {
	var parts []string
	for k, v := range c.Config.Images {
		if i := strings.Index(v, "@sha256:"); i >= 0 && len(v) >= i+20 {
			v = v[i+8 : i+20]
		}
		parts = append(parts, k+"@"+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
