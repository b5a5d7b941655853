package loop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/devk/devk/build"
	"github.com/devk/devk/conformance"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
	"github.com/devk/devk/swap"
)

const (
	// DefaultQuiet is the pause after the last save before a cycle
	// starts (--debounce).
	DefaultQuiet = 300 * time.Millisecond
	// DefaultMaxWait bounds that pause during a stream of saves.
	DefaultMaxWait = 3 * time.Second
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
	// E2E, when its Focus is set, runs the e2e specs it selects after
	// each verified swap (devk watch --e2e-focus); a failed spec fails
	// the cycle but rolls nothing back.
	E2E conformance.Options
	// Once runs one cycle, for the first change, then returns its error.
	Once bool
	// Phases select the phases of each cycle (--skip-phases, `phase
	// PATH`); with DryRun, Run prints a cycle's plan and returns.
	Phases phase.Options
	// Quiet is the pause after the last save before a cycle starts;
	// MaxWait bounds it during a stream of saves. Zero: DefaultQuiet,
	// DefaultMaxWait.
	Quiet, MaxWait time.Duration
	Reporter       progress.Reporter
	// Out receives one result line per cycle.
	Out io.Writer
	// Ready, when set, is called once the watches are in place.
	Ready func(dirs int)
}

// ErrTooFewWatches says the kernel's inotify limits are too low.
var ErrTooFewWatches = errors.New("too few inotify watches")

// watcher is one `devk watch`: its options, the tree, and the directories
// it watches.
type watcher struct {
	o    Options
	tree *source.Tree
	pkgs []string // the components' main packages
	env  []string // for go list, as the build sets it
	w    *fsnotify.Watcher
	// watched are the directories with a watch.
	watched map[string]bool

	mu sync.Mutex
	// firstSeen is the time of each changed path's first change, to
	// report save-to-verified.
	firstSeen map[string]time.Time
}

// Run watches until ctx is done (or, with Once, for one cycle).
func Run(ctx context.Context, o Options) error {
	l, err := newWatcher(o)
	if err != nil {
		return err
	}
	if o.Phases.DryRun {
		_, err := l.runCycle(ctx)
		return err
	}
	if l.w, err = fsnotify.NewWatcher(); err != nil {
		return inotifyError(err, 0)
	}
	defer l.w.Close()
	t0 := time.Now()
	if err := l.refresh(ctx); err != nil {
		return err
	}
	o.Reporter.Infof("watching %d directories of %s (ready in %s); save a file to build, push, swap and verify",
		len(l.watched), strings.Join(o.Build.Components, ", "), progress.Round(time.Since(t0)))
	if o.Ready != nil {
		o.Ready(len(l.watched))
	}
	var last error
	Debounce(ctx, l.changes(ctx), l.o.Quiet, l.o.MaxWait, func(ctx context.Context, batch []string) bool {
		last = l.cycle(ctx, batch)
		return o.Once
	})
	if o.Once {
		return last
	}
	return nil
}

