package trace

import "time"

// The defaults of --settle and --for.
const (
	// DefaultSettle is how long the cluster must be quiet (no new write
	// request, etcd revision, rule or container change) after the
	// command for the trace to end.
	DefaultSettle = 2 * time.Second
	// DefaultFor bounds the wait after the command's exit.
	DefaultFor = 30 * time.Second
	// pollInterval is how often trace reads the audit logs, and the
	// nodes' rules and runtimes, while it waits: a quarter of the default
	// settle time.
	pollInterval = 500 * time.Millisecond
)

// settleState says where a wait for quiet stands.
type settleState int

const (
	waiting  settleState = iota
	quiet                // nothing happened for settle since the exit or the last activity
	timedOut             // max passed since the exit, and it was never quiet
)

// settled decides, at now, whether the trace of a command that exited at
// exit may end: when nothing happened for settle since the later of exit
// and the last activity (last; zero when none), or when max has passed
// since exit.
func settled(exit, last, now time.Time, settle, max time.Duration) settleState {
	since := exit
	if last.After(since) {
		since = last
	}
	switch {
	case now.Sub(since) >= settle:
		return quiet
	case now.Sub(exit) >= max:
		return timedOut
	}
	return waiting
}
