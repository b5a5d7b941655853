package cluster

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cluster/internal/images"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

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
	bj, err := c.buildComponents(ctx, sub)
	if err != nil {
		return phase.Done, fmt.Errorf("build the cluster's components: %w", err)
	}
	built := time.Since(t0)
	c.startKubectl(ctx)
	for _, b := range bj.Binaries {
		switch b.Name {
		case "kubelet":
			c.kubeletBuilt = b.Path
		case kubeadmComponent:
			c.kubeadmBuilt = b.Path
		}
	}
	c.Config.KubeVersion = bj.Version.GitVersion

	t1 := time.Now()
	ij, err := image.PushBuilt(ctx, bj, images.Components(), c.imageOptions(), phase.Options{Reporter: sub})
	if err != nil {
		return phase.Done, fmt.Errorf("push the cluster's images: %w", err)
	}
	changed := false
	for _, r := range ij.Images {
		changed = c.recordImage(r.Component, r.Ref) || changed
	}
	if changed, err = c.recordPauseAndSave(ctx, changed); err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(changed, "%s: built in %s, pushed %d images in %s", c.Config.KubeVersion,
		progress.Round(built), len(ij.Images)+1, progress.Round(time.Since(t1))), nil
}

// buildComponents builds, incrementally, what the cluster's nodes run
// from its tree: the kubelet, the images' components, and kubeadm for a
// cluster kubeadm bootstraps (kubectl is built beside the phases after:
// startKubectl).
func (c *Cluster) buildComponents(ctx context.Context, r progress.Reporter) (*build.Job, error) {
	comps := append([]string{"kubelet"}, images.Components()...)
	if c.Config.Spec.Kubeadm() {
		comps = append(comps, kubeadmComponent)
	}
	return build.Run(ctx, build.Options{TreeDir: c.TreeDir, Components: comps, Reporter: r}, phase.Options{})
}

// RemoteOptions reach registries with this home's registry credential
// (for devk's own registry; docker's credentials for others).
func (c *Cluster) RemoteOptions() image.RemoteOptions {
	return image.RemoteOptions{Keychain: image.KeychainFor(c.Home)}
}

// imageOptions push images to the cluster's registry.
func (c *Cluster) imageOptions() image.Options {
	return image.Options{Registry: c.Config.Registry, BaseCache: c.home().DebianCache(), Remote: c.RemoteOptions()}
}

// KubectlPath is the kubectl up installs, built from the cluster's tree.
func (c *Cluster) KubectlPath() string { return c.home().Kubectl() }

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
	tags, err := images.ParseTags(c.ImagesTag)
	if err != nil {
		return phase.Done, err
	}
	refs, err := images.FromRegistry(ctx, c.ImagesFrom, c.RemoteOptions(), tags)
	if err != nil {
		return phase.Done, err
	}
	changed := false
	for _, comp := range images.Components() {
		changed = c.recordImage(comp, refs[comp]) || changed
	}
	if _, err := os.Stat(c.FirstNode().Files.KubeletBinary()); err != nil {
		return phase.Done, fmt.Errorf("--images-from gives the control plane, not the kubelet: put a kubelet at %s or build one (`devk build kubelet`) and run without --images-from", c.FirstNode().Files.KubeletBinary())
	}
	if changed, err = c.recordPauseAndSave(ctx, changed); err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(changed, "from %s: %s", c.ImagesFrom, images.Summary(c.Config.Images)), nil
}

// ParseImagesTag reads --images-tag (images.ParseTags), for the
// command's check of its flags.
func ParseImagesTag(s string) (images.Tags, error) { return images.ParseTags(s) }

// pushPause pushes the pause image to the cluster's registry and
// returns its reference by digest.
func (c *Cluster) pushPause(ctx context.Context) (string, error) {
	return images.PushPause(ctx, c.home().PauseCache(), c.Config.Registry, c.RemoteOptions())
}

// recordPauseAndSave pushes the pause image, records it with the images
// before it, and saves cluster.json: the end of both ways of getting the
// images. changed is whether anything was recorded so far.
func (c *Cluster) recordPauseAndSave(ctx context.Context, changed bool) (bool, error) {
	pauseRef, err := c.pushPause(ctx)
	if err != nil {
		return changed, err
	}
	changed = c.recordImage("pause", pauseRef) || changed
	return changed, c.SaveConfig()
}
