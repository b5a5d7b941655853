package loadbalancer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/supervise"
)

// DefaultBinary is Debian's haproxy.
const DefaultBinary = "/usr/sbin/haproxy"

// ProcessName names HAProxy's pid file and log in its supervise.Dir
// (run/haproxy.pid, logs/haproxy.log).
const ProcessName = "haproxy"

// ErrNoHAProxy is Check's error when the binary is missing (preflight's
// question, not a config's fault).
var ErrNoHAProxy = errors.New("haproxy is not installed")

// logTailLines is how much of HAProxy's log an error quotes.
const logTailLines = 15

// LB is one cluster's HAProxy: what its config says, where the file is,
// and the supervise.Dir that runs it.
type LB struct {
	Config Config
	// File is haproxy.cfg.
	File  string
	Procs supervise.Dir
	// Binary is DefaultBinary when empty.
	Binary string
}

func (l LB) binary() string {
	if l.Binary != "" {
		return l.Binary
	}
	return DefaultBinary
}

// API is the runtime API of l's HAProxy.
func (l LB) API() API { return API{Socket: l.Config.StatsSocket} }

// Action is what Apply did.
type Action string

const (
	// Started: HAProxy was not running; now it serves.
	Started Action = "started"
	// Reloaded: a new worker serves the new file.
	Reloaded Action = "reloaded"
	// Unchanged: it was serving the file already.
	Unchanged Action = "unchanged"
)

// Apply makes the running HAProxy serve l.Config: it writes the file
// (checked by haproxy first), then starts HAProxy, or reloads it when
// the file changed since HAProxy last took it up, and waits until it
// serves.
func (l LB) Apply(ctx context.Context) (Action, error) {
	if _, err := l.Write(ctx); err != nil {
		return Unchanged, err
	}
	if _, running := l.Procs.Running(ProcessName); !running {
		if _, _, err := l.Start(ctx); err != nil {
			return Unchanged, err
		}
		return Started, nil
	}
	if _, err := os.Stat(l.pendingFile()); err == nil {
		return Reloaded, l.Reload(ctx)
	}
	return Unchanged, l.waitServing(ctx)
}

// pendingFile exists while l.File holds what HAProxy has not taken up:
// Write makes it before it replaces the file, a successful Start or
// Reload removes it, so a reload that was interrupted or failed is done
// by the next Apply.
func (l LB) pendingFile() string { return l.File + ".pending" }

func (l LB) tookUp() error {
	if err := os.Remove(l.pendingFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Write renders l.Config into l.File unless it holds those bytes
// already, and reports whether it changed. The new file is checked with
// `haproxy -c` before it replaces the old one, so a config HAProxy
// refuses never becomes the one a restart would read.
func (l LB) Write(ctx context.Context) (bool, error) {
	data, err := l.Config.Render()
	if err != nil {
		return false, err
	}
	if old, err := os.ReadFile(l.File); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	dir := filepath.Dir(l.File)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	// The candidate's name is in haproxy's messages: it says what it is.
	candidate, err := os.CreateTemp(dir, filepath.Base(l.File)+".new-*")
	if err != nil {
		return false, fmt.Errorf("write %s: %w", l.File, err)
	}
	defer os.Remove(candidate.Name())
	_, err = candidate.Write(data)
	if cerr := candidate.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("write %s: %w", l.File, err)
	}
	if err := Check(ctx, l.binary(), candidate.Name()); errors.Is(err, ErrNoHAProxy) {
		return false, err
	} else if err != nil {
		return false, fmt.Errorf("%w\n%s is left as it was: change the setting haproxy names", err, l.File)
	}
	if err := atomicfile.Write(l.pendingFile(), nil, 0o644, ""); err != nil {
		return false, err
	}
	if err := atomicfile.Write(l.File, data, 0o644, ""); err != nil {
		return false, err
	}
	return true, nil
}

// Check runs `haproxy -c -f file`; a file it refuses is an error quoting
// HAProxy's own message.
func Check(ctx context.Context, binary, file string) error {
	ctx, cancel := context.WithTimeout(ctx, validateTimeout)
	defer cancel()
	c := execx.Cmd{Name: binary, Args: []string{"-c", "-f", file}}
	_, err := execx.Output(ctx, c)
	var xerr *execx.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w (no %s): install it with `apt-get install --no-install-recommends haproxy`, then `systemctl disable --now haproxy` so that only devk runs it", ErrNoHAProxy, binary)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", c, ctx.Err())
	case errors.As(err, &xerr):
		return fmt.Errorf("haproxy refuses %s:\n%s", file, haproxyMessage(xerr.Output))
	}
	return err
}

