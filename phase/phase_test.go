package phase

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// recorder is the typed state of the test tree: it records the call order.
type recorder struct {
	calls   []string
	failAt  string
	blockAt string
	cancel  context.CancelFunc
	noCerts bool
}

// rec records the call; the wait phase alone reports a change, so that
// Result.Changed is true exactly when it ran.
func rec(name string) func(context.Context, *recorder) (Outcome, error) {
	return func(ctx context.Context, r *recorder) (Outcome, error) {
		r.calls = append(r.calls, name)
		if r.cancel != nil && r.blockAt == name {
			r.cancel()
			<-ctx.Done()
			return Done, ctx.Err()
		}
		if r.failAt == name {
			return Done, errors.New("boom")
		}
		if name == "wait" {
			return Changed("waited %d", 1), nil
		}
		return Unchanged("%s ok", name), nil
	}
}

// testTree mirrors the shape of `devk up`: groups, nested paths and needs.
func testTree() []*Phase[*recorder] {
	return []*Phase[*recorder]{
		{Name: "preflight", Short: "checks", Run: rec("preflight")},
		{Name: "certs", Short: "all certs", If: func(r *recorder) (bool, string) { return !r.noCerts, "certs exist" },
			Children: []*Phase[*recorder]{
				{Name: "ca", Short: "ca", Run: rec("certs/ca"),
					IO: func(*recorder) ([]string, []string) { return nil, []string{"pki/ca.crt", "pki/ca.key"} }},
				{Name: "apiserver", Short: "apiserver cert", Needs: []string{"certs/ca"}, Run: rec("certs/apiserver"),
					IO: func(*recorder) ([]string, []string) { return []string{"pki/ca.key"}, []string{"pki/apiserver.crt"} }},
			}},
		{Name: "control-plane", Short: "static pods", Run: rec("control-plane"),
			Children: []*Phase[*recorder]{
				{Name: "apiserver", Short: "apiserver pod", Needs: []string{"certs/apiserver"}, Run: rec("control-plane/apiserver")},
				{Name: "scheduler", Short: "scheduler pod", Run: rec("control-plane/scheduler")},
			}},
		{Name: "wait", Short: "wait", Run: rec("wait")},
	}
}

func TestFlatten(t *testing.T) {
	var paths []string
	for _, s := range Flatten(testTree()) {
		paths = append(paths, s.Path)
	}
	want := []string{"preflight", "certs", "certs/ca", "certs/apiserver", "control-plane", "control-plane/apiserver", "control-plane/scheduler", "wait"}
	if !slices.Equal(paths, want) {
		t.Fatalf("paths = %v, want %v", paths, want)
	}
}

func TestRun(t *testing.T) {
	all := []string{"preflight", "certs/ca", "certs/apiserver", "control-plane", "control-plane/apiserver", "control-plane/scheduler", "wait"}
	tests := []struct {
		name      string
		opts      Options
		state     recorder
		wantCalls []string
		wantErr   string
	}{
		{name: "everything in order", wantCalls: all},
		{name: "only a leaf", opts: Options{Only: "certs/apiserver"}, wantCalls: []string{"certs/apiserver"}},
		{name: "only a group runs its children", opts: Options{Only: "certs"}, wantCalls: []string{"certs/ca", "certs/apiserver"}},
		{name: "only a group with its own run", opts: Options{Only: "control-plane"},
			wantCalls: []string{"control-plane", "control-plane/apiserver", "control-plane/scheduler"}},
		{name: "skip a leaf", opts: Options{Skip: []string{"control-plane/scheduler"}},
			wantCalls: []string{"preflight", "certs/ca", "certs/apiserver", "control-plane", "control-plane/apiserver", "wait"}},
		{name: "skip a subtree and what needs it", opts: Options{Skip: []string{"certs", "control-plane/apiserver"}},
			wantCalls: []string{"preflight", "control-plane", "control-plane/scheduler", "wait"}},
		{name: "skipping a need is refused, naming it", opts: Options{Skip: []string{"certs/ca"}},
			wantErr: "certs/apiserver needs certs/ca"},
		{name: "skipping a parent of a need is refused", opts: Options{Skip: []string{"certs"}},
			wantErr: "control-plane/apiserver needs certs/apiserver"},
		{name: "needs outside --only are not required", opts: Options{Only: "control-plane/apiserver"},
			wantCalls: []string{"control-plane/apiserver"}},
		{name: "unknown skip path", opts: Options{Skip: []string{"cert"}}, wantErr: `unknown phase "cert" in --skip-phases`},
		{name: "unknown only path", opts: Options{Only: "nope"}, wantErr: `unknown phase "nope"`},
		{name: "failure stops the run and names the phase", state: recorder{failAt: "certs/apiserver"},
			wantCalls: []string{"preflight", "certs/ca", "certs/apiserver"}, wantErr: "phase certs/apiserver: boom"},
		{name: "a false condition skips the subtree", state: recorder{noCerts: true},
			wantCalls: []string{"preflight", "control-plane", "control-plane/apiserver", "control-plane/scheduler", "wait"}},
		{name: "dry run runs nothing", opts: Options{DryRun: true}, wantCalls: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.state
			_, err := Run(context.Background(), testTree(), &r, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !slices.Equal(r.calls, tc.wantCalls) {
				t.Fatalf("calls = %v, want %v", r.calls, tc.wantCalls)
			}
		})
	}
}

