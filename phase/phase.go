// Package phase is devk's workflow engine. A job (bootstrap, teardown, the
// build→push→swap loop) is a tree of phases declared as data; the runner
// flattens the tree into paths such as "control-plane/apiserver", honours
// --only and --skip-phases, refuses runs whose needs are skipped, prints a
// dry-run plan, times every phase, and reports progress through one
// reporter. Phases share a typed state S instead of an untyped bag.
package phase

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/progress"
)

// Phase is one step of a job. A phase with children runs its own Run (if
// any) first, then its children in order.
type Phase[S any] struct {
	// Name is the path element; it must not contain '/'.
	Name string
	// Short is the one-line help shown in --help and plans.
	Short string
	// Children run after this phase's own Run.
	Children []*Phase[S]
	// Needs are paths of phases that must not be skipped for this one to
	// make sense (they ran now, or ran before and left their results).
	Needs []string
	// If, when set, decides at run time whether the phase has work to do;
	// a false result skips it (and its children) with the given reason.
	If func(s S) (run bool, reason string)
	// IO, when set, names what the phase would read and write; --dry-run
	// prints it.
	IO func(s S) (reads, writes []string)
	// Run does the work and says what it did. It must honour ctx.
	Run func(ctx context.Context, s S) (Outcome, error)
}

// Outcome is what a phase did, as its Run returns it: the engine prints
// Detail after the phase's ✓ line and keeps both in the run's Result.
type Outcome struct {
	// Detail is a short result ("3 certificates reused"); empty shows
	// nothing.
	Detail string
	// Changed says the phase changed something; false means it found its
	// work already done.
	Changed bool
}

// Changed is the outcome of a phase that changed something.
func Changed(format string, args ...any) Outcome {
	return ChangedIf(true, format, args...)
}

// Unchanged is the outcome of a phase that found its work done.
func Unchanged(format string, args ...any) Outcome {
	return ChangedIf(false, format, args...)
}

// ChangedIf is the outcome of a phase whose detail reads the same either
// way and that changed something exactly when changed is true.
func ChangedIf(changed bool, format string, args ...any) Outcome {
	return Outcome{Detail: fmt.Sprintf(format, args...), Changed: changed}
}

// Done is the outcome of a phase with nothing to report.
var Done = Outcome{}

// Step is a phase with its flattened path.
type Step[S any] struct {
	Path  string
	Depth int
	Phase *Phase[S]
}

// Flatten lists every phase of the tree depth-first, parents before
// children, with its path.
func Flatten[S any](roots []*Phase[S]) []Step[S] {
	var out []Step[S]
	var walk func(prefix string, depth int, ps []*Phase[S])
	walk = func(prefix string, depth int, ps []*Phase[S]) {
		for _, p := range ps {
			path := p.Name
			if prefix != "" {
				path = prefix + "/" + p.Name
			}
			out = append(out, Step[S]{Path: path, Depth: depth, Phase: p})
			walk(path, depth+1, p.Children)
		}
	}
	walk("", 0, roots)
	return out
}

// Options select and shape a run.
type Options struct {
	// Only, when set, runs just that phase and its children.
	Only string
	// Skip lists phase paths to leave out, with their children.
	Skip []string
	// DryRun prints the plan and runs nothing.
	DryRun bool
	// Reporter receives progress; nil discards it.
	Reporter progress.Reporter
	// PlanOut receives the dry-run plan and the timing summary; nil means
	// the plan goes nowhere and no summary is printed.
	PlanOut io.Writer
	// Summary prints per-phase timings to PlanOut after the run.
	Summary bool
	// Job names the job (up, down) for the failpoints of test builds:
	// "<job>/<path>" is hit before each phase runs (see failpoint).
	Job string
}

// Timing is how long one phase took.
type Timing struct {
	Path     string        `json:"phase"`
	Duration time.Duration `json:"duration"`
	Skipped  string        `json:"skipped,omitempty"`
	Failed   bool          `json:"failed,omitempty"`
	// Detail and Changed are the phase's Outcome.
	Detail  string `json:"detail,omitempty"`
	Changed bool   `json:"changed,omitempty"`
}

