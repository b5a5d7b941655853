package progress

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUnder(t *testing.T) {
	var b bytes.Buffer
	r := Under(New(&b, Options{Mode: Plain}), "nodes/w1")
	r.Start("kubelet-start")
	r.Done("kubelet-start", time.Second, "started")
	r.Skip("wait", "no addons")
	r.Fail("record", time.Second, errors.New("boom"))
	r.Infof("a note")
	out := b.String()
	for _, want := range []string{"nodes/w1/kubelet-start (1s): started", "nodes/w1/wait", "no addons", "nodes/w1/record", "boom", "a note"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "nodes/w1/a note") {
		t.Errorf("notes are not steps: %s", out)
	}
}
