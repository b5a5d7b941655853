package supervise

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/syncbuf"
)

// testDir is a Dir in a temp dir whose logs rotate at maxBytes.
func testDir(t *testing.T, maxBytes int64) Dir {
	dir := t.TempDir()
	return Dir{
		PIDFile:        func(name string) string { return filepath.Join(dir, "run", name+".pid") },
		LogFile:        func(name string) string { return filepath.Join(dir, "logs", name+".log") },
		Work:           dir,
		LogMaxBytes:    maxBytes,
		LogGenerations: 3,
	}
}

// linePad makes each test line about 100 bytes.
var linePad = strings.Repeat("x", 88)

// writeLines is a shell daemon that prints lines from..to-1 ("line
// 000042 xxx…"), sleeping every lines between them, then exits.
func writeLines(from, to int, sleep string) Process {
	script := fmt.Sprintf(`i=%d; while [ $i -lt %d ]; do printf 'line %%06d %s\n' $i; i=$((i+1)); %s done`, from, to, linePad, sleep)
	return Process{Name: "writer", Argv: []string{"/bin/sh", "-c", script}}
}

// runToEnd starts proc and waits until it and its log writer are gone.
func runToEnd(t *testing.T, p Dir, proc Process) {
	t.Helper()
	if _, _, err := p.Start(proc); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, daemon := p.Running(proc.Name)
		_, writer := p.Running(logWriterName(proc.Name))
		return !daemon && !writer, nil
	})
	if err != nil {
		t.Fatalf("%s or its log writer still runs: %v", proc.Name, err)
	}
}

// logLines reads the whole log (generations first) and returns its
// numbered lines.
func logLines(t *testing.T, path string) []int {
	t.Helper()
	r, err := OpenLog(path)
	return numberedLines(t, r, err)
}

// marked is the numbered lines read since m.
func marked(t *testing.T, m *LogMark) []int {
	t.Helper()
	r, err := m.Since()
	return numberedLines(t, r, err)
}

// numberedLines reads r to its end and closes it, and returns its
// numbered lines, failing on any other line but devk's own "----" ones
// and TestLogRotation's "old line".
func numberedLines(t *testing.T, r io.ReadCloser, err error) []int {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var nums []int
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if strings.HasPrefix(l, "---- ") || l == "old line" {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(l, "line %06d "+linePad, &n); err != nil {
			t.Fatalf("a line was cut or mixed: %q", l)
		}
		nums = append(nums, n)
	}
	return nums
}

// consecutive reports whether nums are from, from+1, …, to-1.
func consecutive(nums []int, from, to int) bool {
	if len(nums) != to-from {
		return false
	}
	for i, n := range nums {
		if n != from+i {
			return false
		}
	}
	return true
}

