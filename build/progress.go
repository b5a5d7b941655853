package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/version"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/progress"
)

// buildJSONSince is the first Go whose go build takes -json (1.24).
const buildJSONSince = "go1.24"

// packagesUnit is what a build's progress counts.
const packagesUnit = "packages"

// buildOutput reads the stdout of `go build -v -json` as it comes. go
// build -v names each package as it starts compiling it (a package the
// build cache holds is not named), and with -json that name is an event
// of its own whose Output is the import path alone: each counts one
// package compiled. Every other output is the build's text (compiler
// errors), written to text exactly as go build prints it without -json.
type buildOutput struct {
	text     io.Writer
	compiled func(n int)

	partial []byte
	n       int
}

// buildEvent is one line of `go build -json` (go help buildjson).
type buildEvent struct {
	ImportPath string
	Action     string
	Output     string
}

func (b *buildOutput) Write(p []byte) (int, error) {
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		b.line(b.partial[:i+1])
		b.partial = b.partial[i+1:]
	}
	return len(p), nil
}

// Close handles a last line without a newline.
func (b *buildOutput) Close() error {
	if len(b.partial) > 0 {
		b.line(append(b.partial, '\n'))
		b.partial = nil
	}
	return nil
}

func (b *buildOutput) line(l []byte) {
	var e buildEvent
	if err := json.Unmarshal(l, &e); err != nil || e.Action == "" {
		b.text.Write(l) // not an event: pass it on as go printed it
		return
	}
	if e.Action != "build-output" {
		return
	}
	if e.ImportPath != "" && e.Output == e.ImportPath+"\n" {
		b.n++
		if b.compiled != nil {
			b.compiled(b.n)
		}
		return
	}
	io.WriteString(b.text, e.Output)
}

// countPackages is the number of packages a build of the packages go list
// -deps printed (list) compiles when nothing is cached: all but unsafe,
// which go implements itself.
func countPackages(list []byte) int {
	n := 0
	for _, p := range strings.Fields(string(list)) {
		if p != "unsafe" {
			n++
		}
	}
	return n
}

// packageCountsFile, in the tree's _output/devk, remembers how many
// packages each build lists (countKey -> count).
const packageCountsFile = "package-counts.json"

// packageCounts keeps the totals of go list -deps, so that a build asks go
// list (1.5–2 s of CPU beside the compile it counts, on two cores) only
// when its packages, flags, environment or module files changed. An edit
// that adds imports leaves the remembered total a few packages short until
// then: the progress never shows fewer than were compiled.
type packageCounts struct {
	path string
}

// countKey names a listing: its command line, environment, and the
// go.mod and go.work of its directory.
func countKey(list execx.Cmd) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q\n%q\n", list.String(), list.Env)
	for _, f := range []string{"go.mod", "go.work"} {
		data, _ := os.ReadFile(filepath.Join(list.Dir, f)) // absent: hashed as empty
		fmt.Fprintf(h, "%s %d\n", f, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c packageCounts) read() map[string]int {
	m := map[string]int{}
	if data, err := os.ReadFile(c.path); err == nil {
		_ = json.Unmarshal(data, &m) // unreadable: listed again, and rewritten
	}
	return m
}

func (c packageCounts) get(key string) (int, bool) {
	n, ok := c.read()[key]
	return n, ok && n > 0
}

// put records a count, keeping at most maxPackageCounts (the others are
// dropped: they are only a cache).
func (c packageCounts) put(key string, n int) error {
	m := c.read()
	if len(m) >= maxPackageCounts {
		clear(m)
	}
	m[key] = n
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(c.path, data, 0o644, "")
}

// maxPackageCounts bounds packageCountsFile.
const maxPackageCounts = 64

// syncWriter serialises writes to w: go build's stdout and stderr are
// copied by two goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// goBuild runs cmd, a go build of pkgs, and reports for the step ctx runs
// under how many packages it has compiled of how many the build has. The
// total is asked of `go list -deps` only once the first package compiles,
// alongside the build, so a build with nothing to compile costs nothing
// more. The log and a failure's error get go build's own text output, as
// without progress. Without a go that knows -json it is run as it is.
func (j *Job) goBuild(ctx context.Context, cmd execx.Cmd, pkgs []string) error {
	if j.goVersion == "" || version.Compare(j.goVersion, buildJSONSince) < 0 || len(cmd.Args) == 0 || cmd.Args[0] != "build" {
		cmd.Stdout, cmd.Stderr = j.Log, j.Log
		return execx.Run(ctx, cmd)
	}
	step := progress.StepOf(ctx)
	var text bytes.Buffer
	sink := io.Writer(&text)
	if j.Log != nil {
		sink = io.MultiWriter(&text, j.Log)
	}
	out := &syncWriter{w: sink}

	var (
		mu        sync.Mutex
		done      int
		total     int
		listing   sync.WaitGroup
		listStart sync.Once
	)
	listCtx, stopList := context.WithCancel(ctx)
	defer func() { stopList(); listing.Wait() }()
	report := func() { // callers hold mu
		j.Reporter.Progress(step, progress.Status{Verb: "compiled", Done: int64(done), Total: int64(total), Unit: packagesUnit})
	}
	list := execx.Cmd{Name: "go", Args: append(append([]string{"list", "-deps"}, j.GoFlags...), pkgs...), Dir: cmd.Dir, Env: cmd.Env}
	counts := packageCounts{path: filepath.Join(j.Tree.OutputDir(), packageCountsFile)}
	listTotal := func() {
		defer listing.Done()
		key := countKey(list) // only once something compiles: a no-op build reads nothing more
		if n, ok := counts.get(key); ok {
			mu.Lock()
			defer mu.Unlock()
			total = max(n, done)
			report()
			return
		}
		b, err := execx.Output(listCtx, list)
		if err != nil {
			if listCtx.Err() == nil {
				j.Reporter.Debugf("count the build's packages (progress without a total): %v", err)
			}
			return
		}
		n := countPackages(b)
		if err := counts.put(key, n); err != nil {
			j.Reporter.Debugf("remember the build's package count: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		total = max(n, done)
		report()
	}
	stream := &buildOutput{text: out, compiled: func(n int) {
		listStart.Do(func() { listing.Add(1); go listTotal() })
		mu.Lock()
		defer mu.Unlock()
		done = n
		if total > 0 {
			total = max(total, n) // not expected: go list named fewer
		}
		report()
	}}
	asked := cmd.String()
	cmd.Args = append([]string{"build", "-v", "-json"}, cmd.Args[1:]...)
	cmd.Stdout, cmd.Stderr = stream, out
	err := execx.Run(ctx, cmd)
	stream.Close()
	if xe := (*execx.Error)(nil); errors.As(err, &xe) {
		// The error is the command without -v -json and what it prints:
		// the text, not the events, as a user running it again sees.
		xe.Command, xe.Output = asked, text.String()
	}
	return err
}
