package loop

import (
	"context"
	"sort"
	"time"
)

// Debounce turns a stream of changed paths into cycles. A cycle starts
// once no change has come for quiet (or maxWait after the first change of
// a burst, whichever is first). Changes that arrive while a cycle runs are
// kept and start exactly one cycle after it. run gets the sorted, distinct
// paths of its batch. Debounce returns when ctx is done (after the running
// cycle returns) or when run returns stop = true.
func Debounce(ctx context.Context, events <-chan string, quiet, maxWait time.Duration, run func(ctx context.Context, batch []string) (stop bool)) {
	pending := map[string]bool{}
	var quietC, maxC <-chan time.Time
	var quietT, maxT *time.Timer
	arm := func() {
		if quietT != nil {
			quietT.Stop()
		}
		quietT = time.NewTimer(quiet)
		quietC = quietT.C
		if maxC == nil {
			maxT = time.NewTimer(maxWait)
			maxC = maxT.C
		}
	}
	disarm := func() {
		for _, t := range []*time.Timer{quietT, maxT} {
			if t != nil {
				t.Stop()
			}
		}
		quietC, maxC, quietT, maxT = nil, nil, nil, nil
	}
	done := make(chan bool, 1)
	running := false
	start := func() {
		batch := make([]string, 0, len(pending))
		for p := range pending {
			batch = append(batch, p)
		}
		sort.Strings(batch)
		pending = map[string]bool{}
		disarm()
		running = true
		go func() { done <- run(ctx, batch) }()
	}
	for {
		select {
		case p, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			pending[p] = true
			if !running {
				arm()
			}
		case <-quietC:
			start()
		case <-maxC:
			start()
		case stop := <-done:
			running = false
			if stop || ctx.Err() != nil {
				disarm()
				return
			}
			if len(pending) > 0 {
				arm() // what was saved during the cycle: one more cycle, after a quiet period
			}
		case <-ctx.Done():
			if running {
				<-done
			}
			disarm()
			return
		}
	}
}