// TestLogRotation runs real processes whose output passes the cap many
// times: the log is rotated at line ends into three generations, all
// 0600 (a 0644 log of an older devk too), nothing is lost or repeated
// across a rotation or a restart, and the oldest generation is dropped.
func TestLogRotation(t *testing.T) {
	const maxBytes = 16 << 10
	p := testDir(t, maxBytes)
	log := p.LogFile("writer")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log, []byte("old line\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// ~44 KB: two rotations, every line kept.
	runToEnd(t, p, writeLines(0, 400, ""))
	if got := logLines(t, log); !consecutive(got, 0, 400) {
		t.Fatalf("after 400 lines the log holds %d lines: %v…", len(got), got[:min(len(got), 10)])
	}
	if r, _ := OpenLog(log); r != nil {
		data, _ := io.ReadAll(r)
		r.Close()
		if !strings.HasPrefix(string(data), "old line\n---- ") {
			t.Errorf("the old log's content is not first: %q", data[:min(len(data), 40)])
		}
	}
	if gens := generations(log); !slices.Equal(gens, []string{log + ".1", log + ".2"}) {
		t.Errorf("generations %v, want .1 and .2", gens)
	}

	// Started again, ~110 KB more: rotated past the three generations
	// kept; what is kept is the newest, whole and in order.
	runToEnd(t, p, writeLines(400, 1400, ""))
	got := logLines(t, log)
	if len(got) == 0 || !consecutive(got, got[0], 1400) {
		t.Fatalf("the log holds lines %v…%v, not a run of the newest up to 1399", got[:min(len(got), 5)], got[max(0, len(got)-5):])
	}
	if got[0] <= 400 {
		t.Errorf("the oldest lines (%d on) were kept: the generations were not dropped", got[0])
	}
	files, _ := filepath.Glob(log + "*")
	if want := []string{log, log + ".1", log + ".2", log + ".3"}; !slices.Equal(files, want) {
		t.Errorf("log files %v, want %v", files, want)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != LogFileMode {
			t.Errorf("%s has mode %v, want %v", f, fi.Mode().Perm(), LogFileMode)
		}
		if f != log && (fi.Size() < maxBytes-512 || fi.Size() > maxBytes) {
			t.Errorf("%s has %d bytes; the cap is %d", f, fi.Size(), maxBytes)
		}
	}
}

// TestStopEndsLogWriter: stopping a daemon stops its log writer after
// it wrote the daemon's last words; no writer process is left.
func TestStopEndsLogWriter(t *testing.T) {
	p := testDir(t, 0)
	proc := Process{Name: "sleeper", Argv: []string{"/bin/sh", "-c", "trap 'echo last words; exit 0' TERM; echo hello; while :; do sleep 0.05; done"}}
	if _, _, err := p.Start(proc); err != nil {
		t.Fatal(err)
	}
	wpid, ok := p.Running(logWriterName("sleeper"))
	if !ok {
		t.Fatal("no log writer runs for the daemon")
	}
	if argv := Argv(wpid); len(argv) < 3 || argv[1] != logWriterArg || argv[2] != p.LogFile("sleeper") {
		t.Errorf("the log writer's command line is %q", argv)
	}
	// Once it said hello, its trap is set.
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(string(readFile(t, p.LogFile("sleeper"))), "hello\n"), nil
	})
	if err != nil {
		t.Fatalf("the daemon's hello never reached its log: %q", readFile(t, p.LogFile("sleeper")))
	}
	if stopped, err := p.Stop(context.Background(), "sleeper", 2*time.Second); err != nil || !stopped {
		t.Fatalf("Stop = %v, %v", stopped, err)
	}
	if _, ok := p.Running(logWriterName("sleeper")); ok {
		t.Error("the log writer still runs after Stop")
	}
	if _, err := os.Stat(p.PIDFile(logWriterName("sleeper"))); !os.IsNotExist(err) {
		t.Errorf("the log writer's pid file is left: %v", err)
	}
	if left := Processes(func(argv []string) bool { return slices.Contains(argv, p.LogFile("sleeper")) }); len(left) > 0 {
		t.Errorf("processes left writing the log: %v", left)
	}
	data, _ := os.ReadFile(p.LogFile("sleeper"))
	if !strings.Contains(string(data), "hello\n") || !strings.Contains(string(data), "last words\n") {
		t.Errorf("the log lacks the daemon's output: %q", data)
	}
}

// TestLogWriterSurvivesSignals: SIGINT, SIGTERM and SIGHUP to a log
// writer leave it writing.
func TestLogWriterSurvivesSignals(t *testing.T) {
	p := testDir(t, 0)
	proc := Process{Name: "ticker", Argv: []string{"/bin/sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.05; done"}}
	if _, _, err := p.Start(proc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background(), "ticker", time.Second) })
	wpid, ok := p.Running(logWriterName("ticker"))
	if !ok {
		t.Fatal("no log writer")
	}
	// Once it writes, it has set itself up.
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(string(readFile(t, p.LogFile("ticker"))), "tick 0\n"), nil
	})
	if err != nil {
		t.Fatal("the log writer wrote nothing")
	}
	// What a Ctrl-C or a stray SIGTERM to the writer does: nothing; the
	// daemon would otherwise lose its stdout (and a Go daemon die).
	for _, sig := range []unix.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP} {
		if err := unix.Kill(wpid, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if _, ok := p.Running(logWriterName("ticker")); !ok {
		t.Fatal("the log writer died of a signal")
	}
	before := len(readFile(t, p.LogFile("ticker")))
	time.Sleep(300 * time.Millisecond)
	if after := len(readFile(t, p.LogFile("ticker"))); after <= before {
		t.Errorf("the log stopped growing after the signals (%d → %d bytes)", before, after)
	}
}

// TestFollowAcrossRotation follows a real daemon's log while its writer
// rotates it several times: every line is shown once, in order.
func TestFollowAcrossRotation(t *testing.T) {
	p := testDir(t, 4<<10)
	logs := filepath.Dir(p.LogFile("x"))
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Follow(ctx, logs, &out); close(done) }()
	time.Sleep(2 * FollowInterval)
	// ~30 KB at ~25 KB/s: a rotation every few looks of the follower, and
	// the first 60 lines fast, so that some generations come and go
	// between two looks.
	const lines = 300
	runToEnd(t, p, writeLines(0, 60, ""))
	runToEnd(t, p, writeLines(60, lines, "[ $((i % 10)) = 0 ] && sleep 0.04;"))
	time.Sleep(2 * FollowInterval)
	cancel()
	<-done
	if gens := generations(p.LogFile("writer")); len(gens) < 3 {
		t.Fatalf("the log was rotated into %d generations only; the test needs more", len(gens))
	}
	var nums []int
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		rest, ok := strings.CutPrefix(l, "writer | ")
		if !ok {
			t.Fatalf("a line of another log: %q", l)
		}
		if strings.HasPrefix(rest, "---- ") {
			continue
		}
		n, err := strconv.Atoi(strings.Fields(rest)[1])
		if err != nil || !strings.HasSuffix(rest, linePad) {
			t.Fatalf("a line was cut: %q", l)
		}
		nums = append(nums, n)
	}
	if !consecutive(nums, 0, lines) {
		t.Errorf("followed %d lines, want 0…%d once each in order: %v", len(nums), lines-1, nums)
	}
}

