package phase

import "context"

// Method makes a method of a job's state a phase's Run, so a table names
// the method instead of wrapping it: Run: phase.Method((*Job).resume). A
// method expression takes the receiver first, Run takes ctx first.
func Method[S any](m func(S, context.Context) (Outcome, error)) func(context.Context, S) (Outcome, error) {
	return func(ctx context.Context, s S) (Outcome, error) { return m(s, ctx) }
}

// Needs sets the paths p needs and returns p, for a phase that a
// constructor made: phase.Needs(p("files", …), "mounts", "kubelet").
func Needs[S any](p *Phase[S], paths ...string) *Phase[S] {
	p.Needs = paths
	return p
}

// If sets p's condition and returns p, for a phase that a constructor
// made: phase.If(manifestPhase(…), devkOnly).
func If[S any](p *Phase[S], cond func(S) (bool, string)) *Phase[S] {
	p.If = cond
	return p
}

// Both is a condition that holds when a and b do; the first that does
// not says why.
func Both[S any](a, b func(S) (bool, string)) func(S) (bool, string) {
	return func(s S) (bool, string) {
		if ok, why := a(s); !ok {
			return ok, why
		}
		return b(s)
	}
}
