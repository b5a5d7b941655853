package poll

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Each polls, every interval and at most timeout, until check has passed
// once for every item. check returns the item's name; took says when
// each passed ("etcd 4.3s"), pending which never did. After each look
// that leaves some pending, after is told how many are ready and what
// the first pending one is waiting for ("waiting for <name>: <its
// error>"); an error from it ends the wait with that error.
func Each[T any](ctx context.Context, interval, timeout time.Duration, items []T, check func(context.Context, T) (string, error), after func(ready int, waiting string) error) (took []string, pending []T, err error) {
	t0 := time.Now()
	pending = slices.Clone(items)
	err = wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		var still []T
		var waiting string
		for _, it := range pending {
			name, err := check(ctx, it)
			if err != nil {
				if waiting == "" {
					waiting = fmt.Sprintf("waiting for %s: %v", name, err)
				}
				still = append(still, it)
				continue
			}
			took = append(took, fmt.Sprintf("%s %.1fs", name, time.Since(t0).Seconds()))
		}
		pending = still
		if len(pending) == 0 {
			return true, nil
		}
		return false, after(len(items)-len(pending), waiting)
	})
	return took, pending, err
}
