package progress

import (
	"bytes"
	"encoding/json"
	"errors"
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
