// Package supervise runs devk's daemons (containerd, the kubelet, the
// embedded registry) without systemd: each runs in its own session with
// its output written by a log writer to a size-capped, rotated log file
// (logwriter.go), and is known by a pid file that records its pid and
// start time, so a recycled pid is never taken for it.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/crilog"
)

// Process is a daemon devk starts and supervises by pid file: containerd,
// the kubelet, the embedded registry. It runs in its own session (a
// Ctrl-C in devk's terminal does not reach it), with stdout and stderr
// going to its log writer.
type Process struct {
	// Name is containerd, kubelet or registry; files are run/<name>.pid and
	// logs/<name>.log.
	Name string
	Argv []string
	Env  []string
}

// Dir is where the pid files and logs of a set of processes are, and the
// directory they run in.
type Dir struct {
	// PIDFile and LogFile name a process's files.
	PIDFile, LogFile func(name string) string
	// Work is the processes' working directory.
	Work string
	// LogMaxBytes and LogGenerations bound each log (0: LogMaxBytes and
	// LogGenerations).
	LogMaxBytes    int64
	LogGenerations int
}

// procStat is the process's start time in clock ticks since boot
// (field 22 of /proc/<pid>/stat), which with the pid names the process
// unambiguously even after the pid is reused, and whether it is a
// zombie (state Z: gone, not yet reaped).
func procStat(pid int) (start uint64, zombie bool, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false, err
	}
	return parseStat(string(data))
}

func parseStat(stat string) (start uint64, zombie bool, err error) {
	// comm may hold spaces and parentheses: fields start after the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false, fmt.Errorf("malformed stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); start time is field 22.
	if len(f) < 20 {
		return 0, false, fmt.Errorf("malformed stat %q", stat)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0] == "Z", err
}

// Running returns the pid of the named process if its pid file names a
// live process that is the one devk started.
func (p Dir) Running(name string) (int, bool) {
	data, err := os.ReadFile(p.PIDFile(name))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, false
	}
	if !(ProcessID{PID: pid, Start: start}).Running() {
		return 0, false
	}
	return pid, true
}

// Exited says whether the named process exited on its own: its pid file
// is there (Stop removes it) but names no live process devk started.
func (p Dir) Exited(name string) bool {
	if _, err := os.Stat(p.PIDFile(name)); err != nil {
		return false
	}
	_, ok := p.Running(name)
	return !ok
}

// ProcessID names one process as a pid file does: its pid and start
// time, so that a recycled pid is never taken for it.
type ProcessID struct {
	PID int `json:"pid"`
	// Start is its start time in clock ticks since boot (procStat).
	Start uint64 `json:"start"`
}

// Identify is the ProcessID of the process that is pid now.
func Identify(pid int) (ProcessID, error) {
	start, _, err := procStat(pid)
	if err != nil {
		return ProcessID{}, err
	}
	return ProcessID{PID: pid, Start: start}, nil
}

// Running says whether the process still runs: not gone, not a zombie,
// its pid not taken by another.
func (id ProcessID) Running() bool {
	if id.PID <= 0 {
		return false
	}
	now, zombie, err := procStat(id.PID)
	return err == nil && now == id.Start && !zombie
}

// Stop ends the process if it still runs (KillWait, given grace); it
// reports whether it did run.
func (id ProcessID) Stop(ctx context.Context, grace time.Duration) (bool, error) {
	if !id.Running() {
		return false, nil
	}
	return true, KillWait(ctx, id.PID, grace)
}

