package progress

import (
	"errors"
	"time"
)

// Replay hands r an Event another reporter wrote as `-o json` (devk's node
// agent, whose progress the client shows as its own).
func Replay(r Reporter, e Event) {
	took := time.Duration(e.Seconds * float64(time.Second))
	switch e.Event {
	case "start":
		r.Start(e.Step)
	case "done":
		r.Done(e.Step, took, e.Detail)
	case "fail":
		r.Fail(e.Step, took, errors.New(e.Error))
	case "skip":
		r.Skip(e.Step, e.Detail)
	case "info":
		r.Infof("%s", e.Message)
	case "debug":
		r.Debugf("%s", e.Message)
	case "progress":
		s := Status{Done: e.Done, Total: e.Total, Unit: e.Unit}
		if s.Done == 0 && s.Total == 0 {
			s.Note = e.Detail // a status of words only
		}
		r.Progress(e.Step, s)
	}
}
