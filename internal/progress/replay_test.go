package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestReplay: events a JSON reporter wrote, handed to another reporter,
// come out as that reporter would have written them itself.
func TestReplay(t *testing.T) {
	var src, direct, replayed bytes.Buffer
	clock := func() time.Time { return time.Unix(0, 0) }
	steps := func(r Reporter) {
		r.Start("cp1/apiserver/pull")
		r.Done("cp1/apiserver/pull", 1500*time.Millisecond, "pulled abc")
		r.Skip("cp1/apiserver/backup", "--rollback")
		r.Fail("cp1/apiserver/ready", 2*time.Second, errors.New("not healthy"))
		r.Infof("kube-apiserver: a -> b")
	}
	steps(&jsonReporter{w: &src, now: clock, steps: newSteps()})
	steps(newPlain(&direct, Options{}, clock))
	to := newPlain(&replayed, Options{}, clock)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(src.String()), "\n") {
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		Replay(to, e)
		n++
	}
	if n != 5 || replayed.String() != direct.String() {
		t.Errorf("%d events replayed as\n%s\nwant\n%s", n, replayed.String(), direct.String())
	}
}