// Result is what a run did.
type Result struct {
	Timings []Timing
	Total   time.Duration
}

// Changed reports whether any phase of the run changed something.
func (r Result) Changed() bool {
	for _, t := range r.Timings {
		if t.Changed {
			return true
		}
	}
	return false
}

// Outcome is the outcome of the phase at path, if it ran.
func (r Result) Outcome(path string) (Outcome, bool) {
	for _, t := range r.Timings {
		if t.Path == path && t.Skipped == "" && !t.Failed {
			return Outcome{Detail: t.Detail, Changed: t.Changed}, true
		}
	}
	return Outcome{}, false
}

// ErrUnknownPhase is returned when --only or --skip-phases names a path
// that the tree does not have.
var ErrUnknownPhase = errors.New("unknown phase")

// under reports whether path is p or lies below p.
func under(path, p string) bool {
	return path == p || strings.HasPrefix(path, p+"/")
}

// selection decides, for each step, whether it runs and why not.
type selection struct {
	reason map[string]string // path -> why it is not run; absent = runs
}

func selectSteps[S any](steps []Step[S], o Options) (selection, error) {
	known := map[string]bool{}
	for _, s := range steps {
		known[s.Path] = true
	}
	paths := func() string {
		var ps []string
		for _, s := range steps {
			ps = append(ps, s.Path)
		}
		return strings.Join(ps, ", ")
	}
	sel := selection{reason: map[string]string{}}
	if o.Only != "" {
		if !known[o.Only] {
			return sel, fmt.Errorf("%w %q: the phases are %s", ErrUnknownPhase, o.Only, paths())
		}
	}
	for _, sk := range o.Skip {
		if !known[sk] {
			return sel, fmt.Errorf("%w %q in --skip-phases: the phases are %s", ErrUnknownPhase, sk, paths())
		}
	}
	for _, s := range steps {
		if o.Only != "" && !under(s.Path, o.Only) && !under(o.Only, s.Path) {
			sel.reason[s.Path] = "not selected by --only " + o.Only
			continue
		}
		for _, sk := range o.Skip {
			if under(s.Path, sk) {
				sel.reason[s.Path] = "skipped by --skip-phases " + sk
				break
			}
		}
	}
	// Needs: a phase that runs must not need one the user skipped. Phases
	// outside --only are not checked: running one phase alone relies on
	// the results earlier runs left behind.
	var missing []string
	for _, s := range steps {
		if _, off := sel.reason[s.Path]; off {
			continue
		}
		for _, n := range s.Phase.Needs {
			if !known[n] {
				return sel, fmt.Errorf("phase %s needs %q, which is not a phase: the phases are %s", s.Path, n, paths())
			}
			if r, off := sel.reason[n]; off && strings.HasPrefix(r, "skipped") {
				missing = append(missing, fmt.Sprintf("%s needs %s", s.Path, n))
			}
		}
	}
	if len(missing) > 0 {
		return sel, fmt.Errorf("refusing to run: %s; skip those phases too or stop skipping what they need", strings.Join(missing, ", "))
	}
	return sel, nil
}

