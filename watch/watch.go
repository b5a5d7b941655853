package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
	"github.com/devk/devk/swap"
)

// Options say what to watch and what a cycle does.
type Options struct {
	// Build names the tree and components (and build flags).
	Build build.Options
	// Image says where to push; Push is forced on.
	Image image.Options
	// Swap names the node; its Components and TreeDir are set per cycle.
	Swap swap.Options
	// NoSwap stops a cycle after the push.
	NoSwap bool
	// Once runs one cycle, for the first change, then returns its error.
	Once bool
	// Quiet is the pause after the last save before a cycle starts;
	// MaxWait bounds it during a stream of saves.
	Quiet, MaxWait time.Duration
	Reporter       progress.Reporter
	// Out receives one result line per cycle.
	Out io.Writer
	// Ready, when set, is called once the watches are in place.
	Ready func(dirs int)
}

// ErrTooFewWatches says the kernel's inotify limits are too low.
var ErrTooFewWatches = errors.New("too few inotify watches")

// cycle is the state of one build → push → swap run.
type cycle struct {
	*image.Job
	swap   swap.Options
	noSwap bool
	report *swap.Report
	// swapStart is when the swap phase began: with each pod's Ready it
	// says when the cluster served the new build.
	swapStart time.Time
}

// servingSince is how long after t the last swapped pod was ready, or 0.
func (c *cycle) servingSince(t time.Time) time.Duration {
	if c == nil || c.report == nil || c.swapStart.IsZero() {
		return 0
	}
	var ready time.Duration
	for _, r := range c.report.StaticPods {
		ready = max(ready, r.Ready)
	}
	if ready == 0 {
		return 0
	}
	return c.swapStart.Add(ready).Sub(t)
}

// CyclePhases are one watch cycle: the build and push phases of `devk
// build --push`, then swap (which verifies).
func CyclePhases() []*phase.Phase[*cycle] {
	ps := phase.Map(image.BuildPhases(), func(c *cycle) *image.Job { return c.Job })
	return append(ps, &phase.Phase[*cycle]{
		Name:  "swap",
		Short: "swap the pushed images into the cluster and verify the digests (devk swap)",
		If:    func(c *cycle) (bool, string) { return !c.noSwap, "--no-swap" },
		Run: func(ctx context.Context, c *cycle) (phase.Outcome, error) {
			var err error
			c.swapStart = time.Now()
			if c.report, err = swap.Run(ctx, c.swap); err != nil {
				return phase.Done, err
			}
			if len(c.report.StaticPods) == 0 {
				return phase.Unchanged("nothing to swap"), nil
			}
			var parts []string
			for _, r := range c.report.StaticPods {
				parts = append(parts, r.Pod+" verified "+shortDigest(r.NewImage))
			}
			return phase.Changed("%s", strings.Join(parts, ", ")), nil
		},
	})
}

func shortDigest(ref string) string {
	if i := strings.LastIndex(ref, "@sha256:"); i >= 0 && len(ref) >= i+20 {
		return ref[i+1 : i+20]
	}
	return ref
}

