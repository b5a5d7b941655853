package loadbalancer

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/phase"
)

// ForCluster is the HAProxy in front of an HA cluster's API servers
// (cfg, its files in files): listening on the control-plane endpoint
// (the host's bridge address), one server per control-plane node in
// cluster.json, named by its node. A node being joined is in it from
// its register phase on; its checks fail until its API server is ready,
// so HAProxy sends it nothing before.
func ForCluster(cfg layout.Config, files layout.LoadBalancerFiles) LB {
	var backends []Backend
	for _, n := range cfg.ControlPlanes() {
		if n.Leaving {
			continue // its API server may be gone: node remove took it out
		}
		backends = append(backends, Backend{Name: n.Name, Address: net.JoinHostPort(n.IP, strconv.Itoa(cfg.Ports.APIServer))})
	}
	return LB{
		Config: Config{
			Frontend:    cfg.ControlPlaneEndpoint,
			Backends:    backends,
			StatsSocket: files.StatsSocket(),
			StateFile:   files.StateFile(),
			// Only the cluster's bridge, and only the nodes and the host
			// (whose connections to the bridge address come from it).
			Interface: cfg.Network.HostBridge,
			Sources:   nodeSources(cfg.Network.Subnet),
			User:      UnprivilegedUser,
			Group:     UnprivilegedGroup,
			Chroot:    files.Chroot(),
		},
		File:  files.Config(),
		Procs: files.Procs(),
	}
}

// nodeSources is the cluster's node subnet, whose addresses are the
// nodes' and the host's bridge address: who may use the load balancer.
func nodeSources(subnet string) []netip.Prefix {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return nil // cluster.json's subnet was validated as it was read
	}
	return []netip.Prefix{p.Masked()}
}

// TakenOut says whether HAProxy's status of a server is one devk set to
// take it out of load balancing (drain, maint), not one its checks gave.
func TakenOut(status string) bool {
	return strings.HasPrefix(status, "DRAIN") || strings.HasPrefix(status, "MAINT")
}

// PutBackTakenOut sets every API server HAProxy holds in drain or maint
// ready again: one a rolling swap or a node removal killed while it was
// out left so (HAProxy keeps the state across reloads). Its checks then
// decide whether it gets traffic, as after a swap's own put-back. It
// returns "<node> (was <status>)" for each.
func (a API) PutBackTakenOut(ctx context.Context) ([]string, error) {
	stats, err := a.Stats(ctx)
	if err != nil {
		return nil, err
	}
	var back []string
	for _, s := range stats {
		if s.Proxy != BackendName || s.Server == "BACKEND" || !TakenOut(s.Status) {
			continue
		}
		if err := a.SetState(ctx, BackendName, s.Server, Ready); err != nil {
			return back, err
		}
		back = append(back, fmt.Sprintf("%s (was %s)", s.Server, strings.Fields(s.Status)[0]))
	}
	return back, nil
}

// SwapIdleWait bounds the wait, once a swap took an API server out of
// HAProxy, for the requests it serves to end: short requests take
// milliseconds; watches and HTTP/2 connections end only when the old
// API server shuts down gracefully (it tells its clients to go).
const SwapIdleWait = 2 * time.Second

// upTimeout bounds the wait for HAProxy's checks to pass on an API
// server put back or joined (its /readyz passed already: a check
// interval or two); upPoll is how often that wait asks HAProxy.
const (
	upTimeout = time.Minute
	upPoll    = 100 * time.Millisecond
)

// DrainAPIServer stops HAProxy giving node's API server new connections
// (drain) and waits, at most within, for those it has to end; the
// connections still open then are left to the API server's graceful
// shutdown (why they are, debugf is told).
func (a API) DrainAPIServer(ctx context.Context, node string, within time.Duration, debugf func(format string, args ...any)) error {
	if err := a.SetState(ctx, BackendName, node, Drain); err != nil {
		return err
	}
	if err := a.WaitIdleWithin(ctx, BackendName, node, within); err != nil && ctx.Err() == nil {
		debugf("%v", err)
	}
	return ctx.Err()
}

// WaitAPIServerUp waits, at most upTimeout, until HAProxy's checks pass
// on node's API server; logs, where its log is, goes into the error.
func (a API) WaitAPIServerUp(ctx context.Context, node, logs string) error {
	var status string
	err := wait.PollUntilContextTimeout(ctx, upPoll, upTimeout, true, func(ctx context.Context) (bool, error) {
		s, err := a.Server(ctx, BackendName, node)
		if err != nil {
			return false, err
		}
		status = s.Status
		return strings.HasPrefix(s.Status, "UP"), nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("HAProxy still says %s for the API server of %s after %s: its /readyz fails? see its log under %s", status, node, upTimeout, logs)
	}
	return err
}

// PutBackAPIServer lets HAProxy give node's API server connections again
// (state ready, unless it is UP already: a server taken out and then
// down may show only DOWN); with untilUp it then waits until
// HAProxy's checks pass on it (WaitAPIServerUp), so that the next node is
// taken out only once this one serves. Without, it only clears the state
// (a swap resuming one killed with a node out: that node's checks decide
// whether it gets traffic, and a broken API server must not stop the
// swap that would mend it).
func (a API) PutBackAPIServer(ctx context.Context, node string, untilUp bool, logs string) error {
	s, err := a.Server(ctx, BackendName, node)
	if err != nil {
		return err
	}
	if strings.HasPrefix(s.Status, "UP") {
		return nil
	}
	if err := a.SetState(ctx, BackendName, node, Ready); err != nil {
		return err
	}
	if !untilUp {
		return nil
	}
	return a.WaitAPIServerUp(ctx, node, logs)
}

// Up is up's load-balancer phase: HAProxy started, or reloaded when its
// servers changed, and every API server a killed swap left out of it
// put back.
func (l LB) Up(ctx context.Context) (phase.Outcome, error) {
	act, err := l.Apply(ctx)
	if err != nil {
		return phase.Done, err
	}
	back, err := l.API().PutBackTakenOut(ctx)
	if err != nil {
		return phase.Done, err
	}
	out := phase.ChangedIf(act != Unchanged || len(back) > 0, "%s on %s, %d API servers", act, l.Config.Frontend, len(l.Config.Backends))
	if len(back) > 0 {
		out.Detail += "; put back " + strings.Join(back, ", ")
	}
	return out, nil
}

// Down is down's load-balancer phase: HAProxy stopped.
func (l LB) Down(ctx context.Context) (phase.Outcome, error) {
	stopped, err := l.Stop(ctx)
	if err != nil {
		return phase.Done, err
	}
	if !stopped {
		return phase.Unchanged("not running"), nil
	}
	return phase.Changed("stopped"), nil
}
