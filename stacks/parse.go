package stacks

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Goroutine is one goroutine of a dump.
type Goroutine struct {
	ID int
	// State is what it does or waits for ("running", "chan receive",
	// "IO wait", "select").
	State string
	// WaitMinutes is how long it has been blocked, as the runtime rounds
	// it (0: under a minute, or not blocked).
	WaitMinutes int
	// Locked says it is locked to its OS thread.
	Locked bool
	// Frames are its calls, innermost first.
	Frames []Frame
	// CreatedBy is the go statement that started it (nil for main and
	// the runtime's own).
	CreatedBy *Frame
}

// Frame is one call of a stack.
type Frame struct {
	// Function is the function's full name (package path, receiver),
	// without the arguments the dump shows.
	Function string `json:"function"`
	// Reported is the source file as the binary reports it: a module
	// path for a -trimpath build.
	Reported string `json:"reported"`
	Line     int    `json:"line"`
	// Path is the file on this machine (srcpath's File): relative to the
	// tree, or absolute in the module cache or GOROOT.
	Path string `json:"path"`
}

var (
	// headerRE is a goroutine's first line: "goroutine 18 [chan receive,
	// 5 minutes, locked to thread]:" (Go 1.22+ may put "gp=… m=…" before
	// the brackets).
	headerRE = regexp.MustCompile(`^goroutine (\d+)(?: [^\[]*)? \[(.*)\]:$`)
	// fileRE is a frame's second line: "\t/path/file.go:123 +0x1d".
	fileRE = regexp.MustCompile(`^\t(.+):(\d+)(?: \+0x[0-9a-f]+)?$`)
	// waitRE is the wait in a header: "5 minutes".
	waitRE = regexp.MustCompile(`^(\d+) minutes$`)
)

const (
	// createdByPrefix starts the call of the go statement that made a
	// goroutine; " in goroutine N" may follow its function.
	createdByPrefix = "created by "
	// lockedToThread is the header's word for a goroutine locked to its
	// thread.
	lockedToThread = "locked to thread"
)

// Parse reads a dump as /debug/pprof/goroutine?debug=2 (and a Go panic)
// writes it: goroutines separated by blank lines, each a header, then
// per call a function line and a "\tFILE:LINE +0xOFF" line. Lines it does
// not know ("...additional frames elided...") are skipped.
func Parse(dump []byte) ([]Goroutine, error) {
	var out []Goroutine
	var g *Goroutine
	var function string
	createdBy := false
	sc := bufio.NewScanner(bytes.NewReader(dump))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimRight(sc.Text(), "\r")
		if m := headerRE.FindStringSubmatch(line); m != nil {
			id, _ := strconv.Atoi(m[1])
			out = append(out, parseHeader(id, m[2]))
			g, function, createdBy = &out[len(out)-1], "", false
			continue
		}
		if g == nil || line == "" {
			continue
		}
		if m := fileRE.FindStringSubmatch(line); m != nil {
			if function == "" {
				return nil, fmt.Errorf("line %d: a file and line (%q) with no function line before it", lineNo, line)
			}
			n, err := strconv.Atoi(m[2])
			if err != nil {
				return nil, fmt.Errorf("line %d: %q: %w", lineNo, line, err)
			}
			f := Frame{Function: function, Reported: m[1], Line: n}
			if createdBy {
				g.CreatedBy = &f
			} else {
				g.Frames = append(g.Frames, f)
			}
			function = ""
			continue
		}
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "...") {
			continue
		}
		function, createdBy = functionName(line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no goroutine in %d lines: not a goroutine dump (debug=2)", lineNo)
	}
	return out, nil
}

// parseHeader reads the bracket of a goroutine's header: its state, then
// a wait and "locked to thread" in any order.
func parseHeader(id int, bracket string) Goroutine {
	g := Goroutine{ID: id}
	parts := strings.Split(bracket, ", ")
	g.State = parts[0]
	for _, p := range parts[1:] {
		switch m := waitRE.FindStringSubmatch(p); {
		case m != nil:
			g.WaitMinutes, _ = strconv.Atoi(m[1])
		case p == lockedToThread:
			g.Locked = true
		default:
			g.State += ", " + p
		}
	}
	return g
}

// functionName is a function line's function without its arguments:
// "k8s.io/x.(*T).f(0xc000010000, ...)" gives "k8s.io/x.(*T).f"; "created
// by k8s.io/x.f in goroutine 7" gives "k8s.io/x.f" and true.
func functionName(line string) (name string, createdBy bool) {
	if rest, ok := strings.CutPrefix(line, createdByPrefix); ok {
		name, _, _ = strings.Cut(rest, " in goroutine ")
		return name, true
	}
	if strings.HasSuffix(line, ")") {
		// The arguments are the last parenthesis; a receiver such as
		// (*T) comes before it.
		if i := strings.LastIndex(line, "("); i > 0 {
			return line[:i], false
		}
	}
	return line, false
}

// Group is the goroutines that have the same stack: same state, calls and
// creator, as panicparse buckets them.
type Group struct {
	Count int    `json:"count"`
	State string `json:"state"`
	// WaitMinutes is the shortest and the longest wait among them.
	WaitMinutes [2]int `json:"waitMinutes"`
	Locked      bool   `json:"locked,omitempty"`
	// IDs are the goroutines' IDs, ascending.
	IDs       []int   `json:"ids"`
	Frames    []Frame `json:"frames"`
	CreatedBy *Frame  `json:"createdBy,omitempty"`
}

// GroupStacks groups goroutines with identical stacks, the largest group
// first (then by their first goroutine's ID).
func GroupStacks(gs []Goroutine) []Group {
	index := map[string]int{}
	var out []Group
	for _, g := range gs {
		k := stackKey(g)
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, Group{State: g.State, Locked: g.Locked, WaitMinutes: [2]int{g.WaitMinutes, g.WaitMinutes},
				Frames: g.Frames, CreatedBy: g.CreatedBy})
		}
		grp := &out[i]
		grp.Count++
		grp.IDs = append(grp.IDs, g.ID)
		grp.WaitMinutes[0] = min(grp.WaitMinutes[0], g.WaitMinutes)
		grp.WaitMinutes[1] = max(grp.WaitMinutes[1], g.WaitMinutes)
	}
	for i := range out {
		slices.Sort(out[i].IDs)
	}
	slices.SortStableFunc(out, func(a, b Group) int {
		return cmp.Or(b.Count-a.Count, a.IDs[0]-b.IDs[0])
	})
	return out
}

// stackKey is what makes two goroutines' stacks the same.
func stackKey(g Goroutine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%t", g.State, g.Locked)
	write := func(f Frame) { fmt.Fprintf(&b, "\n%s %s:%d", f.Function, f.Reported, f.Line) }
	for _, f := range g.Frames {
		write(f)
	}
	if g.CreatedBy != nil {
		b.WriteString("\ncreated by")
		write(*g.CreatedBy)
	}
	return b.String()
}
