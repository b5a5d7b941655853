package progress

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"
)

const (
	// PlainInterval is how often a step's progress is written when stderr
	// is not a terminal (a log file, CI): often enough to show the work
	// moving, seldom enough to keep the log readable.
	PlainInterval = 10 * time.Second
	// JSONInterval is the same for -o json's "progress" events.
	JSONInterval = time.Second
	// tickInterval is how often the plain reporter looks for a step whose
	// line is due while the work itself is silent.
	tickInterval = time.Second
)

// Bytes is the Unit of a Status that counts bytes: shown as sizes.
const Bytes = "bytes"

// Status is how far a running step has got: a count of done units of a
// total, or a note on what it is waiting for, or both.
type Status struct {
	// Verb says what happened to the units done: "compiled", "downloaded".
	Verb string
	// Done of Total units; Total 0 means the total is not known.
	Done, Total int64
	// Unit names what is counted ("packages"); Bytes counts bytes.
	Unit string
	// Note says what the step is doing or waiting for
	// ("waiting for node Ready: NotReady").
	Note string
}

// String is the status as a line shows it: "compiled 812 of 2,190
// packages", "downloaded 12.3 MB", "waiting for node Ready: NotReady".
func (s Status) String() string {
	var count string
	if s.Verb != "" || s.Done > 0 || s.Total > 0 {
		count = s.Verb + " " + s.amount(s.Done)
		if s.Total > 0 {
			count += " of " + s.amount(s.Total)
		}
		if s.Unit != Bytes && s.Unit != "" {
			count += " " + s.Unit
		}
		count = strings.TrimSpace(count)
	}
	switch {
	case count == "":
		return s.Note
	case s.Note == "":
		return count
	default:
		return count + "; " + s.Note
	}
}

func (s Status) amount(n int64) string {
	if s.Unit == Bytes {
		return Size(n)
	}
	return Count(n)
}

// Count writes n with thousands separated: 2,190.
func Count(n int64) string {
	digits := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, digits = "-", digits[1:]
	}
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return sign + b.String()
}

// Size writes a byte count in decimal units: 812 B, 12.3 MB, 1.1 GB.
func Size(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, prefix := float64(n)/unit, "kMGTPE"
	i := 0
	for v >= unit && i < len(prefix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", v, prefix[i])
}

// stepState is what the plain and JSON reporters keep of a running step.
type stepState struct {
	started time.Time
	status  Status
	// reported says status holds a Progress; shown is when its last line
	// was written (started, before the first).
	reported bool
	shown    time.Time
}

// steps are the running steps by name. Not safe for concurrent use: the
// reporters hold their lock.
type steps struct{ m map[string]*stepState }

func newSteps() steps { return steps{m: map[string]*stepState{}} }

func (s steps) start(step string, now time.Time) {
	s.m[step] = &stepState{started: now, shown: now}
}

func (s steps) end(step string) { delete(s.m, step) }

// update records step's status; a step reporting progress without having
// been started counts as started now.
func (s steps) update(step string, st Status, now time.Time) {
	if s.m[step] == nil {
		s.start(step, now)
	}
	s.m[step].status, s.m[step].reported = st, true
}

// reporting says whether a running step has a status to show.
func (s steps) reporting() bool {
	for _, st := range s.m {
		if st.reported {
			return true
		}
	}
	return false
}

// due returns, sorted, the steps with a status whose last line is at
// least every old at now, and marks them shown.
func (s steps) due(now time.Time, every time.Duration) []string {
	var out []string
	for name, st := range s.m {
		if st.reported && now.Sub(st.shown) >= every {
			st.shown = now
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// termWidth returns the terminal's width in columns, looked up each time
// (the window may be resized); nil when w is not a terminal.
func termWidth(w io.Writer) func() int {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	return func() int {
		cols, _, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return 0
		}
		return cols
	}
}

type stepKey struct{}

// WithStep returns ctx carrying the path of the step that runs under it;
// the phase engine sets it for each phase, so work deep inside a phase
// can report Progress for it.
func WithStep(ctx context.Context, step string) context.Context {
	return context.WithValue(ctx, stepKey{}, step)
}

// StepOf is the step ctx runs under ("" outside any).
func StepOf(ctx context.Context) string {
	s, _ := ctx.Value(stepKey{}).(string)
	return s
}
