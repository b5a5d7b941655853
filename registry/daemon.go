package registry

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/supervise"
)

// ProcessName is devk's registry as a supervised process: its pid file
// and log are run/registry.pid and logs/registry.log in the home.
const ProcessName = "registry"

// How long devk waits for the registry and forwarders it runs, and how
// often it looks.
const (
	// startTimeout bounds the wait for a registry devk started, or one
	// behind a forwarder it started, to answer.
	startTimeout = 15 * time.Second
	pollInterval = 50 * time.Millisecond
	// probeTimeout bounds one look at a registry's /v2/.
	probeTimeout = time.Second
	// stopGrace is how long the registry or a forwarder gets to stop
	// before it is killed, when devk restarts it or down stops it.
	stopGrace = 5 * time.Second
	// logTailLines is how much of a process's log an error quotes.
	logTailLines = 15
)

// probeClient asks a registry whether it answers as devk's other
// clients ask: never through the environment's proxy to this machine's
// own networks (kube.Proxy).
var probeClient = &http.Client{Transport: &http.Transport{Proxy: kube.Proxy}}

// Answers reports whether a registry answers at host:port.
func Answers(ctx context.Context, hostPort string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+"/v2/", nil)
	if err != nil {
		return false
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized
}

// Daemon is devk's registry on the host's loopback: `devk registry
// serve`, supervised under a DEVK_HOME and shared by every cluster
// there, serving the home's store; writes need the home's credential.
type Daemon struct {
	// Home is the resolved DEVK_HOME.
	Home string
	// Addr is the host:port it serves on.
	Addr string
	// Exe is the devk binary that runs it; empty means this process's
	// own.
	Exe string
}

// Paths is where it keeps its pid file and log ($DEVK_HOME/run and
// $DEVK_HOME/logs), its store and its credential.
func (d Daemon) Paths() layout.Home { return layout.HomeFiles(d.Home) }

// argv is the command line that serves d.
func (d Daemon) argv() ([]string, error) {
	exe, err := devkExe(d.Exe)
	if err != nil {
		return nil, fmt.Errorf("find devk's own binary to run the registry: %w", err)
	}
	p := d.Paths()
	return []string{exe, "registry", "serve", "--addr", d.Addr, "--root", p.RegistryRoot(), "--credential", p.RegistryCredential()}, nil
}

// devkExe is exe, or this process's own binary when empty.
func devkExe(exe string) (string, error) {
	if exe != "" {
		return exe, nil
	}
	return os.Executable()
}

// EnsureRunning starts the registry unless devk's runs already, and
// waits until it answers. One an older devk started (one that took
// writes without a credential) is restarted with this one's arguments;
// a process that serves another address or store, or a registry devk did
// not start answering on Addr, is an error: any local user could serve
// the images every pod runs. It returns the registry's pid (also with an
// error once the process runs, when it does not answer) and whether it
// started it.
func (d Daemon) EnsureRunning(ctx context.Context) (pid int, started bool, err error) {
	argv, err := d.argv()
	if err != nil {
		return 0, false, err
	}
	procs, root := d.Paths().Procs(), d.Paths().RegistryRoot()
	if pid, ok := procs.Running(ProcessName); ok {
		// The pid file names the process devk started; it must still
		// serve this address from this DEVK_HOME's store.
		running := supervise.Argv(pid)
		if !slices.Contains(running, root) || !slices.Contains(running, d.Addr) {
			return 0, false, fmt.Errorf("the registry process %d named by %s does not serve %s from %s (its command line: %q): stop it and run up again", pid, d.Paths().PIDFile(ProcessName), d.Addr, root, strings.Join(running, " "))
		}
		if len(running) != 0 && slices.Equal(running[1:], argv[1:]) {
			return pid, false, nil
		}
		// Started by an older devk: serve on with this one's arguments.
		if _, err := procs.Stop(ctx, ProcessName, stopGrace); err != nil {
			return 0, false, err
		}
	}
	if Answers(ctx, d.Addr) {
		// Not devk's (no live pid file here). Only the user can say it
		// is trusted.
		return 0, false, fmt.Errorf("a registry that devk did not start answers on %s: stop it, or pass --registry %s to use it (devk starts its own there otherwise)", d.Addr, d.Addr)
	}
	pid, _, err = procs.Start(supervise.Process{Name: ProcessName, Argv: argv})
	if err != nil {
		return 0, false, err
	}
	err = wait.PollUntilContextTimeout(ctx, pollInterval, startTimeout, true, func(ctx context.Context) (bool, error) {
		if Answers(ctx, d.Addr) {
			return true, nil
		}
		if _, ok := procs.Running(ProcessName); !ok {
			return false, fmt.Errorf("the registry exited; its log ends:\n%s", procs.ExitedTail(ctx, ProcessName, logTailLines))
		}
		return false, nil
	})
	if poll.TimedOut(ctx, err) {
		return pid, true, fmt.Errorf("the registry did not answer on %s within %s; its log ends:\n%s", d.Addr, startTimeout, supervise.Tail(d.Paths().LogFile(ProcessName), logTailLines))
	}
	return pid, true, err
}

// Stop stops the registry and removes its run dir (if empty) and logs
// dir.
func (d Daemon) Stop(ctx context.Context) error {
	p := d.Paths()
	if _, err := p.Procs().Stop(ctx, ProcessName, stopGrace); err != nil {
		return err
	}
	os.Remove(p.Run())
	os.RemoveAll(p.Logs())
	return nil
}
