package cluster

import (
	"context"

	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/images"
	"github.com/devk/devk/phase"
)

// nodeImages are the images the node runs, by component: the static pods',
// the pause image and those of the addons the cluster's spec turns on.
func (c *Cluster) nodeImages() map[string]string {
	out := map[string]string{}
	for comp, ref := range c.Config.Images {
		if on, _ := addons.On(c.Config.Spec.Addons, comp); on && ref != "" {
			out[comp] = ref
		}
	}
	if ok, _ := KubeProxyRuns(c.Config); !ok {
		delete(out, addons.KubeProxy)
	}
	return out
}

// runPull pulls the node's images into its containerd, all at once, right
// after the kubelet started: the static pods' images while the kubelet
// starts up (it asks for them a second later, and waits for the same
// pulls), and the addons' while the control plane comes up, so their pods
// start as soon as they are scheduled (images.PullNode).
func (c *Cluster) runPull(ctx context.Context) (phase.Outcome, error) {
	return images.PullNode(ctx, c.FirstNode().Files.ContainerdSocket(), c.nodeImages(), c.Reporter, c.FirstNode().Files.LogFile("containerd"))
}
