package build

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/phase"
)

// The testdata were recorded from real builds with Go 1.26:
//   - gobuild-preferredimports.json: `go build -trimpath -v -json
//     ./cmd/preferredimports` in the v1.34.4 tree with an empty GOCACHE
//     (CGO_ENABLED=0), and golist-preferredimports.txt its `go list -deps`;
//   - gobuild-fail.json: `go build -trimpath -v -json .` with an empty
//     GOCACHE of a module whose package a does not compile, and
//     gobuild-fail.txt what `go build -trimpath .` printed for it.

// feed writes data to w in chunks of n bytes, as a pipe may hand it over.
func feed(w *buildOutput, data []byte, n int) {
	for len(data) > 0 {
		k := min(n, len(data))
		w.Write(data[:k])
		data = data[k:]
	}
	w.Close()
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBuildOutputCountsCompiledPackages(t *testing.T) {
	events := readTestdata(t, "gobuild-preferredimports.json")
	want := countPackages(readTestdata(t, "golist-preferredimports.txt"))
	for _, chunk := range []int{1, 7, 4096} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			var text bytes.Buffer
			var seen []int
			feed(&buildOutput{text: &text, compiled: func(n int) { seen = append(seen, n) }}, events, chunk)
			if len(seen) != want || seen[len(seen)-1] != want {
				t.Fatalf("counted %d packages (last %v), want every package go list -deps names but unsafe: %d", len(seen), seen[len(seen)-1:], want)
			}
			for i, n := range seen {
				if n != i+1 {
					t.Fatalf("count %d after %d packages", n, i+1)
				}
			}
			if text.Len() != 0 {
				t.Fatalf("a clean build left text: %q", text.String())
			}
		})
	}
}

func TestBuildOutputKeepsCompilerErrorsVerbatim(t *testing.T) {
	var text bytes.Buffer
	n := 0
	feed(&buildOutput{text: &text, compiled: func(int) { n++ }}, readTestdata(t, "gobuild-fail.json"), 13)
	if want := string(readTestdata(t, "gobuild-fail.txt")); text.String() != want {
		t.Fatalf("text =\n%s\nwant what go build prints without -json:\n%s", text.String(), want)
	}
	if n != 63 {
		t.Fatalf("counted %d packages, want the 63 -v names", n)
	}
}

func TestBuildOutputPassesOtherLinesOn(t *testing.T) {
	var text bytes.Buffer
	in := "go: downloading example.com/m v1.0.0\n" +
		`{"ImportPath":"fmt","Action":"build-output","Output":"fmt\n"}` + "\n" +
		`{"ImportPath":"x","Action":"build-output","Output":"# x\nx.go:1: bad\n"}` + "\n" +
		"no newline at the end"
	n := 0
	feed(&buildOutput{text: &text, compiled: func(int) { n++ }}, []byte(in), 5)
	want := "go: downloading example.com/m v1.0.0\n# x\nx.go:1: bad\nno newline at the end\n"
	if text.String() != want || n != 1 {
		t.Fatalf("text = %q (%d compiled), want %q (1)", text.String(), n, want)
	}
}

// progressLog records the Progress a reporter receives.
type progressLog struct {
	progress.Reporter
	mu     sync.Mutex
	events []progress.Status
	steps  map[string]bool
}

func (p *progressLog) Progress(step string, s progress.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, s)
	p.steps[step] = true
}

// TestBuildReportsCompiledPackages builds the fixture tree after an edit
// no build cache has seen: the compile phase reports the packages it
// compiles for its own step, and the number in the build from go list.
func TestBuildReportsCompiledPackages(t *testing.T) {
	root := testtree.New(t)
	vfile := filepath.Join(root, "staging", "src", "k8s.io", "component-base", "version", "version.go")
	f, err := os.OpenFile(vfile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "\nfunc Unique() string { return %q }\n", time.Now().String())
	f.Close()
	rep := &progressLog{Reporter: progress.Discard(), steps: map[string]bool{}}
	_, err = Run(context.Background(), Options{TreeDir: root, Components: []string{"apiserver"}, Reporter: rep}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep.mu.Lock()
	if len(rep.events) == 0 || !rep.steps["compile"] || len(rep.steps) != 1 {
		t.Fatalf("progress %+v for steps %v, want some for compile", rep.events, rep.steps)
	}
	last := rep.events[len(rep.events)-1]
	// component-base/version and the command at least; the total is the
	// build's packages, std included.
	if last.Verb != "compiled" || last.Unit != packagesUnit || last.Done < 2 || last.Total < 10 || last.Done > last.Total {
		t.Fatalf("last progress = %+v (%s)", last, last)
	}
	if !strings.HasPrefix(last.String(), "compiled ") {
		t.Fatalf("status reads %q", last)
	}
	rep.mu.Unlock()

	// The total is remembered: the next build takes it from the file, not
	// from go list (a count planted in the file shows), until go.mod
	// changes.
	counts := packageCounts{path: filepath.Join(root, "_output", "devk", packageCountsFile)}
	m := counts.read()
	if len(m) != 1 {
		t.Fatalf("%s holds %v, want the build's one count", counts.path, m)
	}
	for k, n := range m {
		if n != int(last.Total) {
			t.Fatalf("remembered %d packages, the build counted %d", n, last.Total)
		}
		if err := counts.put(k, 9999); err != nil {
			t.Fatal(err)
		}
	}
	lastTotal := func(edit string) int64 {
		t.Helper()
		f, err := os.OpenFile(vfile, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "\nfunc Unique%s() string { return %q }\n", edit, time.Now().String())
		f.Close()
		rep.mu.Lock()
		rep.events = nil
		rep.mu.Unlock()
		if _, err := Run(context.Background(), Options{TreeDir: root, Components: []string{"apiserver"}, Reporter: rep}, phase.Options{}); err != nil {
			t.Fatal(err)
		}
		rep.mu.Lock()
		defer rep.mu.Unlock()
		if len(rep.events) == 0 {
			t.Fatal("no progress")
		}
		return rep.events[len(rep.events)-1].Total
	}
	if got := lastTotal("Again"); got != 9999 {
		t.Fatalf("total %d after an edit, want the remembered 9999 (go list ran again?)", got)
	}
	gomod := filepath.Join(root, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gomod, append(data, "\n// changed\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := lastTotal("Module"); got != last.Total {
		t.Fatalf("total %d after go.mod changed, want go list's %d again", got, last.Total)
	}
}