// haproxyMessage keeps HAProxy's alerts and warnings, without the
// version notices it prints first.
func haproxyMessage(out string) string {
	var keep []string
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "[NOTICE]") {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return strings.TrimSpace(out)
	}
	return strings.Join(keep, "\n")
}

// Start checks l.File with `haproxy -c` and starts HAProxy on it under
// l.Procs, unless it runs already, then waits until its frontend accepts
// connections and its runtime API answers.
func (l LB) Start(ctx context.Context) (pid int, started bool, err error) {
	if pid, ok := l.Procs.Running(ProcessName); ok {
		return pid, false, l.waitServing(ctx)
	}
	if err := l.Config.Validate(); err != nil {
		return 0, false, err
	}
	if err := Check(ctx, l.binary(), l.File); errors.Is(err, ErrNoHAProxy) {
		return 0, false, err
	} else if err != nil {
		return 0, false, fmt.Errorf("%w\nfix %s, or let Apply write it again", err, l.File)
	}
	for _, f := range []string{l.Config.StatsSocket, l.Config.StateFile} {
		if f == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return 0, false, err
		}
	}
	if c := l.Config.Chroot; c != "" {
		// Root's and empty: the workers, confined to it as nobody, can
		// neither read nor write anything there.
		if err := os.MkdirAll(c, 0o755); err != nil {
			return 0, false, err
		}
	}
	if l.Config.StateFile != "" {
		// A fresh HAProxy starts with every server as the file says: a
		// state saved by an earlier one (a server left in maint by a swap
		// that was killed) is not taken up. "1" is the format's version
		// line; an empty file or none at all makes HAProxy warn.
		if err := atomicfile.Write(l.Config.StateFile, []byte("1\n"), 0o600, ""); err != nil {
			return 0, false, err
		}
	}
	// -W: master-worker, reloaded by SIGUSR2 to the master (the pid in the
	// pid file); -db: stay in the foreground, with stdout and stderr in
	// the supervisor's log.
	pid, started, err = l.Procs.Start(supervise.Process{Name: ProcessName, Argv: []string{l.binary(), "-W", "-db", "-f", l.File}})
	if err != nil {
		return 0, false, err
	}
	if err := l.waitServing(ctx); err != nil {
		return pid, started, err
	}
	return pid, started, l.tookUp()
}

// waitServing waits until the frontend accepts a TCP connection and the
// runtime API answers, failing with the log's tail if HAProxy exits.
func (l LB) waitServing(ctx context.Context) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, startPollInterval, StartTimeout, true, func(ctx context.Context) (bool, error) {
		if _, ok := l.Procs.Running(ProcessName); !ok {
			return false, fmt.Errorf("haproxy exited; its log ends:\n%s", l.Procs.ExitedTail(ctx, ProcessName, logTailLines))
		}
		d := net.Dialer{Timeout: dialTimeout}
		conn, err := d.DialContext(ctx, "tcp", l.Config.Frontend)
		if err != nil {
			lastErr = err
			return false, nil
		}
		conn.Close()
		if _, err := l.API().Info(ctx); err != nil {
			lastErr = err
			return false, nil
		}
		return true, nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("haproxy did not serve on %s within %s: %v; its log ends:\n%s", l.Config.Frontend, StartTimeout, lastErr, l.logTail())
	}
	return err
}

func (l LB) logTail() string { return supervise.Tail(l.Procs.LogFile(ProcessName), logTailLines) }