func TestRunCancelStopsPromptly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{blockAt: "certs/ca", cancel: cancel}
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, testTree(), r, Options{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "phase certs/ca") {
			t.Fatalf("err = %v, want context.Canceled in phase certs/ca", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if want := []string{"preflight", "certs/ca"}; !slices.Equal(r.calls, want) {
		t.Fatalf("calls = %v, want %v", r.calls, want)
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &recorder{}
	_, err := Run(ctx, testTree(), r, Options{})
	if !errors.Is(err, context.Canceled) || len(r.calls) != 0 {
		t.Fatalf("err = %v, calls = %v; want cancel before any phase", err, r.calls)
	}
}

func TestTimingsAndSummary(t *testing.T) {
	var out bytes.Buffer
	res, err := Run(context.Background(), testTree(), &recorder{}, Options{Skip: []string{"wait"}, PlanOut: &out, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	var timed, skipped []string
	for _, tm := range res.Timings {
		if tm.Skipped != "" {
			skipped = append(skipped, tm.Path)
		} else {
			timed = append(timed, tm.Path)
		}
	}
	if want := []string{"preflight", "certs/ca", "certs/apiserver", "control-plane", "control-plane/apiserver", "control-plane/scheduler"}; !slices.Equal(timed, want) {
		t.Fatalf("timed = %v, want %v", timed, want)
	}
	if !slices.Equal(skipped, []string{"wait"}) {
		t.Fatalf("skipped = %v", skipped)
	}
	for _, want := range []string{"phase timings:", "certs/apiserver", "wait", "skipped (skipped by --skip-phases wait)", "total"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDryRunPlan(t *testing.T) {
	var out bytes.Buffer
	r := &recorder{}
	if _, err := Run(context.Background(), testTree(), r, Options{DryRun: true, Skip: []string{"control-plane/scheduler"}, PlanOut: &out}); err != nil {
		t.Fatal(err)
	}
	plan := out.String()
	for _, want := range []string{
		"certs/ca — ca", "writes pki/ca.key", "reads  pki/ca.key", "writes pki/apiserver.crt",
		"needs  certs/ca", "- control-plane/scheduler: skipped by --skip-phases",
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan lacks %q:\n%s", want, plan)
		}
	}
	if len(r.calls) != 0 {
		t.Fatalf("dry run called %v", r.calls)
	}
}

func TestBind(t *testing.T) {
	r := &recorder{}
	var flags Flags
	cmd := &cobra.Command{
		Use:  "up",
		Long: "Bring a cluster up.",
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := Run(cmd.Context(), testTree(), r, flags.Options())
			return err
		},
	}
	var name string
	cmd.Flags().StringVar(&name, "name", "", "cluster name")
	Bind(cmd, testTree(), &flags)

	for _, want := range []string{"Phases (run in this order", "certs/apiserver", "apiserver cert", "up phase PATH"} {
		if !strings.Contains(cmd.Long, want) {
			t.Errorf("help lacks %q:\n%s", want, cmd.Long)
		}
	}
	root := &cobra.Command{Use: "devk"}
	root.AddCommand(cmd)
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"up", "phase", "control-plane/apiserver", "--name", "x"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.calls, []string{"control-plane/apiserver"}) || name != "x" {
		t.Fatalf("calls = %v, name = %q; want only control-plane/apiserver with --name x", r.calls, name)
	}

	r.calls = nil
	flags = Flags{}
	root.SetArgs([]string{"up", "--skip-phases", "certs,control-plane/apiserver"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"preflight", "control-plane", "control-plane/scheduler", "wait"}; !slices.Equal(r.calls, want) {
		t.Fatalf("calls = %v, want %v", r.calls, want)
	}
}

func TestOutcome(t *testing.T) {
	r := &recorder{}
	res, err := Run(context.Background(), testTree(), r, Options{Skip: []string{"wait"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed() {
		t.Fatalf("no phase that ran reported a change, yet Changed: %+v", res.Timings)
	}
	if out, ok := res.Outcome("certs/ca"); !ok || out.Detail != "certs/ca ok" || out.Changed {
		t.Fatalf("certs/ca outcome %+v (ran %v)", out, ok)
	}
	if _, ok := res.Outcome("wait"); ok {
		t.Fatal("a skipped phase has an outcome")
	}
	res, err = Run(context.Background(), testTree(), &recorder{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := res.Outcome("wait"); !res.Changed() || out.Detail != "waited 1" {
		t.Fatalf("wait outcome %+v, run changed %v", out, res.Changed())
	}
}

func TestOutcomeHelpers(t *testing.T) {
	tests := []struct {
		name string
		got  Outcome
		want Outcome
	}{
		{name: "changed", got: Changed("%d written", 2), want: Outcome{Detail: "2 written", Changed: true}},
		{name: "unchanged", got: Unchanged("%d written", 0), want: Outcome{Detail: "0 written"}},
		{name: "changed if true", got: ChangedIf(true, "pid %d", 7), want: Outcome{Detail: "pid 7", Changed: true}},
		{name: "changed if false", got: ChangedIf(false, "pid %d", 7), want: Outcome{Detail: "pid 7"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %+v, want %+v", tc.got, tc.want)
			}
		})
	}
}
