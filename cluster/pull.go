package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/images"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/progress"
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
// start as soon as they are scheduled. Images the runtime has are left
// alone.
func (c *Cluster) runPull(ctx context.Context) (phase.Outcome, error) {
	rt, err := cri.Dial(c.FirstNode().Files.ContainerdSocket())
	if err != nil {
		return phase.Done, err
	}
	defer rt.Close()
	node := c.nodeImages()
	missing, err := images.Missing(ctx, rt, node)
	if err != nil {
		return phase.Done, err
	}
	if len(missing) == 0 {
		return phase.Unchanged("the node has all %d images", len(node)), nil
	}
	t0 := time.Now()
	step := progress.StepOf(ctx)
	err = images.Pull(ctx, rt, missing, func(done int64) {
		c.Reporter.Progress(step, progress.Status{Verb: "pulled", Done: done, Total: int64(len(missing)), Unit: "images"})
	})
	if err != nil {
		return phase.Done, fmt.Errorf("%w (containerd's log: %s)", err, c.FirstNode().Files.LogFile("containerd"))
	}
	return phase.Changed("pulled %d images in %s (%d there already)", len(missing), progress.Round(time.Since(t0)), len(node)-len(missing)), nil
}
