package images

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// Missing are the references among images (by component) that the
// runtime rt does not have, sorted, each once.
func Missing(ctx context.Context, rt *cri.Client, images map[string]string) ([]string, error) {
	var missing []string
	for _, comp := range slices.Sorted(maps.Keys(images)) {
		has, err := rt.HasImage(ctx, images[comp])
		if err != nil {
			return nil, err
		}
		if !has {
			missing = append(missing, images[comp])
		}
	}
	slices.Sort(missing)
	return slices.Compact(missing), nil
}

// Pull pulls refs into the runtime rt, all at once; pulled is told how
// many are done after each.
func Pull(ctx context.Context, rt *cri.Client, refs []string, pulled func(done int64)) error {
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for _, ref := range refs {
		g.Go(func() error {
			if _, err := rt.PullImage(gctx, ref); err != nil {
				return err
			}
			pulled(done.Add(1))
			return nil
		})
	}
	return g.Wait()
}

// PullNode is up's pull phase on the node whose containerd serves
// socket: the images of node (by component) it lacks pulled all at
// once, progress reported as step's, an error naming containerd's log.
// Images the runtime has are left alone.
func PullNode(ctx context.Context, socket string, node map[string]string, r progress.Reporter, containerdLog string) (phase.Outcome, error) {
	rt, err := cri.Dial(socket)
	if err != nil {
		return phase.Done, err
	}
	defer rt.Close()
	missing, err := Missing(ctx, rt, node)
	if err != nil {
		return phase.Done, err
	}
	if len(missing) == 0 {
		return phase.Unchanged("the node has all %d images", len(node)), nil
	}
	t0 := time.Now()
	step := progress.StepOf(ctx)
	err = Pull(ctx, rt, missing, func(done int64) {
		r.Progress(step, progress.Status{Verb: "pulled", Done: done, Total: int64(len(missing)), Unit: "images"})
	})
	if err != nil {
		return phase.Done, fmt.Errorf("%w (containerd's log: %s)", err, containerdLog)
	}
	return phase.Changed("pulled %d images in %s (%d there already)", len(missing), progress.Round(time.Since(t0)), len(node)-len(missing)), nil
}
