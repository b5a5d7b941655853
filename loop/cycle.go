package loop

import (
	"context"
	"strings"
	"time"

	"github.com/devk/devk/conformance"
	"github.com/devk/devk/image"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap"
)

// cycle is the state of one build → push → swap run.
type cycle struct {
	*image.Job
	swapOpts swap.Options
	noSwap   bool
	// swap is the swap job: made (for plans) before the cycle, and made
	// again by the swap phase once the push has recorded its digests.
	swap *swap.Job
	// swapStart is when the swap phase began: with each pod's Ready it
	// says when the cluster served the new build.
	swapStart time.Time
	// e2eOpts select the specs run after the swap (none without a
	// Focus); e2e is their result.
	e2eOpts conformance.Options
	e2e     *conformance.Result
	// e2eStart is when the specs began: the swap was verified then.
	e2eStart time.Time
}

// servingSince is how long after t the last swapped pod was ready, or 0.
func (c *cycle) servingSince(t time.Time) time.Duration {
	if c == nil || c.swap == nil || c.swapStart.IsZero() {
		return 0
	}
	var ready time.Duration
	for _, r := range c.swap.Report.StaticPods {
		ready = max(ready, r.Ready)
	}
	if ready == 0 {
		return 0
	}
	return c.swapStart.Add(ready).Sub(t)
}

// CyclePhases are one watch cycle: the build and push phases of `devk
// build --push`, then the phases of `devk swap` under swap/ (which
// verify), so a plan, --skip-phases and the progress lines name each.
func CyclePhases() []*phase.Phase[*cycle] {
	ps := phase.Map(image.BuildPhases(), func(c *cycle) *image.Job { return c.Job })
	swaps := phase.Map(swap.Phases(), func(c *cycle) *swap.Job {
		if c.swap == nil {
			return &swap.Job{} // a plan of a cycle that does not swap
		}
		return c.swap
	})
	const parent = "swap"
	phase.Nest(parent, swaps)
	ps = append(ps, &phase.Phase[*cycle]{
		Name:     parent,
		Short:    "swap the pushed images into the cluster and verify the digests (the phases of devk swap)",
		If:       func(c *cycle) (bool, string) { return !c.noSwap, "--no-swap" },
		Children: swaps,
		Run: func(_ context.Context, c *cycle) (phase.Outcome, error) {
			// The push recorded the digests to swap to: read them now.
			j, err := swap.NewJob(c.swapOpts)
			if err != nil {
				return phase.Done, err
			}
			c.swap, c.swapStart = j, time.Now()
			return phase.Unchanged("%s", strings.Join(c.swapOpts.Components, ", ")), nil
		},
	})
	return append(ps, &phase.Phase[*cycle]{
		Name:  "e2e",
		Short: "run the e2e specs --e2e-focus selects against the swapped cluster (devk e2e)",
		If: func(c *cycle) (bool, string) {
			if c.noSwap {
				return false, "--no-swap"
			}
			return c.e2eOpts.Focus != "", "no --e2e-focus"
		},
		Run: func(ctx context.Context, c *cycle) (phase.Outcome, error) {
			c.e2eStart = time.Now()
			res, err := conformance.Run(ctx, c.e2eOpts)
			c.e2e = res
			if err != nil {
				return phase.Done, err
			}
			return phase.Changed("%s in %.1fs", res.Summary.Counts(), res.Seconds), nil
		},
	})
}

// runCycle builds, pushes and (unless NoSwap) swaps once.
func (l *watcher) runCycle(ctx context.Context) (*cycle, error) {
	imgOpts := l.o.Image
	imgOpts.Push = true
	j, err := image.NewJob(l.o.Build, imgOpts)
	if err != nil {
		return nil, err
	}
	so := l.o.Swap
	so.TreeDir = l.o.Build.TreeDir
	so.Components = l.o.Build.Components
	so.Reporter = l.o.Reporter
	eo := l.o.E2E
	eo.TreeDir = l.o.Build.TreeDir
	eo.Reporter = l.o.Reporter
	eo.KeepSuite = true
	c := &cycle{Job: j, swapOpts: so, noSwap: l.o.NoSwap, e2eOpts: eo}
	popts := l.o.Phases
	popts.Reporter = l.o.Reporter
	if popts.DryRun && !c.noSwap {
		// The plan names what the swap would read and write now.
		if c.swap, err = swap.NewJob(so); err != nil {
			return c, err
		}
	}
	_, err = phase.Run(ctx, CyclePhases(), c, popts)
	if c.swap != nil {
		err = c.swap.Close(ctx, err)
	}
	return c, err
}