// Reload makes the running HAProxy read l.File again: SIGUSR2 to the
// master, which checks the file, starts a new worker on the same
// listening sockets and lets the old one finish its established
// connections (a watch through it goes on until it ends). Servers'
// states are saved to Config.StateFile first, when set. It waits until
// the new worker answers on the runtime API and the old one has let go
// of the listening sockets, so that every new connection and command
// meets the new configuration.
func (l LB) Reload(ctx context.Context) error {
	pid, ok := l.Procs.Running(ProcessName)
	if !ok {
		return fmt.Errorf("haproxy is not running, so there is nothing to reload: start it (Start or Apply)")
	}
	if err := Check(ctx, l.binary(), l.File); errors.Is(err, ErrNoHAProxy) {
		return err
	} else if err != nil {
		return fmt.Errorf("%w\nthe running haproxy goes on with its old configuration; fix %s, or let Apply write it again", err, l.File)
	}
	api := l.API()
	info, err := api.Info(ctx)
	if err != nil {
		return err
	}
	oldWorker := info["Pid"]
	if l.Config.StateFile != "" {
		state, err := api.Command(ctx, "show servers state")
		if err != nil {
			return err
		}
		kept, err := keptState(state, l.Config)
		if err != nil {
			return err
		}
		if err := atomicfile.Write(l.Config.StateFile, []byte(kept), 0o600, ""); err != nil {
			return err
		}
	}
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		return fmt.Errorf("reload haproxy (pid %d): %w", pid, err)
	}
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, reloadPollInterval, ReloadTimeout, false, func(ctx context.Context) (bool, error) {
		if _, ok := l.Procs.Running(ProcessName); !ok {
			return false, fmt.Errorf("haproxy exited on reload; its log ends:\n%s", l.Procs.ExitedTail(ctx, ProcessName, logTailLines))
		}
		info, err := api.Info(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		if info["Pid"] == oldWorker {
			return false, nil
		}
		// The new worker answers, but the old one may still accept on
		// the listening sockets they share for a moment: until it has
		// closed them, a new connection or command may reach the old
		// configuration.
		shares, err := sharesSocket(oldWorker, info["Pid"])
		if err != nil {
			lastErr = err
		}
		return err == nil && !shares, nil
	})
	if poll.TimedOut(ctx, err) {
		msg := "its old worker still answers"
		if lastErr != nil {
			msg = lastErr.Error()
		}
		return fmt.Errorf("haproxy did not take up %s within %s (%s); its log ends:\n%s", l.File, ReloadTimeout, msg, l.logTail())
	}
	if err != nil {
		return err
	}
	return l.tookUp()
}

// sharesSocket reports whether process old holds a socket that process
// cur holds too. A new worker takes its listening sockets over from the
// old one (through the master), and those are the only sockets two
// workers share; the old worker closes them when it soft-stops and keeps
// only its established connections. A process that is gone shares none.
func sharesSocket(old, cur string) (bool, error) {
	oldSockets, err := sockets(old)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	curSockets, err := sockets(cur)
	if err != nil {
		return false, err
	}
	for s := range oldSockets {
		if curSockets[s] {
			return true, nil
		}
	}
	return false, nil
}

// sockets is the set of sockets ("socket:[inode]") pid has open.
func sockets(pid string) (map[string]bool, error) {
	dir := filepath.Join("/proc", pid, "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range ents {
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(link, "socket:") {
			out[link] = true
		}
	}
	return out, nil
}

// Stop ends HAProxy (SIGTERM to the master, which ends its workers and
// their connections); it reports whether it was running.
func (l LB) Stop(ctx context.Context) (bool, error) {
	return l.Procs.Stop(ctx, ProcessName, StopGrace)
}

// keptState is the part of `show servers state` the new worker is to
// take up: the servers c still has at the same address. HAProxy restores
// a saved server's address too, over the config's, so a server whose
// address changed under the same name (or a new one) must start from the
// config alone.
func keptState(state string, c Config) (string, error) {
	want := map[string]netip.AddrPort{}
	for _, b := range c.Backends {
		ap, err := parseAddr(b.Address)
		if err != nil {
			return "", err
		}
		want[b.Name] = ap
	}
	lines := strings.Split(strings.TrimSpace(state), "\n")
	if len(lines) < 2 || lines[0] != "1" || !strings.HasPrefix(lines[1], "# ") {
		return "", fmt.Errorf("haproxy show servers state: not the version 1 format (%q)", state)
	}
	header := strings.Fields(strings.TrimPrefix(lines[1], "# "))
	col := map[string]int{}
	for i, n := range header {
		col[n] = i
	}
	for _, n := range []string{"be_name", "srv_name", "srv_addr", "srv_port"} {
		if _, ok := col[n]; !ok {
			return "", fmt.Errorf("haproxy show servers state: no %s column in its header %q", n, lines[1])
		}
	}
	out := lines[:2:2]
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) != len(header) || f[col["be_name"]] != BackendName {
			continue
		}
		ap, ok := want[f[col["srv_name"]]]
		addr, err := netip.ParseAddr(f[col["srv_addr"]])
		if !ok || err != nil || addr != ap.Addr() || f[col["srv_port"]] != strconv.Itoa(int(ap.Port())) {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n") + "\n", nil
}
