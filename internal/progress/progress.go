// Package progress is the one reporter long-running work talks to. It
// renders the same events three ways: a spinner with ✓/✗ lines on a
// terminal, plain lines when stderr is not a terminal, and JSON lines with
// `-o json`. Results never go through it; they go to stdout. A step that
// runs long says how far it has got (Progress): a bar on a terminal, a line
// every PlainInterval otherwise, so a log file shows the work moving.
package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
)

// Reporter receives progress of named steps (phase paths) and free-form
// notes. Implementations are safe for concurrent use.
type Reporter interface {
	// Start says a step began.
	Start(step string)
	// Done says a step finished; detail is an optional short result.
	Done(step string, took time.Duration, detail string)
	// Fail says a step failed.
	Fail(step string, took time.Duration, err error)
	// Skip says a step was not run, and why.
	Skip(step, reason string)
	// Infof is a note for the user (shown unless quiet).
	Infof(format string, args ...any)
	// Debugf is shown only with --verbose.
	Debugf(format string, args ...any)
	// Progress says how far a running step has got. It may be called as
	// often as the work likes (every package, every chunk): the reporter
	// shows it at its own pace, and not at all when quiet.
	Progress(step string, s Status)
}

// Mode selects how events are rendered.
type Mode int

const (
	// Auto picks Terminal when the writer is a terminal, Plain otherwise.
	Auto Mode = iota
	Terminal
	Plain
	JSON
)

// Options configure New.
type Options struct {
	Mode    Mode
	Verbose bool
	// Quiet hides Start, Done, Skip, Infof and Progress; failures are
	// still shown.
	Quiet bool
	// NoColor leaves colours out of terminal output; so does a non-empty
	// NO_COLOR in the environment (no-color.org).
	NoColor bool
}

// New returns a reporter writing to w.
func New(w io.Writer, o Options) Reporter {
	mode := o.Mode
	if mode == Auto {
		mode = Plain
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb" {
			mode = Terminal
		}
	}
	switch mode {
	case JSON:
		return &jsonReporter{w: w, verbose: o.Verbose, now: time.Now, steps: newSteps()}
	case Terminal:
		return &terminalReporter{w: w, verbose: o.Verbose, quiet: o.Quiet, color: !o.NoColor && os.Getenv("NO_COLOR") == "",
			width: termWidth(w), now: time.Now, running: map[string]time.Time{}, status: map[string]Status{}}
	default:
		return newPlain(w, o, time.Now)
	}
}

// Discard is a reporter that drops everything; for tests and library callers.
func Discard() Reporter { return newPlain(io.Discard, Options{Quiet: true}, time.Now) }

// Round keeps durations readable: ms below 10 s, tenths of seconds above.
func Round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// plainReporter writes one line per event, and for a step reporting
// Progress one line at most every PlainInterval (a ticker repeats the last
// status while the work is silent, e.g. while go links).
type plainReporter struct {
	mu      sync.Mutex
	w       io.Writer
	verbose bool
	quiet   bool
	now     func() time.Time
	steps   steps
	ticking bool
}

func newPlain(w io.Writer, o Options, now func() time.Time) *plainReporter {
	return &plainReporter{w: w, verbose: o.Verbose, quiet: o.Quiet, now: now, steps: newSteps()}
}

func (r *plainReporter) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, format, args...)
}

func (r *plainReporter) Start(step string) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps.start(step, r.now())
	fmt.Fprintf(r.w, "... %s\n", step)
}

func (r *plainReporter) Done(step string, took time.Duration, detail string) {
	if r.quiet {
		return
	}
	if detail != "" {
		detail = ": " + detail
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps.end(step)
	fmt.Fprintf(r.w, "ok  %s (%s)%s\n", step, Round(took), detail)
}

func (r *plainReporter) Fail(step string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps.end(step)
	fmt.Fprintf(r.w, "FAIL %s (%s): %v\n", step, Round(took), err)
}

func (r *plainReporter) Skip(step, reason string) {
	if !r.quiet {
		r.printf("skip %s: %s\n", step, reason)
	}
}

func (r *plainReporter) Infof(format string, args ...any) {
	if !r.quiet {
		r.printf(format+"\n", args...)
	}
}

func (r *plainReporter) Debugf(format string, args ...any) {
	if r.verbose {
		r.printf(format+"\n", args...)
	}
}

func (r *plainReporter) Progress(step string, s Status) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.steps.update(step, s, now)
	r.flushLocked(now)
	if !r.ticking {
		r.ticking = true
		go r.tick()
	}
}

