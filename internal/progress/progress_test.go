package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRenderers(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		want    []string
		notWant []string
	}{
		{name: "plain", opts: Options{Mode: Plain},
			want:    []string{"... compile", "ok  compile (1.5s): 2 changed", "FAIL push (2ms): refused", "skip etcd: not asked for", "note 1"},
			notWant: []string{"debug 1", "\033"}},
		{name: "plain verbose", opts: Options{Mode: Plain, Verbose: true}, want: []string{"debug 1"}},
		{name: "quiet keeps failures", opts: Options{Mode: Plain, Quiet: true},
			want: []string{"FAIL push"}, notWant: []string{"compile", "note 1", "skip"}},
		{name: "terminal", opts: Options{Mode: Terminal},
			want: []string{"✓\033[0m compile (1.5s)  2 changed", "✗\033[0m push (2ms): refused", "etcd skipped: not asked for"}},
	}
	t.Setenv("NO_COLOR", "")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			r := New(&buf, tc.opts)
			r.Start("compile")
			r.Done("compile", 1500*time.Millisecond, "2 changed")
			r.Start("push")
			r.Fail("push", 2*time.Millisecond, errors.New("refused"))
			r.Skip("etcd", "not asked for")
			r.Infof("note %d", 1)
			r.Debugf("debug %d", 1)
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%q", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%q", w, out)
				}
			}
		})
	}
}

func TestJSONLines(t *testing.T) {
	var buf bytes.Buffer
	r := New(&buf, Options{Mode: JSON})
	r.Start("compile")
	r.Done("compile", time.Second, "ok")
	r.Fail("push", time.Second, errors.New("refused"))
	var events []Event
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		events = append(events, e)
	}
	if len(events) != 3 || events[0].Event != "start" || events[1].Seconds != 1 || events[2].Error != "refused" {
		t.Fatalf("events = %+v", events)
	}
}

