package phase

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// methodJob is a job state whose steps are methods, as cluster's and
// swap's are.
type methodJob struct {
	calls []string
}

type ctxKey struct{}

func (j *methodJob) build(ctx context.Context) (Outcome, error) {
	j.calls = append(j.calls, "build:"+ctx.Value(ctxKey{}).(string))
	return Changed("built"), nil
}

func (j *methodJob) push(ctx context.Context) (Outcome, error) {
	j.calls = append(j.calls, "push:"+ctx.Value(ctxKey{}).(string))
	return Unchanged("pushed"), nil
}

func methodTree() []*Phase[*methodJob] {
	return []*Phase[*methodJob]{
		{Name: "build", Run: Method((*methodJob).build)},
		Needs(&Phase[*methodJob]{Name: "push", Run: Method((*methodJob).push)}, "build"),
	}
}

func TestMethod(t *testing.T) {
	j := &methodJob{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "run 1")
	res, err := Run(ctx, methodTree(), j, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Each method ran on the job's state with the run's context.
	if want := []string{"build:run 1", "push:run 1"}; !slices.Equal(j.calls, want) {
		t.Fatalf("calls = %v, want %v", j.calls, want)
	}
	if out, _ := res.Outcome("build"); out != Changed("built") {
		t.Fatalf("build outcome %+v, want the method's", out)
	}
	if out, _ := res.Outcome("push"); out != Unchanged("pushed") {
		t.Fatalf("push outcome %+v, want the method's", out)
	}
}

func TestNeeds(t *testing.T) {
	p := Needs(&Phase[*methodJob]{Name: "push"}, "build", "test")
	if want := []string{"build", "test"}; !slices.Equal(p.Needs, want) {
		t.Fatalf("Needs = %v, want %v", p.Needs, want)
	}
	// The engine honours what Needs set: skipping a need is refused.
	j := &methodJob{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "run")
	_, err := Run(ctx, methodTree(), j, Options{Skip: []string{"build"}})
	if err == nil || !strings.Contains(err.Error(), "push needs build") {
		t.Fatalf("err = %v, want the skip of push's need refused", err)
	}
	if len(j.calls) != 0 {
		t.Fatalf("a refused run called %v", j.calls)
	}
}
