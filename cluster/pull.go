package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/devk/devk/cluster/internal/addons"
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
	rt, err := cri.Dial(c.ContainerdSocket())
	if err != nil {
		return phase.Done, err
	}
	defer rt.Close()
	images := c.nodeImages()
	var missing []string
	for _, comp := range slices.Sorted(maps.Keys(images)) {
		has, err := rt.HasImage(ctx, images[comp])
		if err != nil {
			return phase.Done, err
		}
		if !has {
			missing = append(missing, images[comp])
		}
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	if len(missing) == 0 {
		return phase.Unchanged("the node has all %d images", len(images)), nil
	}
	t0 := time.Now()
	step := progress.StepOf(ctx)
	var pulled atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for _, ref := range missing {
		g.Go(func() error {
			if _, err := rt.PullImage(gctx, ref); err != nil {
				return err
			}
			c.Reporter.Progress(step, progress.Status{Verb: "pulled", Done: pulled.Add(1), Total: int64(len(missing)), Unit: "images"})
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return phase.Done, fmt.Errorf("%w (containerd's log: %s)", err, c.LogFile("containerd"))
	}
	return phase.Changed("pulled %d images in %s (%d there already)", len(missing), progress.Round(time.Since(t0)), len(images)-len(missing)), nil
}
