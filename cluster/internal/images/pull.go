package images

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/devk/devk/internal/cri"
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
