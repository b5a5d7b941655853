// Package conformance runs the tree's own end-to-end suite (e2e.test,
// built by `devk build e2e`) against a devk cluster: `devk e2e`.
package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// The parts of ginkgo's JSON report (--json-report) devk reads: one
// Report per suite, one SpecReport per spec and per suite-level node.
type ginkgoReport struct {
	SuiteDescription string       `json:"SuiteDescription"`
	SpecReports      []specReport `json:"SpecReports"`
}

type specReport struct {
	ContainerHierarchyTexts []string      `json:"ContainerHierarchyTexts"`
	LeafNodeType            string        `json:"LeafNodeType"`
	LeafNodeText            string        `json:"LeafNodeText"`
	State                   string        `json:"State"`
	RunTime                 time.Duration `json:"RunTime"`
	Failure                 *struct {
		Message  string `json:"Message"`
		Location struct {
			FileName   string `json:"FileName"`
			LineNumber int    `json:"LineNumber"`
		} `json:"Location"`
	} `json:"Failure"`
}

// name is the spec's full text, as ginkgo prints it.
func (s specReport) name() string {
	return strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
}

// ReadReport reads the specs (It nodes) of a ginkgo JSON report.
func ReadReport(path string) ([]Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read ginkgo's report: %w", err)
	}
	return ParseReport(data)
}

// ParseReport decodes a ginkgo JSON report into its specs, in report
// order; suite-level nodes (BeforeSuite, ReportAfterSuite) are left out.
func ParseReport(data []byte) ([]Spec, error) {
	var reports []ginkgoReport
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("ginkgo's JSON report: %w", err)
	}
	var out []Spec
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "It" {
				continue
			}
			sp := Spec{Name: s.name(), State: s.State, Took: s.RunTime}
			if s.Failure != nil {
				sp.Message = strings.TrimSpace(s.Failure.Message)
				if s.Failure.Location.FileName != "" {
					sp.Location = fmt.Sprintf("%s:%d", s.Failure.Location.FileName, s.Failure.Location.LineNumber)
				}
			}
			out = append(out, sp)
		}
	}
	return out, nil
}

// Spec is one spec's outcome.
type Spec struct {
	Name string `json:"name"`
	// State is ginkgo's: passed, failed, skipped, pending, panicked,
	// interrupted, aborted, timedout.
	State string        `json:"state"`
	Took  time.Duration `json:"took"`
	// Message is why it failed or was skipped; Location where.
	Message  string `json:"message,omitempty"`
	Location string `json:"location,omitempty"`
}

// StateInterrupted is ginkgo's state of a spec stopped by an interrupt.
const StateInterrupted = "interrupted"

// Failed says the spec counts as a failure.
func (s Spec) Failed() bool {
	switch s.State {
	case "passed", "skipped", "pending":
		return false
	}
	return true
}

// Summary is what a run of the suite came to.
type Summary struct {
	Passed int `json:"passed"`
	// Failed are the failed specs with the first lines of each failure.
	Failed []Spec `json:"failed"`
	// Skipped are the specs that were selected and skipped themselves
	// (a provider, node count or feature they need), grouped by reason.
	Skipped []SkipGroup `json:"skipped"`
	// NotSelected counts the specs --focus, --skip and --conformance
	// left out.
	NotSelected int `json:"notSelected"`
	// Slowest are the specs that took longest, slowest first.
	Slowest []Spec `json:"slowest"`
}

// SkipGroup is the skipped specs that gave one reason.
type SkipGroup struct {
	Reason string   `json:"reason"`
	Specs  []string `json:"specs"`
}

// FailureLines is how many lines of a failure the summary keeps.
const FailureLines = 4

// SlowestCount is how many of the slowest specs the summary names.
const SlowestCount = 5

// Summarize counts the specs. A skipped spec without a message was left
// out by the filters; one with a message skipped itself (e2eskipper).
func Summarize(specs []Spec) Summary {
	var s Summary
	groups := map[string]int{}
	var ran []Spec
	for _, sp := range specs {
		switch {
		case sp.State == "passed":
			s.Passed++
			ran = append(ran, sp)
		case sp.State == "skipped" && sp.Message == "", sp.State == "pending":
			s.NotSelected++
		case sp.State == "skipped":
			reason := firstLine(sp.Message)
			i, ok := groups[reason]
			if !ok {
				i = len(s.Skipped)
				groups[reason] = i
				s.Skipped = append(s.Skipped, SkipGroup{Reason: reason})
			}
			s.Skipped[i].Specs = append(s.Skipped[i].Specs, sp.Name)
		default:
			sp.Message = firstLines(sp.Message, FailureLines)
			s.Failed = append(s.Failed, sp)
			ran = append(ran, sp)
		}
	}
	slices.SortStableFunc(s.Skipped, func(a, b SkipGroup) int { return len(b.Specs) - len(a.Specs) })
	slices.SortStableFunc(ran, func(a, b Spec) int { return int(b.Took - a.Took) })
	s.Slowest = ran[:min(len(ran), SlowestCount)]
	for i := range s.Slowest {
		s.Slowest[i].Message, s.Slowest[i].Location = "", ""
	}
	return s
}

// Counts is "N passed, N failed, N skipped".
func (s Summary) Counts() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", s.Passed, len(s.Failed), s.SkippedCount())
}

// SkippedCount is how many specs skipped themselves.
func (s Summary) SkippedCount() int {
	n := 0
	for _, g := range s.Skipped {
		n += len(g.Specs)
	}
	return n
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(line)
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}