// Run executes the phase tree on state s.
func Run[S any](ctx context.Context, roots []*Phase[S], s S, o Options) (Result, error) {
	rep := o.Reporter
	if rep == nil {
		rep = progress.Discard()
	}
	steps := Flatten(roots)
	sel, err := selectSteps(steps, o)
	if err != nil {
		return Result{}, err
	}
	if o.DryRun {
		if o.PlanOut != nil {
			writePlan(o.PlanOut, steps, sel, s)
		}
		return Result{}, nil
	}
	var res Result
	start := time.Now()
	skippedAt := "" // a parent whose condition was false skips its subtree
	for _, st := range steps {
		if skippedAt != "" && under(st.Path, skippedAt) {
			continue
		}
		skippedAt = ""
		if err := ctx.Err(); err != nil {
			res.Total = time.Since(start)
			return res, fmt.Errorf("phase %s: not started: %w", st.Path, context.Cause(ctx))
		}
		if r, off := sel.reason[st.Path]; off {
			if o.Only == "" || under(st.Path, o.Only) {
				rep.Skip(st.Path, r)
				res.Timings = append(res.Timings, Timing{Path: st.Path, Skipped: r})
			}
			continue
		}
		p := st.Phase
		ancestor := o.Only != "" && st.Path != o.Only && under(o.Only, st.Path)
		if p.If != nil {
			if ok, why := p.If(s); !ok {
				rep.Skip(st.Path, why)
				res.Timings = append(res.Timings, Timing{Path: st.Path, Skipped: why})
				skippedAt = st.Path
				continue
			}
		}
		if p.Run == nil || ancestor {
			continue // a grouping phase, or a parent of the --only phase: its condition applies, its work does not
		}
		rep.Start(st.Path)
		if o.Job != "" {
			failpoint.Hit(o.Job + "/" + st.Path)
		}
		t0 := time.Now()
		out, err := p.Run(progress.WithStep(ctx, st.Path), s)
		took := time.Since(t0)
		if err == nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			rep.Fail(st.Path, took, err)
			res.Timings = append(res.Timings, Timing{Path: st.Path, Duration: took, Failed: true})
			res.Total = time.Since(start)
			o.summary(res)
			return res, &Failed{Path: st.Path, Err: err}
		}
		rep.Done(st.Path, took, out.Detail)
		res.Timings = append(res.Timings, Timing{Path: st.Path, Duration: took, Detail: out.Detail, Changed: out.Changed})
	}
	res.Total = time.Since(start)
	o.summary(res)
	return res, nil
}

func (o Options) summary(res Result) {
	if !o.Summary || o.PlanOut == nil {
		return
	}
	width := 0
	for _, t := range res.Timings {
		width = max(width, len(t.Path))
	}
	fmt.Fprintln(o.PlanOut, "phase timings:")
	for _, t := range res.Timings {
		switch {
		case t.Skipped != "":
			fmt.Fprintf(o.PlanOut, "  %-*s  skipped (%s)\n", width, t.Path, t.Skipped)
		case t.Failed:
			fmt.Fprintf(o.PlanOut, "  %-*s  %8s  FAILED\n", width, t.Path, progress.Round(t.Duration))
		default:
			fmt.Fprintf(o.PlanOut, "  %-*s  %8s\n", width, t.Path, progress.Round(t.Duration))
		}
	}
	fmt.Fprintf(o.PlanOut, "  %-*s  %8s\n", width, "total", progress.Round(res.Total))
}

func writePlan[S any](w io.Writer, steps []Step[S], sel selection, s S) {
	fmt.Fprintln(w, "plan (nothing is run with --dry-run):")
	n := 0
	for _, st := range steps {
		indent := strings.Repeat("  ", st.Depth+1)
		if r, off := sel.reason[st.Path]; off {
			fmt.Fprintf(w, "%s- %s: %s\n", indent, st.Path, r)
			continue
		}
		n++
		fmt.Fprintf(w, "%s%d. %s — %s\n", indent, n, st.Path, st.Phase.Short)
		if st.Phase.IO != nil {
			reads, writes := st.Phase.IO(s)
			for _, r := range reads {
				fmt.Fprintf(w, "%s     reads  %s\n", indent, r)
			}
			for _, wr := range writes {
				fmt.Fprintf(w, "%s     writes %s\n", indent, wr)
			}
		}
		if len(st.Phase.Needs) > 0 {
			needs := slices.Clone(st.Phase.Needs)
			sort.Strings(needs)
			fmt.Fprintf(w, "%s     needs  %s\n", indent, strings.Join(needs, ", "))
		}
	}
}

// Failed is the error of a run whose phase failed; the reporter has
// already shown it (as "FAIL path (took): err").
type Failed struct {
	Path string
	Err  error
}

func (f *Failed) Error() string { return "phase " + f.Path + ": " + f.Err.Error() }
func (f *Failed) Unwrap() error { return f.Err }
