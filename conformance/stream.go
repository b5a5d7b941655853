package conformance

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Ginkgo's verbose output (-v) frames each spec between separator
// lines. e2e.test alone streams a spec as it runs: its full text
// (followed by its labels in brackets), its location, its output, then an
// end line such as "• [2.013 seconds]", "• [FAILED] [31.2 seconds]" or
// "S [SKIPPED] [0.001 seconds]". The ginkgo CLI running processes in
// parallel prints each spec once it is over, end line first, then its
// text. StreamParser reads both into one SpecLine per finished spec, as it
// happens. It is only for showing progress: the summary and the exit
// status come from the JSON report.
type StreamParser struct {
	state parserState
	name  string
	ended SpecLine // an end line that came before the spec's text
}

type parserState int

const (
	inOutput       parserState = iota
	afterSeparator             // the next line starts a block
	awaitingName               // a block began with its end line
)

// specSeparator is the line ginkgo prints between specs.
const specSeparator = "------------------------------"

// specEnd is a spec's end line: marker, optional state, seconds.
var specEnd = regexp.MustCompile(`^(?:•|S|P) (?:\[([A-Z]+)\] )?\[([0-9]+(?:\.[0-9]+)?) seconds\]$`)

// suiteNode starts the block of a suite-level node, not a spec.
var suiteNode = regexp.MustCompile(`^\[(\w*Suite|DeferCleanup \(Suite\))\]`)

// labelList is the labels ginkgo appends to a spec's text: "[a, b]".
var labelList = regexp.MustCompile(` \[[^\[\]]*, [^\[\]]*\]$`)

// SpecLine is one finished spec.
type SpecLine struct {
	Name  string
	State string // passed, failed, skipped, …
	Took  time.Duration
}

func (l SpecLine) String() string {
	mark := map[string]string{"passed": "✓", "skipped": "-"}[l.State]
	if mark == "" {
		mark = "✗"
	}
	return fmt.Sprintf("%s %s [%s] (%s)", mark, l.Name, l.State, l.Took.Round(10*time.Millisecond))
}

// Feed takes one line of output; it returns a SpecLine when the line
// completes a spec.
func (p *StreamParser) Feed(line string) (SpecLine, bool) {
	line = strings.TrimRight(line, "\r")
	if line == specSeparator {
		p.state, p.name = afterSeparator, ""
		return SpecLine{}, false
	}
	state := p.state
	p.state = inOutput
	switch state {
	case afterSeparator:
		if l, ok := parseEnd(line); ok {
			p.ended, p.state = l, awaitingName
		} else if specName(line) {
			p.name = cleanName(line)
		}
		return SpecLine{}, false
	case awaitingName:
		if !specName(line) {
			return SpecLine{}, false
		}
		l := p.ended
		l.Name = cleanName(line)
		return l, true
	}
	l, ok := parseEnd(line)
	if !ok || p.name == "" {
		return SpecLine{}, false
	}
	l.Name, p.name = p.name, ""
	return l, true
}

func specName(line string) bool {
	return strings.HasPrefix(line, "[") && !suiteNode.MatchString(line)
}

// failedNode is the node ginkgo names inside a failed spec's text.
var failedNode = regexp.MustCompile(` \[(It|BeforeEach|AfterEach|JustBeforeEach|JustAfterEach|DeferCleanup[^\]]*)\] `)

// cleanName drops the labels ginkgo appends and the node ([It],
// [BeforeEach]) it names in a failed spec's text.
func cleanName(line string) string {
	return failedNode.ReplaceAllString(labelList.ReplaceAllString(line, ""), " ")
}

func parseEnd(line string) (SpecLine, bool) {
	m := specEnd.FindStringSubmatch(line)
	if m == nil {
		return SpecLine{}, false
	}
	secs, _ := strconv.ParseFloat(m[2], 64)
	state := "passed"
	if m[1] != "" {
		state = strings.ToLower(m[1])
	}
	return SpecLine{State: state, Took: time.Duration(secs * float64(time.Second))}, true
}
