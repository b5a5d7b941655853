package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/devk/devk/digest"
)

// DigestSources are what a running cluster adds to `devk digest`: the
// image each static pod manifest names, and the image the runtime reports
// the running container has (CRI imageRef). Components that are not
// static pods get an observation with a note and no digest.
func DigestSources(o Options) ([]digest.Source, error) {
	c, err := Open(o)
	if err != nil {
		return nil, err
	}
	if !c.Exists() {
		return nil, fmt.Errorf("%w %q: `devk up` first, or leave out the cluster's sources", errNoCluster, c.Config.Name)
	}
	return []digest.Source{ManifestSource{c}, RuntimeSource{c}}, nil
}

func staticPodOf(component string) (StaticPod, bool) {
	for _, sp := range StaticPods {
		if sp.Component == component {
			return sp, true
		}
	}
	return StaticPod{}, false
}

func digestOf(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		return ref[i+1:]
	}
	return ""
}

// ManifestSource reads the image a static pod manifest names.
type ManifestSource struct{ c *Cluster }

func (ManifestSource) Name() string { return "manifest" }

func (s ManifestSource) Observe(_ context.Context, t digest.Target) (digest.Observation, error) {
	sp, ok := staticPodOf(t.Component.Name)
	if !ok {
		return digest.Observation{Note: t.Component.Name + " is not a static pod of the cluster"}, nil
	}
	path := s.c.ManifestPath(sp.Name)
	img, err := readManifestImage(path)
	if err != nil {
		return digest.Observation{Ref: path, Note: "no manifest: run `devk up`"}, nil
	}
	ob := digest.Observation{Ref: path, Digest: digestOf(img)}
	if ob.Digest == "" {
		ob.Note = "the manifest names a tag, not a digest: " + img
	}
	return ob, nil
}

// RuntimeSource reads the imageRef the CRI runtime reports for the
// component's running container.
type RuntimeSource struct{ c *Cluster }

func (RuntimeSource) Name() string { return "cri" }

func (s RuntimeSource) Observe(ctx context.Context, t digest.Target) (digest.Observation, error) {
	sp, ok := staticPodOf(t.Component.Name)
	if !ok {
		return digest.Observation{Note: t.Component.Name + " is not a static pod of the cluster"}, nil
	}
	cri, err := dialCRI(ctx, s.c.Config.CRISocket)
	if err != nil {
		return digest.Observation{}, err
	}
	defer cri.Close()
	cts, err := cri.containers(ctx)
	if err != nil {
		return digest.Observation{}, fmt.Errorf("ask the runtime at %s: %w (is the cluster up? `devk status`)", s.c.Config.CRISocket, err)
	}
	var best *ContainerInfo
	for i, ct := range cts {
		if ct.Name == sp.Name && ct.PodName == sp.Name+"-"+s.c.Config.NodeName && ct.State == "RUNNING" {
			if best == nil || ct.Attempt > best.Attempt {
				best = &cts[i]
			}
		}
	}
	if best == nil {
		return digest.Observation{Note: sp.Name + " has no running container"}, nil
	}
	return digest.Observation{Ref: "container " + best.ID[:12], Digest: digestOf(best.ImageRef)}, nil
}
