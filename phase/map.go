package phase

import "context"

// Map adapts phases written for state S to a job whose state T holds an S
// (typically a struct embedding it), so a pipeline can run another
// pipeline's phases first on one shared state: the image pipeline runs the
// build phases on the *build.Job inside its *image.Job. Names, help,
// needs and children are kept, so the mapped phases keep their paths when
// they sit at the same depth.
func Map[S, T any](phases []*Phase[S], get func(T) S) []*Phase[T] {
	out := make([]*Phase[T], 0, len(phases))
	for _, p := range phases {
		q := &Phase[T]{
			Name:     p.Name,
			Short:    p.Short,
			Needs:    p.Needs,
			Children: Map(p.Children, get),
		}
		if p.If != nil {
			q.If = func(t T) (bool, string) { return p.If(get(t)) }
		}
		if p.IO != nil {
			q.IO = func(t T) ([]string, []string) { return p.IO(get(t)) }
		}
		if p.Run != nil {
			q.Run = func(ctx context.Context, t T) (Outcome, error) { return p.Run(ctx, get(t)) }
		}
		out = append(out, q)
	}
	return out
}

// Nest prepares phases for a place under the phase path parent: their
// Needs, written as paths from the root of their own job, are rewritten
// to name the same phases under parent. It changes ps in place (Map's
// output is a fresh copy) and returns it.
func Nest[S any](parent string, ps []*Phase[S]) []*Phase[S] {
	for _, p := range ps {
		needs := make([]string, len(p.Needs))
		for i, n := range p.Needs {
			needs[i] = parent + "/" + n
		}
		p.Needs = needs
		Nest(parent, p.Children)
	}
	return ps
}
