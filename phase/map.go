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