// TestOpenLogDuringRotation: a log opened for reading and then rotated
// still reads as it was, once.
func TestOpenLogDuringRotation(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "k.log")
	for i, body := range []string{"c\n", "b\n", "a\n"} {
		if err := os.WriteFile(Generation(log, i), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, err := OpenLog(log)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A rotation now: .2 → .3, .1 → .2, the log → .1, a new log.
	for i := 2; i >= 0; i-- {
		if err := os.Rename(Generation(log, i), Generation(log, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(log, []byte("d\n"), 0o600)
	if data, _ := io.ReadAll(r); string(data) != "a\nb\nc\n" {
		t.Errorf("read %q, want the log as it was when opened", data)
	}
	if _, err := OpenLog(filepath.Join(dir, "none.log")); !os.IsNotExist(err) {
		t.Errorf("OpenLog of no log: %v, want not-exist", err)
	}
}

// TestLogMark: what a log got after a mark reads whole across rotations,
// and nothing from before it.
func TestLogMark(t *testing.T) {
	p := testDir(t, 4<<10)
	log := p.LogFile("writer")
	none := MarkLog(log)
	runToEnd(t, p, writeLines(0, 10, ""))
	if got := marked(t, none); !consecutive(got, 0, 10) {
		t.Errorf("since a mark before the log was made: %v", got)
	}
	m := MarkLog(log)
	defer m.Close()
	runToEnd(t, p, writeLines(10, 150, "")) // ~14 KB: three rotations
	if gens := generations(log); len(gens) != 3 {
		t.Fatalf("generations %v, want 3", gens)
	}
	if got := marked(t, m); !consecutive(got, 10, 150) {
		t.Errorf("since the mark: %d lines %v…, want 10…149", len(got), got[:min(len(got), 5)])
	}
	// A mark whose file was dropped: its rest, then what is kept.
	runToEnd(t, p, writeLines(150, 300, ""))
	got := marked(t, m)
	i := 1
	for i < len(got) && got[i] == got[i-1]+1 {
		i++
	}
	if len(got) == 0 || got[0] != 10 || i == len(got) || !consecutive(got[i:], got[i], 300) {
		t.Errorf("since a mark rotated away: %v, want the marked file's rest from 10, then the kept generations up to 299", got)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return data
}

// TestOneWriterPerLog: a daemon that left a child holding its output
// keeps its writer alive after it exits; starting the daemon again
// stops that writer first, so two writers never rotate one log.
func TestOneWriterPerLog(t *testing.T) {
	p := testDir(t, 0)
	// The orphan: a sleep told apart by its odd duration.
	marker := fmt.Sprintf("30.%d", os.Getpid())
	proc := Process{Name: "parent", Argv: []string{"/bin/sh", "-c", "sleep " + marker + " & echo first"}}
	t.Cleanup(func() {
		for _, pid := range Processes(func(argv []string) bool { return slices.Equal(argv, []string{"sleep", marker}) }) {
			KillWait(context.Background(), pid, 0)
		}
	})
	if _, _, err := p.Start(proc); err != nil {
		t.Fatal(err)
	}
	first, ok := p.LogWriterRunning("parent")
	if !ok {
		t.Fatal("no log writer")
	}
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, ok := p.Running("parent")
		return !ok, nil
	})
	if err != nil {
		t.Fatal("the daemon did not exit")
	}
	if _, ok := p.LogWriterRunning("parent"); !ok {
		t.Fatal("the writer ended though the daemon's child holds its pipe: the test shows nothing")
	}
	proc.Argv = []string{"/bin/sh", "-c", "echo second; exec sleep 30"}
	if _, _, err := p.Start(proc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background(), "parent", time.Second) })
	second, ok := p.LogWriterRunning("parent")
	if !ok || second == first {
		t.Fatalf("log writer %d, %v after the restart; the first was %d", second, ok, first)
	}
	writers := Processes(func(argv []string) bool {
		return len(argv) > 2 && argv[1] == logWriterArg && argv[2] == p.LogFile("parent")
	})
	if len(writers) != 1 {
		t.Errorf("log writers of one log: %v", writers)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		data := string(readFile(t, p.LogFile("parent")))
		return strings.Contains(data, "first\n") && strings.Contains(data, "second\n"), nil
	})
	if err != nil {
		t.Errorf("the log lacks a start's output: %q", readFile(t, p.LogFile("parent")))
	}
}
