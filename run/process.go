package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/internal/supervise"
)

// process is the foreground process devk run starts in the static
// pod's place.
type process struct {
	// stopSignal is what a Ctrl-C sends it first: SIGINT, as in its own
	// terminal, unless set.
	stopSignal syscall.Signal
	cmd        *exec.Cmd
	id         supervise.ProcessID
	done       chan struct{}
	err        error // Wait's, once done is closed
}

// Exit is how the process ended.
type Exit struct {
	// Code is its exit status; -1 when a signal ended it.
	Code int `json:"code"`
	// Signal is the signal that ended it, if one did (SIGINT, …).
	Signal string `json:"signal,omitempty"`
	// Stopped says devk stopped it (Ctrl-C); else it ended by itself.
	Stopped bool `json:"stopped,omitempty"`
}

func (e Exit) String() string {
	if e.Signal != "" {
		return "killed by " + e.Signal
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// start starts argv with exactly env, in dir, its output to stdout and
// stderr. It runs in a process group of its own, so that a Ctrl-C in the
// terminal reaches devk alone (devk stops it: stop); and it is killed
// if devk dies (the parent-death signal), so that nothing holds the
// static pod's ports after a kill -9 of devk.
func start(argv, env []string, dir string, stdout, stderr io.Writer) (*process, error) {
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal is sent when the thread that started
		// the process ends: keep this one until the process has.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		p.cmd = exec.Command(argv[0], argv[1:]...)
		p.cmd.Env, p.cmd.Dir = env, dir
		if p.cmd.Env == nil {
			p.cmd.Env = []string{} // nil would mean devk's environment
		}
		p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := p.cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		// Until Wait reaps it, the process (a zombie, if it has ended
		// already) has its start time in /proc.
		p.id, _ = supervise.Identify(p.cmd.Process.Pid)
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return p, nil
}

// wait waits until the process ends. When ctx is canceled (Ctrl-C) it
// sends its process group SIGINT (or stopSignal), as a Ctrl-C in its own terminal would,
// and SIGKILL after grace, or at once on a second Ctrl-C (the cleanup
// context's end).
func (p *process) wait(ctx context.Context, stop <-chan struct{}, grace time.Duration) Exit {
	stopped := false
	select {
	case <-p.done:
	case <-stop:
		stopped = true
		sig := p.stopSignal
		if sig == 0 {
			sig = syscall.SIGINT
		}
		p.signal(sig)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			p.signal(syscall.SIGKILL)
			<-p.done
		case <-interrupt.Cleanup(ctx).Done():
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	}
	e := Exit{Stopped: stopped}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Code, e.Signal = -1, unix.SignalName(ws.Signal())
			return e
		}
		e.Code = ee.ExitCode()
	}
	return e
}

// signal sends sig to the process's group (it and what it started).
func (p *process) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}