// newWatcher checks the options: what the first cycle would refuse (a
// bad registry, say) is refused now, not after the first save.
func newWatcher(o Options) (*watcher, error) {
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Quiet == 0 {
		o.Quiet = DefaultQuiet
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.E2E.Focus != "" {
		if o.NoSwap {
			return nil, fmt.Errorf("--e2e-focus runs specs against what a cycle swapped in: drop --no-swap")
		}
		if _, err := regexp.Compile(o.E2E.Focus); err != nil {
			return nil, fmt.Errorf("--e2e-focus %q is not a regular expression ginkgo takes: %w", o.E2E.Focus, err)
		}
		if err := o.E2E.Validate(); err != nil {
			return nil, err
		}
	}
	comps, err := build.Resolve(o.Build.Components)
	if err != nil {
		return nil, err
	}
	tree, err := source.Open(o.Build.TreeDir)
	if err != nil {
		return nil, err
	}
	o.Build.TreeDir = tree.Root
	if _, err := image.NewJob(o.Build, o.Image); err != nil {
		return nil, err
	}
	// So are unknown phases to skip: a dry run without a plan checks the
	// selection and runs nothing.
	check := o.Phases
	check.DryRun, check.PlanOut = true, nil
	if _, err := phase.Run(context.Background(), CyclePhases(), &cycle{}, check); err != nil {
		return nil, err
	}
	l := &watcher{o: o, tree: tree, watched: map[string]bool{}, firstSeen: map[string]time.Time{}, env: []string{"CGO_ENABLED=0"}}
	for _, c := range comps {
		if c.External {
			return nil, fmt.Errorf("%s is built from a pinned module, not from the tree: there is nothing of it to watch", c.Name)
		}
		l.pkgs = append(l.pkgs, c.Package)
	}
	if o.Build.Platform != "" {
		l.env = append(l.env, build.GoEnv(o.Build.Platform)...)
	}
	return l, nil
}

// refresh watches the directories of every package the components
// depend on now, and stops watching those they no longer do.
func (l *watcher) refresh(ctx context.Context) error {
	dirs, err := DepDirs(ctx, l.tree.Root, l.pkgs, l.env)
	if err != nil {
		return fmt.Errorf("list the packages %s depends on: %w", strings.Join(l.pkgs, " "), err)
	}
	want := map[string]bool{}
	for _, d := range dirs {
		want[d] = true
		if !l.watched[d] {
			if err := l.w.Add(d); err != nil {
				return inotifyError(err, len(dirs))
			}
			l.watched[d] = true
		}
	}
	for d := range l.watched {
		if !want[d] {
			l.w.Remove(d)
			delete(l.watched, d)
		}
	}
	return nil
}

// changes forwards the paths that changed (ignoring what Ignored
// ignores) until ctx is done, noting when each first changed.
func (l *watcher) changes(ctx context.Context) <-chan string {
	events := make(chan string, 256)
	go func() {
		defer close(events)
		for {
			select {
			case ev, ok := <-l.w.Events:
				if !ok {
					return
				}
				if ev.Op == fsnotify.Chmod || Ignored(l.tree.Root, ev.Name) {
					continue
				}
				l.mu.Lock()
				if _, ok := l.firstSeen[ev.Name]; !ok {
					l.firstSeen[ev.Name] = time.Now()
				}
				l.mu.Unlock()
				select {
				case events <- ev.Name:
				case <-ctx.Done():
					return
				}
			case err, ok := <-l.w.Errors:
				if !ok {
					return
				}
				l.o.Reporter.Infof("watch: %v", err)
			case <-ctx.Done():
				return
			}
		}
	}()
	return events
}

// savedAt is when the first of the batch's changes was seen (and forgets
// them).
func (l *watcher) savedAt(batch []string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	saved := time.Now()
	for _, p := range batch {
		if t, ok := l.firstSeen[p]; ok && t.Before(saved) {
			saved = t
		}
		delete(l.firstSeen, p)
	}
	return saved
}

// cycle runs one cycle for a batch of changes, prints its result line,
// and follows new imports; it returns the cycle's error.
func (l *watcher) cycle(ctx context.Context, batch []string) error {
	saved := l.savedAt(batch)
	l.o.Reporter.Infof("changed: %s", describe(l.tree.Root, batch))
	c, err := l.runCycle(ctx)
	l.report(ctx, c, err, time.Since(saved), saved)
	// New imports or module files change what must be watched.
	if ctx.Err() == nil {
		if err := l.refresh(ctx); err != nil {
			l.o.Reporter.Infof("watch: %v", err)
		}
	}
	return err
}

// report prints a cycle's result line.
func (l *watcher) report(ctx context.Context, c *cycle, err error, took time.Duration, saved time.Time) {
	out := l.o.Out
	secs := fmt.Sprintf("%.1fs", took.Seconds())
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(out, "stopped (%s)\n", secs)
	case errors.Is(err, conformance.ErrFailed) && c.e2e != nil && c.e2e.Summary != nil:
		reportE2EFailure(out, secs, c.e2e)
	case err != nil:
		var pf *phase.Failed
		if errors.As(err, &pf) && err == error(pf) {
			// The reporter has shown the error (a compile error can be
			// many lines): name the phase only.
			fmt.Fprintf(out, "FAILED after %s: phase %s failed (its error is above)\n", secs, pf.Path)
		} else {
			fmt.Fprintf(out, "FAILED after %s: %v\n", secs, err)
		}
		if !l.o.Once {
			l.o.Reporter.Infof("still watching; the next save tries again")
		}
	case l.o.NoSwap:
		fmt.Fprintf(out, "pushed in %s from save\n", secs)
	default:
		// Serving (the new container runs the digest and is healthy)
		// comes first; verified also waits for the mirror pod.
		e := c.e2e
		verified := secs
		if e != nil && !c.e2eStart.IsZero() {
			verified = fmt.Sprintf("%.1fs", c.e2eStart.Sub(saved).Seconds())
		}
		line := fmt.Sprintf("verified in %s from save", verified)
		if d := c.servingSince(saved); d > 0 {
			line += fmt.Sprintf(" (serving after %.1fs)", d.Seconds())
		}
		if e != nil && e.Summary != nil {
			line += fmt.Sprintf("; e2e %s in %.1fs (%s from save)", e.Summary.Counts(), e.Seconds, secs)
		}
		fmt.Fprintln(out, line)
	}
}

// reportE2EFailure prints the cycle's line when the swap was verified
// and specs failed: which, and the first lines of each failure.
func reportE2EFailure(out io.Writer, secs string, r *conformance.Result) {
	fmt.Fprintf(out, "verified, then e2e FAILED after %s from save: %s (log %s)\n", secs, r.Summary.Counts(), r.Log)
	for _, f := range r.Summary.Failed {
		fmt.Fprintf(out, "  ✗ %s\n", f.Name)
		for _, l := range strings.Split(f.Message, "\n") {
			fmt.Fprintf(out, "      %s\n", l)
		}
	}
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
