package phase

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// outer embeds the state of an inner pipeline, as image.Job embeds build.Job.
type outer struct {
	inner *mapInner
	calls []string
}

type mapInner struct {
	calls []string
	skip  bool
}

func TestMap(t *testing.T) {
	innerPhases := []*Phase[*mapInner]{
		{
			Name: "compile", Short: "compile things",
			IO: func(s *mapInner) ([]string, []string) { return []string{"src"}, []string{"bin"} },
			Run: func(_ context.Context, s *mapInner) (Outcome, error) {
				s.calls = append(s.calls, "compile")
				return Done, nil
			},
			Children: []*Phase[*mapInner]{{
				Name: "link",
				If:   func(s *mapInner) (bool, string) { return !s.skip, "nothing to link" },
				Run: func(_ context.Context, s *mapInner) (Outcome, error) {
					s.calls = append(s.calls, "link")
					return Changed("linked"), nil
				},
			}},
		},
		{
			Name: "fail", Needs: []string{"compile"},
			Run: func(_ context.Context, s *mapInner) (Outcome, error) { return Done, errors.New("boom") },
		},
	}
	build := func() []*Phase[*outer] {
		ps := Map(innerPhases, func(o *outer) *mapInner { return o.inner })
		return append(ps, &Phase[*outer]{
			Name: "push", Needs: []string{"compile/link"},
			Run: func(_ context.Context, o *outer) (Outcome, error) {
				o.calls = append(o.calls, "push")
				return Done, nil
			},
		})
	}

	t.Run("paths and needs are kept", func(t *testing.T) {
		var paths []string
		for _, s := range Flatten(build()) {
			paths = append(paths, s.Path)
		}
		if want := []string{"compile", "compile/link", "fail", "push"}; !slices.Equal(paths, want) {
			t.Fatalf("paths %v, want %v", paths, want)
		}
		ps := build()
		if !slices.Equal(ps[1].Needs, []string{"compile"}) || ps[0].Short != "compile things" {
			t.Fatalf("needs or help lost: %+v", ps[1])
		}
	})

	t.Run("runs on the embedded state", func(t *testing.T) {
		o := &outer{inner: &mapInner{}}
		_, err := Run(context.Background(), build(), o, Options{Skip: []string{"fail"}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(o.inner.calls, []string{"compile", "link"}) || !slices.Equal(o.calls, []string{"push"}) {
			t.Fatalf("inner calls %v, outer calls %v", o.inner.calls, o.calls)
		}
	})

	t.Run("condition reads the embedded state", func(t *testing.T) {
		o := &outer{inner: &mapInner{skip: true}}
		res, err := Run(context.Background(), build(), o, Options{Only: "compile"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(o.inner.calls, []string{"compile"}) {
			t.Fatalf("calls %v: link should have been skipped", o.inner.calls)
		}
		if res.Timings[1].Skipped != "nothing to link" {
			t.Fatalf("timings %+v", res.Timings)
		}
	})

	t.Run("errors are wrapped with the path", func(t *testing.T) {
		o := &outer{inner: &mapInner{}}
		_, err := Run(context.Background(), build(), o, Options{})
		if err == nil || err.Error() != "phase fail: boom" {
			t.Fatalf("err %v", err)
		}
	})

	t.Run("dry run shows the mapped io", func(t *testing.T) {
		var plan bytes.Buffer
		o := &outer{inner: &mapInner{}}
		if _, err := Run(context.Background(), build(), o, Options{DryRun: true, PlanOut: &plan}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan.String(), "reads  src") || !strings.Contains(plan.String(), "writes bin") || len(o.inner.calls) > 0 {
			t.Fatalf("plan:\n%s\ncalls %v", plan.String(), o.inner.calls)
		}
	})
}

func TestNest(t *testing.T) {
	inner := []*Phase[*mapInner]{
		{Name: "select"},
		{Name: "pod", Children: []*Phase[*mapInner]{
			{Name: "write", Needs: []string{"select"}},
			{Name: "ready", Needs: []string{"pod/write"}},
		}},
	}
	swap := &Phase[*outer]{Name: "swap", Children: Nest("swap", Map(inner, func(o *outer) *mapInner { return o.inner }))}
	// The engine accepts the nested needs only if they name real paths.
	if _, err := Run(context.Background(), []*Phase[*outer]{swap}, &outer{inner: &mapInner{}}, Options{Skip: []string{"swap/select"}}); err == nil ||
		!strings.Contains(err.Error(), "swap/pod/write needs swap/select") {
		t.Fatalf("skipping a nested need: %v; want a refusal naming swap/select", err)
	}
	if got := inner[1].Children[1].Needs; !slices.Equal(got, []string{"pod/write"}) {
		t.Fatalf("Nest changed the phases Map copied from: %v", got)
	}
}