// tick repeats the steps' last status while they run; it ends when no
// running step has one.
func (r *plainReporter) tick() {
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for range t.C {
		r.mu.Lock()
		if !r.steps.reporting() {
			r.ticking = false
			r.mu.Unlock()
			return
		}
		r.flushLocked(r.now())
		r.mu.Unlock()
	}
}

// flushLocked writes a line for each step whose last line is
// PlainInterval old (or that has none, PlainInterval after it started).
// Callers hold r.mu.
func (r *plainReporter) flushLocked(now time.Time) {
	for _, name := range r.steps.due(now, PlainInterval) {
		st := r.steps.m[name]
		fmt.Fprintf(r.w, "%s: %s, %s\n", name, st.status, elapsed(now, st.started))
	}
}

// elapsed is how long a step has run, in whole seconds ("3m10s").
func elapsed(now, started time.Time) time.Duration {
	return now.Sub(started).Truncate(time.Second)
}

// terminalReporter draws one spinner line for the running steps, with the
// latest step's progress (a bar when its total is known), and leaves a ✓
// or ✗ line behind for each finished one.
type terminalReporter struct {
	mu      sync.Mutex
	w       io.Writer
	verbose bool
	quiet   bool
	color   bool
	// width is the terminal's width in columns, 0 when not known.
	width   func() int
	now     func() time.Time
	running map[string]time.Time
	status  map[string]Status
	order   []string
	frame   int
	ticker  *time.Ticker
	stop    chan struct{}
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// barWidth is the number of cells of a terminal progress bar.
const barWidth = 20

func (r *terminalReporter) Start(step string) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[step] = r.now()
	r.order = append(r.order, step)
	if r.ticker == nil {
		r.ticker = time.NewTicker(100 * time.Millisecond)
		r.stop = make(chan struct{})
		go r.spin(r.ticker, r.stop)
	}
	r.drawLocked()
}

func (r *terminalReporter) spin(t *time.Ticker, stop chan struct{}) {
	for {
		select {
		case <-t.C:
			r.mu.Lock()
			r.frame++
			r.drawLocked()
			r.mu.Unlock()
		case <-stop:
			return
		}
	}
}

// drawLocked rewrites the spinner line. Callers hold r.mu.
func (r *terminalReporter) drawLocked() {
	if len(r.order) == 0 {
		return
	}
	step := r.order[len(r.order)-1]
	line := fmt.Sprintf(" %s %s %s", spinnerFrames[r.frame%len(spinnerFrames)], step, elapsed(r.now(), r.running[step]))
	if s, ok := r.status[step]; ok {
		if s.Total > 0 {
			line += " " + bar(s.Done, s.Total, barWidth)
		}
		line += " " + s.String()
	}
	if r.width != nil {
		if w := r.width(); w > 1 {
			line = cut(line, w-1) // a wrapped line would not be cleared by \r
		}
	}
	fmt.Fprintf(r.w, "\r\033[K%s", line)
}

// bar draws done/total in width cells.
func bar(done, total int64, width int) string {
	n := int(min(done, total) * int64(width) / total)
	return "[" + strings.Repeat("█", n) + strings.Repeat("░", width-n) + "]"
}

// cut shortens s to at most n runes.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

