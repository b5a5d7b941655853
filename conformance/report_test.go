package conformance

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	data, err := os.ReadFile("testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := ParseReport(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 8 {
		t.Fatalf("got %d specs, want the 8 It nodes (suite nodes left out)", len(specs))
	}
	if specs[0].Name != "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]" || specs[0].Took != 2500*time.Millisecond {
		t.Errorf("first spec = %+v", specs[0])
	}
	s := Summarize(specs)
	if s.Passed != 2 || s.NotSelected != 1 || s.SkippedCount() != 3 {
		t.Errorf("passed %d, not selected %d, skipped %d; want 2, 1, 3", s.Passed, s.NotSelected, s.SkippedCount())
	}
	if len(s.Failed) != 2 {
		t.Fatalf("failed = %+v, want the failed and the timed-out spec", s.Failed)
	}
	f := s.Failed[0]
	if f.Location != "k8s.io/kubernetes/test/e2e/apps/deployment.go:185" ||
		f.Message != "timed out waiting for the condition\nline two\nline three\nline four\n…" {
		t.Errorf("failure kept as %q at %q, want its first %d lines and location", f.Message, f.Location, FailureLines)
	}
	if s.Failed[1].State != "timedout" {
		t.Errorf("second failure = %+v", s.Failed[1])
	}
	// Reasons group by their first line, largest group first.
	if len(s.Skipped) != 2 || s.Skipped[0].Reason != "Only supported for providers [gce gke aws] (not local)" || len(s.Skipped[0].Specs) != 2 ||
		s.Skipped[1].Reason != "Requires at least 2 nodes (not 1)" {
		t.Errorf("skipped = %+v", s.Skipped)
	}
	var slow []string
	for _, sp := range s.Slowest {
		slow = append(slow, sp.Name)
		if sp.Message != "" {
			t.Errorf("slowest %s keeps its message", sp.Name)
		}
	}
	want := []string{
		`[sig-node] Probing container should be restarted with a exec "cat /tmp/health" liveness probe [NodeConformance] [Conformance]`,
		"[sig-apps] Deployment should run the lifecycle of a Deployment [Conformance]",
		"[sig-node] Pods should get a host IP [NodeConformance] [Conformance]",
		"[sig-cli] Kubectl client Kubectl version should check is all data is printed [Conformance]",
	}
	if strings.Join(slow, "\n") != strings.Join(want, "\n") {
		t.Errorf("slowest:\n%s\nwant (ran specs only, slowest first):\n%s", strings.Join(slow, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseReportRefusesOtherJSON(t *testing.T) {
	for name, data := range map[string]string{"object": `{"SpecReports": []}`, "truncated": `[{"SpecReports": [`, "empty": ``} {
		if _, err := ParseReport([]byte(data)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzParseReport(f *testing.F) {
	data, err := os.ReadFile("testdata/report.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, err := ParseReport(data)
		if err != nil {
			return
		}
		s := Summarize(specs)
		if got := s.Passed + len(s.Failed) + s.SkippedCount() + s.NotSelected; got != len(specs) {
			t.Fatalf("summary counts %d of %d specs", got, len(specs))
		}
		if len(s.Slowest) > SlowestCount {
			t.Fatalf("%d slowest", len(s.Slowest))
		}
	})
}