// Start starts p unless it is running already; it reports whether it
// started it.
func (p Dir) Start(proc Process) (pid int, started bool, err error) {
	if pid, ok := p.Running(proc.Name); ok {
		// One an older devk started may still append to a 0644 log.
		_ = os.Chmod(p.LogFile(proc.Name), LogFileMode)
		return pid, false, nil
	}
	for _, d := range []string{filepath.Dir(p.PIDFile(proc.Name)), filepath.Dir(p.LogFile(proc.Name))} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, false, err
		}
	}
	closeInherited() // before the log writer starts, which must not keep them either
	logf, err := p.startLogWriter(proc.Name)
	if err != nil {
		return 0, false, err
	}
	// Closed here once the daemon has it: the writer ends when the daemon
	// (and whatever keeps its output) does.
	defer logf.Close()
	fmt.Fprintf(logf, "---- %s devk starts: %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(proc.Argv, " "))
	// Not CommandContext: the daemon must outlive this devk process.
	cmd := exec.Command(proc.Argv[0], proc.Argv[1:]...)
	cmd.Env = append(os.Environ(), proc.Env...)
	cmd.Dir = p.Work
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, false, fmt.Errorf("start %s: %w", proc.Name, err)
	}
	pid = cmd.Process.Pid
	start, _, err := procStat(pid)
	if err != nil {
		_ = cmd.Process.Kill()
		return 0, false, fmt.Errorf("start %s: it exited at once; see %s", proc.Name, p.LogFile(proc.Name))
	}
	if err := atomicfile.Write(p.PIDFile(proc.Name), fmt.Appendf(nil, "%d %d\n", pid, start), 0o644, ""); err != nil {
		_ = cmd.Process.Kill()
		return 0, false, err
	}
	// Reap it if it dies while devk still runs, so Running sees it gone.
	go func() { _ = cmd.Wait() }()
	return pid, true, nil
}

// Stop ends the named process: SIGTERM, then SIGKILL after grace; then
// its log writer, once it wrote what the process left. It reports
// whether there was a process to stop.
func (p Dir) Stop(ctx context.Context, name string, grace time.Duration) (bool, error) {
	pid, ok := p.Running(name)
	if !ok {
		_ = os.Remove(p.PIDFile(name))
		return false, p.stopLogWriter(ctx, name)
	}
	if err := KillWait(ctx, pid, grace); err != nil {
		return true, fmt.Errorf("stop %s (pid %d): %w", name, pid, err)
	}
	if err := os.Remove(p.PIDFile(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, err
	}
	return true, p.stopLogWriter(ctx, name)
}

const (
	// KillTimeout bounds the wait for a process to go after SIGKILL.
	KillTimeout = 5 * time.Second
	// killPollInterval is how often KillWait looks.
	killPollInterval = 20 * time.Millisecond
)

// KillWait sends SIGTERM, waits up to grace for the process to go, then
// sends SIGKILL and waits up to KillTimeout.
func KillWait(ctx context.Context, pid int, grace time.Duration) error {
	gone, err := goneCheck(pid)
	if err != nil {
		return nil // gone already
	}
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGTERM, grace}, {syscall.SIGKILL, KillTimeout}} {
		if err := syscall.Kill(pid, step.sig); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return nil
			}
			return err
		}
		err := wait.PollUntilContextTimeout(ctx, killPollInterval, step.wait, true, gone)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !wait.Interrupted(err):
			return err
		}
	}
	return fmt.Errorf("still running %s after SIGKILL", KillTimeout)
}

// goneCheck is a poll condition that is done once the process that is
// pid now is gone (a zombie is gone); an error if it is gone already.
func goneCheck(pid int) (wait.ConditionWithContextFunc, error) {
	start, _, err := procStat(pid)
	if err != nil {
		return nil, err
	}
	return func(context.Context) (bool, error) {
		s, zombie, err := procStat(pid)
		return err != nil || s != start || zombie, nil
	}, nil
}

// waitGone waits up to timeout for the process pid to go by itself.
func waitGone(ctx context.Context, pid int, timeout time.Duration) error {
	gone, err := goneCheck(pid)
	if err != nil {
		return nil
	}
	return wait.PollUntilContextTimeout(ctx, killPollInterval, timeout, true, gone)
}

// Processes lists pids whose command line satisfies match.
func Processes(match func(argv []string) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if argv := Argv(pid); argv != nil && match(argv) {
			out = append(out, pid)
		}
	}
	return out
}

// Argv is a process's command line, nil if it cannot be read.
func Argv(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// Tail returns the last n lines of a log file (a supervised process's,
// or a container's without the CRI's line prefixes), taking the rest
// from the newest rotated generation when the log was just rotated.
func Tail(path string, n int) string {
	lines, _ := crilog.Tail(path, n)
	if len(lines) < n {
		older, _ := crilog.Tail(Generation(path, 1), n-len(lines))
		lines = append(older, lines...)
	}
	return strings.Join(lines, "\n")
}

// closeInherited marks every file descriptor above stderr close-on-exec.
// Go opens its own that way, but devk may have inherited others (`flock
// LOCK devk up` passes the lock's): a daemon must not keep them, and with
// them a lock, for as long as it runs.
func closeInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
