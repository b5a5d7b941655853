// Package progress is the one reporter long-running work talks to. It
// renders the same events three ways: a spinner with ✓/✗ lines on a
// terminal, plain lines when stderr is not a terminal, and JSON lines with
// `-o json`. Results never go through it; they go to stdout.
package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

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
	// Quiet hides Start, Done, Skip and Infof; failures are still shown.
	Quiet bool
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
		return &jsonReporter{w: w, verbose: o.Verbose}
	case Terminal:
		return &terminalReporter{w: w, verbose: o.Verbose, quiet: o.Quiet, running: map[string]time.Time{}}
	default:
		return &plainReporter{w: w, verbose: o.Verbose, quiet: o.Quiet}
	}
}

// Discard is a reporter that drops everything; for tests and library callers.
func Discard() Reporter { return &plainReporter{w: io.Discard, quiet: true} }

// Round keeps durations readable: ms below 10 s, tenths of seconds above.
func Round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

type plainReporter struct {
	mu      sync.Mutex
	w       io.Writer
	verbose bool
	quiet   bool
}

func (r *plainReporter) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, format, args...)
}

func (r *plainReporter) Start(step string) {
	if !r.quiet {
		r.printf("... %s\n", step)
	}
}

func (r *plainReporter) Done(step string, took time.Duration, detail string) {
	if r.quiet {
		return
	}
	if detail != "" {
		detail = ": " + detail
	}
	r.printf("ok  %s (%s)%s\n", step, Round(took), detail)
}

func (r *plainReporter) Fail(step string, took time.Duration, err error) {
	r.printf("FAIL %s (%s): %v\n", step, Round(took), err)
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

// terminalReporter draws one spinner line for the running steps and leaves
// a ✓ or ✗ line behind for each finished one.
type terminalReporter struct {
	mu      sync.Mutex
	w       io.Writer
	verbose bool
	quiet   bool
	running map[string]time.Time
	order   []string
	frame   int
	ticker  *time.Ticker
	stop    chan struct{}
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func (r *terminalReporter) Start(step string) {
	if r.quiet {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[step] = time.Now()
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
	took := time.Since(r.running[step]).Truncate(time.Second)
	fmt.Fprintf(r.w, "\r\033[K %s %s %s", spinnerFrames[r.frame%len(spinnerFrames)], step, took)
}

func (r *terminalReporter) finishLocked(step string) {
	delete(r.running, step)
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
	r.lineLocked(" \033[32m✓\033[0m %s (%s)%s\n", step, Round(took), detail)
}

func (r *terminalReporter) Fail(step string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finishLocked(step)
	r.lineLocked(" \033[31m✗\033[0m %s (%s): %v\n", step, Round(took), err)
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

// jsonReporter writes one JSON object per line.
type jsonReporter struct {
	mu      sync.Mutex
	w       io.Writer
	verbose bool
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
}

func (r *jsonReporter) emit(e Event) {
	e.Time = time.Now().UTC()
	b, _ := json.Marshal(e)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.Write(append(b, '\n'))
}

func (r *jsonReporter) Start(step string) { r.emit(Event{Event: "start", Step: step}) }

func (r *jsonReporter) Done(step string, took time.Duration, detail string) {
	r.emit(Event{Event: "done", Step: step, Seconds: took.Seconds(), Detail: detail})
}

func (r *jsonReporter) Fail(step string, took time.Duration, err error) {
	r.emit(Event{Event: "fail", Step: step, Seconds: took.Seconds(), Error: err.Error()})
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