// fakeClock is the reporters' clock in tests: time moves when the test
// says.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func TestStatusString(t *testing.T) {
	tests := []struct {
		name string
		s    Status
		want string
	}{
		{"count of total", Status{Verb: "compiled", Done: 812, Total: 2190, Unit: "packages"}, "compiled 812 of 2,190 packages"},
		{"count without total", Status{Verb: "compiled", Done: 3, Unit: "packages"}, "compiled 3 packages"},
		{"bytes", Status{Verb: "downloaded", Done: 12_345_678, Total: 107_000_000, Unit: Bytes}, "downloaded 12.3 MB of 107.0 MB"},
		{"small bytes", Status{Verb: "downloaded", Done: 999, Unit: Bytes}, "downloaded 999 B"},
		{"note only", Status{Note: "waiting for node Ready: NotReady"}, "waiting for node Ready: NotReady"},
		{"count and note", Status{Verb: "compiled", Done: 2190, Total: 2190, Unit: "packages", Note: "linking"}, "compiled 2,190 of 2,190 packages; linking"},
		{"millions", Status{Verb: "read", Done: 1234567, Unit: "keys"}, "read 1,234,567 keys"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func compiled(n int64) Status {
	return Status{Verb: "compiled", Done: n, Total: 100, Unit: "packages"}
}

func TestPlainProgressEveryInterval(t *testing.T) {
	var buf bytes.Buffer
	c := newFakeClock()
	r := newPlain(&buf, Options{}, c.now)
	r.Start("images/compile")
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n")[1:] }

	c.advance(time.Second)
	r.Progress("images/compile", compiled(5))
	if got := lines(); len(got) != 0 {
		t.Fatalf("a line before %s: %q", PlainInterval, got)
	}
	c.advance(PlainInterval - time.Second)
	r.Progress("images/compile", compiled(40))
	c.advance(time.Second)
	r.Progress("images/compile", compiled(41)) // only 1 s after the last line
	want := []string{"images/compile: compiled 40 of 100 packages, 10s"}
	if got := lines(); !slices.Equal(got, want) {
		t.Fatalf("lines = %q, want %q", got, want)
	}
	// The work goes silent (go links): the ticker repeats the last status.
	c.advance(PlainInterval)
	r.mu.Lock()
	r.flushLocked(c.now())
	r.mu.Unlock()
	want = append(want, "images/compile: compiled 41 of 100 packages, 21s")
	if got := lines(); !slices.Equal(got, want) {
		t.Fatalf("lines = %q, want %q", got, want)
	}
	r.Done("images/compile", 25*time.Second, "")
	c.advance(time.Hour)
	r.mu.Lock()
	r.flushLocked(c.now())
	r.mu.Unlock()
	if got := lines(); len(got) != 3 || !strings.HasPrefix(got[2], "ok  images/compile") {
		t.Fatalf("after Done: %q", got)
	}
}

func TestQuietHidesProgress(t *testing.T) {
	for _, mode := range []Mode{Plain, Terminal} {
		var buf bytes.Buffer
		r := New(&buf, Options{Mode: mode, Quiet: true})
		r.Start("compile")
		r.Progress("compile", compiled(1))
		switch r := r.(type) {
		case *plainReporter:
			r.flushLocked(time.Now().Add(time.Hour))
		case *terminalReporter:
			r.drawLocked()
		}
		if buf.Len() != 0 {
			t.Errorf("mode %d: quiet wrote %q", mode, buf.String())
		}
	}
}

func TestTerminalProgressBar(t *testing.T) {
	var buf bytes.Buffer
	c := newFakeClock()
	r := New(&buf, Options{Mode: Terminal}).(*terminalReporter)
	r.now = c.now
	r.width = func() int { return 60 }
	r.Start("compile")
	c.advance(190 * time.Second)
	r.Progress("compile", compiled(50))
	r.mu.Lock()
	buf.Reset()
	r.drawLocked()
	r.mu.Unlock()
	want := "\r\033[K ⠋ compile 3m10s [██████████░░░░░░░░░░] compiled 50 of 100 "
	if got := buf.String(); got != want {
		t.Fatalf("spinner line = %q, want %q (cut to the terminal's width less one)", got, want)
	}
	r.Done("compile", time.Second, "")
	if _, ok := r.status["compile"]; ok {
		t.Fatalf("a finished step keeps its status")
	}
}

func TestNoColor(t *testing.T) {
	tests := []struct {
		name    string
		env     string
		opt     bool
		colored bool
	}{
		{"colours by default", "", false, true},
		{"NO_COLOR set", "1", false, false},
		{"option", "", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NO_COLOR", tc.env)
			var buf bytes.Buffer
			r := New(&buf, Options{Mode: Terminal, NoColor: tc.opt})
			r.Start("compile")
			r.Done("compile", time.Second, "")
			r.Start("push")
			r.Fail("push", time.Second, errors.New("refused"))
			out := buf.String()
			if got := strings.Contains(out, "\033[3"); got != tc.colored {
				t.Errorf("coloured = %v, want %v: %q", got, tc.colored, out)
			}
			if !strings.Contains(out, "✓ compile") && !strings.Contains(out, "✓\033[0m compile") {
				t.Errorf("no ✓ line: %q", out)
			}
		})
	}
}

func TestJSONProgressEvents(t *testing.T) {
	var buf bytes.Buffer
	c := newFakeClock()
	r := New(&buf, Options{Mode: JSON}).(*jsonReporter)
	r.now = c.now
	r.Start("download")
	for i := range int64(30) {
		c.advance(100 * time.Millisecond) // 3 s in all: three events
		r.Progress("download", Status{Verb: "downloaded", Done: (i + 1) * 1_000_000, Unit: Bytes})
	}
	var got []Event
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		if e.Event == "progress" {
			got = append(got, e)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d progress events, want one every %s: %+v", len(got), JSONInterval, got)
	}
	if e := got[0]; e.Step != "download" || e.Done != 10_000_000 || e.Unit != Bytes || e.Seconds != 1 || e.Detail != "downloaded 10.0 MB" {
		t.Fatalf("first progress event = %+v", e)
	}
}