// Run watches until ctx is done (or, with Once, for one cycle).
func Run(ctx context.Context, o Options) error {
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Quiet == 0 {
		o.Quiet = 300 * time.Millisecond
	}
	if o.MaxWait == 0 {
		o.MaxWait = 3 * time.Second
	}
	comps, err := build.Resolve(o.Build.Components)
	if err != nil {
		return err
	}
	tree, err := source.Open(o.Build.TreeDir)
	if err != nil {
		return err
	}
	o.Build.TreeDir = tree.Root
	// Refuse now what the first cycle would refuse (a bad registry, say),
	// not after the first save.
	if _, err := image.NewJob(o.Build, o.Image); err != nil {
		return err
	}
	var pkgs []string
	for _, c := range comps {
		if c.External {
			return fmt.Errorf("%s is built from a pinned module, not from the tree: there is nothing of it to watch", c.Name)
		}
		pkgs = append(pkgs, c.Package)
	}
	env := []string{"CGO_ENABLED=0"}
	if o.Build.Platform != "" {
		goos, goarch, _ := strings.Cut(o.Build.Platform, "/")
		env = append(env, "GOOS="+goos, "GOARCH="+goarch)
	}

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return inotifyError(err, 0)
	}
	defer w.Close()
	t0 := time.Now()
	watched := map[string]bool{}
	refresh := func(ctx context.Context) error {
		dirs, err := DepDirs(ctx, tree.Root, pkgs, env)
		if err != nil {
			return fmt.Errorf("list the packages %s depends on: %w", strings.Join(pkgs, " "), err)
		}
		want := map[string]bool{}
		for _, d := range dirs {
			want[d] = true
			if !watched[d] {
				if err := w.Add(d); err != nil {
					return inotifyError(err, len(dirs))
				}
				watched[d] = true
			}
		}
		for d := range watched {
			if !want[d] {
				w.Remove(d)
				delete(watched, d)
			}
		}
		return nil
	}
	if err := refresh(ctx); err != nil {
		return err
	}
	o.Reporter.Infof("watching %d directories of %s (ready in %s); save a file to build, push, swap and verify",
		len(watched), strings.Join(o.Build.Components, ", "), progress.Round(time.Since(t0)))
	if o.Ready != nil {
		o.Ready(len(watched))
	}

	// Changes flow to the debouncer; the time of each path's first change
	// is kept to report save-to-verified.
	var mu sync.Mutex
	firstSeen := map[string]time.Time{}
	events := make(chan string, 256)
	go func() {
		defer close(events)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op == fsnotify.Chmod || Ignored(tree.Root, ev.Name) {
					continue
				}
				mu.Lock()
				if _, ok := firstSeen[ev.Name]; !ok {
					firstSeen[ev.Name] = time.Now()
				}
				mu.Unlock()
				select {
				case events <- ev.Name:
				case <-ctx.Done():
					return
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				o.Reporter.Infof("watch: %v", err)
			case <-ctx.Done():
				return
			}
		}
	}()

	var last error
	Debounce(ctx, events, o.Quiet, o.MaxWait, func(ctx context.Context, batch []string) bool {
		mu.Lock()
		saved := time.Now()
		for _, p := range batch {
			if t, ok := firstSeen[p]; ok && t.Before(saved) {
				saved = t
			}
			delete(firstSeen, p)
		}
		mu.Unlock()
		o.Reporter.Infof("changed: %s", describe(tree.Root, batch))
		var c *cycle
		c, last = runCycle(ctx, o)
		took := fmt.Sprintf("%.1fs", time.Since(saved).Seconds())
		switch {
		case ctx.Err() != nil:
			fmt.Fprintf(o.Out, "stopped (%s)\n", took)
		case last != nil:
			var pf *phase.Failed
			if errors.As(last, &pf) {
				// The reporter has shown the error (a compile error can be
				// many lines): name the phase only.
				fmt.Fprintf(o.Out, "FAILED after %s: phase %s failed (its error is above)\n", took, pf.Path)
			} else {
				fmt.Fprintf(o.Out, "FAILED after %s: %v\n", took, last)
			}
			if !o.Once {
				o.Reporter.Infof("still watching; the next save tries again")
			}
		case o.NoSwap:
			fmt.Fprintf(o.Out, "pushed in %s from save\n", took)
		default:
			// Serving (the new container runs the digest and is healthy)
			// comes first; verified also waits for the mirror pod.
			if d := c.servingSince(saved); d > 0 {
				fmt.Fprintf(o.Out, "verified in %s from save (serving after %.1fs)\n", took, d.Seconds())
			} else {
				fmt.Fprintf(o.Out, "verified in %s from save\n", took)
			}
		}
		// New imports or module files change what must be watched.
		if ctx.Err() == nil {
			if err := refresh(ctx); err != nil {
				o.Reporter.Infof("watch: %v", err)
			}
		}
		return o.Once
	})
	if o.Once {
		return last
	}
	return nil
}

func runCycle(ctx context.Context, o Options) (*cycle, error) {
	imgOpts := o.Image
	imgOpts.Push = true
	j, err := image.NewJob(o.Build, imgOpts)
	if err != nil {
		return nil, err
	}
	so := o.Swap
	so.TreeDir = o.Build.TreeDir
	so.Components = o.Build.Components
	so.Reporter = o.Reporter
	c := &cycle{Job: j, swap: so, noSwap: o.NoSwap}
	_, err = phase.Run(ctx, CyclePhases(), c, phase.Options{Reporter: o.Reporter})
	return c, err
}

func describe(root string, batch []string) string {
	var rel []string
	for _, p := range batch {
		if r, err := relPath(root, p); err == nil {
			rel = append(rel, r)
		}
	}
	if len(rel) > 3 {
		return fmt.Sprintf("%s and %d more", strings.Join(rel[:3], ", "), len(rel)-3)
	}
	return strings.Join(rel, ", ")
}

func relPath(root, p string) (string, error) {
	if within(root, p) {
		return strings.TrimPrefix(p, root+string(os.PathSeparator)), nil
	}
	return p, nil
}

// inotifyError explains the kernel limits behind a failed watch.
func inotifyError(err error, dirs int) error {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w for %d directories (fs.inotify.max_user_watches): raise it with `sysctl -w fs.inotify.max_user_watches=524288` (and in /etc/sysctl.conf to keep it)", ErrTooFewWatches, dirs)
	case errors.Is(err, syscall.EMFILE):
		return fmt.Errorf("%w: too many inotify instances (fs.inotify.max_user_instances): raise it with `sysctl -w fs.inotify.max_user_instances=1024`", ErrTooFewWatches)
	}
	return fmt.Errorf("watch: %w", err)
}
