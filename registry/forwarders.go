package registry

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/supervise"
)

// forwarderPrefix begins every forwarder's process name.
const forwarderPrefix = "forward-"

// ForwarderName is the supervised process that relays a loopback
// registry's port to a cluster's bridge: forward-<port>.
func ForwarderName(hostPort string) string {
	_, port, _ := net.SplitHostPort(hostPort)
	return forwarderPrefix + port
}

// LoopbackHosts are the registries among refs (HOST:PORT or
// HOST:PORT/PREFIX, empty ones left out) on the host's loopback, as
// host:port each, once: a cluster's nodes pull from those through a
// forwarder.
func LoopbackHosts(refs ...string) []string {
	var out []string
	for _, reg := range refs {
		reg, _, _ = strings.Cut(reg, "/") // host:port of host:port/prefix
		if reg != "" && image.IsLoopback(reg) && !slices.Contains(out, reg) {
			out = append(out, reg)
		}
	}
	return out
}

// Forwarders are a cluster's `devk registry forward` processes, one per
// loopback registry its nodes pull from: a node is a network namespace,
// which cannot reach the host's loopback, so each such registry is
// relayed (pulls only) from the host's address on the cluster's bridge,
// by the same port.
type Forwarders struct {
	// Procs is where they are supervised: the cluster's run and logs
	// dirs.
	Procs supervise.Dir
	// Network is the cluster's: its bridge, the host's address on it,
	// and the node subnet, the only clients besides the host.
	Network layout.Network
	// Registries are the loopback registries relayed (LoopbackHosts).
	Registries []string
	// Exe is the devk binary that runs them; empty means this process's
	// own.
	Exe string
}

// Mirror is the address on the cluster's bridge that relays the loopback
// registry at hostPort.
func (f Forwarders) Mirror(hostPort string) string {
	_, port, _ := net.SplitHostPort(hostPort)
	return net.JoinHostPort(f.Network.HostIP, port)
}

// Mirrors are every registry's Mirror.
func (f Forwarders) Mirrors() []string {
	var out []string
	for _, reg := range f.Registries {
		out = append(out, f.Mirror(reg))
	}
	return out
}

// Start runs a forwarder for each registry, bound to the bridge, unless
// it runs with the same arguments (one relaying another registry or
// address is restarted), and waits until the registry answers through
// it. It returns the mirrors it started.
func (f Forwarders) Start(ctx context.Context) ([]string, error) {
	exe, err := devkExe(f.Exe)
	if err != nil {
		return nil, fmt.Errorf("find devk's own binary to run the registry forwarder: %w", err)
	}
	var started []string
	for _, reg := range f.Registries {
		name, mirror := ForwarderName(reg), f.Mirror(reg)
		nw := f.Network
		argv := []string{exe, "registry", "forward", "--addr", mirror, "--to", reg, "--device", nw.HostBridge, "--allow", nw.Subnet}
		if pid, ok := f.Procs.Running(name); ok && !slices.Equal(supervise.Argv(pid), argv) {
			// Another registry or address than this run's: restart it.
			if _, err := f.Procs.Stop(ctx, name, stopGrace); err != nil {
				return started, err
			}
		}
		_, s, err := f.Procs.Start(supervise.Process{Name: name, Argv: argv})
		if err != nil {
			return started, err
		}
		if s {
			started = append(started, mirror)
		}
		err = wait.PollUntilContextTimeout(ctx, pollInterval, startTimeout, true, func(ctx context.Context) (bool, error) {
			if _, ok := f.Procs.Running(name); !ok {
				return false, fmt.Errorf("the registry forwarder on %s exited; its log ends:\n%s", mirror, f.Procs.ExitedTail(ctx, name, logTailLines))
			}
			// Bound to the bridge, the forwarder still takes the
			// host's own connections (TestForwardOnlyFromTheBridge).
			return Answers(ctx, mirror), nil
		})
		if poll.TimedOut(ctx, err) {
			return started, fmt.Errorf("the registry %s did not answer through %s within %s; the forwarder's log ends:\n%s", reg, mirror, startTimeout, supervise.Tail(f.Procs.LogFile(name), logTailLines))
		}
		if err != nil {
			return started, err
		}
	}
	return started, nil
}

// Stop stops every forwarder supervised in f.Procs, whichever registry
// it relays; it returns how many ran.
func (f Forwarders) Stop(ctx context.Context) (int, error) {
	pids, _ := filepath.Glob(f.Procs.PIDFile(forwarderPrefix + "*"))
	n := 0
	for _, file := range pids {
		name := strings.TrimSuffix(filepath.Base(file), ".pid")
		stopped, err := f.Procs.Stop(ctx, name, stopGrace)
		if err != nil {
			return n, err
		}
		if stopped {
			n++
		}
	}
	return n, nil
}