func (r *terminalReporter) finishLocked(step string) {
	delete(r.running, step)
	delete(r.status, step)
	for i, s := range r.order {
		if s == step {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
	fmt.Fprint(r.w, "\r\033[K")
	if len(r.order) == 0 && r.ticker != nil {
		r.ticker.Stop()
		close(r.stop)
		r.ticker = nil
	}
}

func (r *terminalReporter) lineLocked(format string, args ...any) {
	fmt.Fprint(r.w, "\r\033[K")
	fmt.Fprintf(r.w, format, args...)
	r.drawLocked()
}

// paint colours s with an SGR colour code, unless colours are off.
func (r *terminalReporter) paint(code, s string) string {
	if !r.color {
		return s
	}
	return "\033[" + code + "m" + s + "\033[0m"
}

func (r *terminalReporter) Done(step string, took time.Duration, detail string) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finishLocked(step)
	if detail != "" {
		detail = "  " + detail
	}
	r.lineLocked(" %s %s (%s)%s\n", r.paint("32", "✓"), step, Round(took), detail)
}

func (r *terminalReporter) Fail(step string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finishLocked(step)
	r.lineLocked(" %s %s (%s): %v\n", r.paint("31", "✗"), step, Round(took), err)
}

func (r *terminalReporter) Skip(step, reason string) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lineLocked(" - %s skipped: %s\n", step, reason)
}

func (r *terminalReporter) Infof(format string, args ...any) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lineLocked(format+"\n", args...)
}

func (r *terminalReporter) Debugf(format string, args ...any) {
	if !r.verbose {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lineLocked(format+"\n", args...)
}

// Progress keeps the step's status for the spinner line, which the
// spinner's ticker redraws: a step may report thousands of times a second.
func (r *terminalReporter) Progress(step string, s Status) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.running[step]; !ok {
		return // not started, or finished: nothing shows it
	}
	r.status[step] = s
}

// jsonReporter writes one JSON object per line; a step's progress at most
// every JSONInterval.
type jsonReporter struct {
	mu      sync.Mutex
	w       io.Writer
	verbose bool
	now     func() time.Time
	steps   steps
}

// Event is one JSON line of `-o json` progress.
type Event struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Step    string    `json:"step,omitempty"`
	Seconds float64   `json:"seconds,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	Error   string    `json:"error,omitempty"`
	Message string    `json:"message,omitempty"`
	// Done, Total and Unit are a "progress" event's count (Total 0: not
	// known); its Detail is the status as text, its Seconds the time the
	// step has run.
	Done  int64  `json:"done,omitempty"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit,omitempty"`
}

func (r *jsonReporter) emit(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emitLocked(e)
}

func (r *jsonReporter) emitLocked(e Event) {
	e.Time = r.now().UTC()
	b, _ := json.Marshal(e)
	r.w.Write(append(b, '\n'))
}

func (r *jsonReporter) Start(step string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps.start(step, r.now())
	r.emitLocked(Event{Event: "start", Step: step})
}

func (r *jsonReporter) Done(step string, took time.Duration, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps.end(step)
	r.emitLocked(Event{Event: "done", Step: step, Seconds: took.Seconds(), Detail: detail})
}

func (r *jsonReporter) Fail(step string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps.end(step)
	r.emitLocked(Event{Event: "fail", Step: step, Seconds: took.Seconds(), Error: err.Error()})
}

func (r *jsonReporter) Skip(step, reason string) {
	r.emit(Event{Event: "skip", Step: step, Detail: reason})
}

func (r *jsonReporter) Infof(format string, args ...any) {
	r.emit(Event{Event: "info", Message: fmt.Sprintf(format, args...)})
}

func (r *jsonReporter) Debugf(format string, args ...any) {
	if r.verbose {
		r.emit(Event{Event: "debug", Message: fmt.Sprintf(format, args...)})
	}
}

func (r *jsonReporter) Progress(step string, s Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.steps.update(step, s, now)
	for _, name := range r.steps.due(now, JSONInterval) {
		st := r.steps.m[name]
		r.emitLocked(Event{Event: "progress", Step: name, Seconds: now.Sub(st.started).Seconds(), Detail: st.status.String(),
			Done: st.status.Done, Total: st.status.Total, Unit: st.status.Unit})
	}
}
