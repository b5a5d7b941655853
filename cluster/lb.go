package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"

	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/phase"
)

// loadBalancer is the HAProxy in front of an HA cluster's API servers:
// listening on the control-plane endpoint (the host's bridge address),
// one server per control-plane node in cluster.json, named by its node.
// A node being joined is in it from its register phase on; its checks
// fail until its API server is ready, so HAProxy sends it nothing before.
func (c *Cluster) loadBalancer() loadbalancer.LB {
	lp := c.Files.LoadBalancer()
	var backends []loadbalancer.Backend
	for _, n := range c.Config.ControlPlanes() {
		if n.Leaving {
			continue // its API server may be gone: node remove took it out
		}
		backends = append(backends, loadbalancer.Backend{Name: n.Name, Address: net.JoinHostPort(n.IP, strconv.Itoa(c.Config.Ports.APIServer))})
	}
	return loadbalancer.LB{
		Config: loadbalancer.Config{
			Frontend:    c.Config.ControlPlaneEndpoint,
			Backends:    backends,
			StatsSocket: filepath.Join(lp.Run(), "admin.sock"),
			StateFile:   filepath.Join(lp.Run(), "servers.state"),
			// Only the cluster's bridge, and only the nodes and the host
			// (whose connections to the bridge address come from it).
			Interface: c.Config.Network.HostBridge,
			Sources:   c.nodeSources(),
			User:      loadbalancer.UnprivilegedUser,
			Group:     loadbalancer.UnprivilegedGroup,
			Chroot:    filepath.Join(lp.Dir, "empty"),
		},
		File:  filepath.Join(lp.Dir, "haproxy.cfg"),
		Procs: lp.Procs(),
	}
}

// nodeSources is the cluster's node subnet, whose addresses are the
// nodes' and the host's bridge address: who may use the load balancer.
func (c *Cluster) nodeSources() []netip.Prefix {
	p, err := netip.ParsePrefix(c.Config.Network.Subnet)
	if err != nil {
		return nil // cluster.json's subnet was validated as it was read
	}
	return []netip.Prefix{p.Masked()}
}

// haIf runs a phase only on a cluster with a load balancer.
func haIf(c *Cluster) (bool, string) {
	if !c.Config.HA() {
		return false, "one control-plane node: clients talk to its API server (--control-planes 2 or more gives a new cluster a load balancer)"
	}
	return true, ""
}

// runLoadBalancer starts HAProxy, or reloads it when its servers changed,
// and puts back every API server a killed swap left out of it.
func (c *Cluster) runLoadBalancer(ctx context.Context) (phase.Outcome, error) {
	lb := c.loadBalancer()
	act, err := lb.Apply(ctx)
	if err != nil {
		return phase.Done, err
	}
	back, err := putBackTakenOut(ctx, lb.API())
	if err != nil {
		return phase.Done, err
	}
	out := phase.ChangedIf(act != loadbalancer.Unchanged || len(back) > 0, "%s on %s, %d API servers", act, lb.Config.Frontend, len(lb.Config.Backends))
	if len(back) > 0 {
		out.Detail += "; put back " + strings.Join(back, ", ")
	}
	return out, nil
}

// takenOut says whether HAProxy's status of a server is one devk set to
// take it out of load balancing (drain, maint), not one its checks gave.
func takenOut(status string) bool {
	return strings.HasPrefix(status, "DRAIN") || strings.HasPrefix(status, "MAINT")
}

// putBackTakenOut sets every API server HAProxy holds in drain or maint
// ready again: one a rolling swap or a node removal killed while it was
// out left so (HAProxy keeps the state across reloads). Its checks then
// decide whether it gets traffic, as after a swap's own put-back. It
// returns "<node> (was <status>)" for each.
func putBackTakenOut(ctx context.Context, api loadbalancer.API) ([]string, error) {
	stats, err := api.Stats(ctx)
	if err != nil {
		return nil, err
	}
	var back []string
	for _, s := range stats {
		if s.Proxy != loadbalancer.BackendName || s.Server == "BACKEND" || !takenOut(s.Status) {
			continue
		}
		if err := api.SetState(ctx, loadbalancer.BackendName, s.Server, loadbalancer.Ready); err != nil {
			return back, err
		}
		back = append(back, fmt.Sprintf("%s (was %s)", s.Server, strings.Fields(s.Status)[0]))
	}
	return back, nil
}

// downLoadBalancer stops HAProxy.
func (c *Cluster) downLoadBalancer(ctx context.Context) (phase.Outcome, error) {
	stopped, err := c.loadBalancer().Stop(ctx)
	if err != nil {
		return phase.Done, err
	}
	if !stopped {
		return phase.Unchanged("not running"), nil
	}
	return phase.Changed("stopped"), nil
}

// ControlPlaneNodes are the cluster's control-plane nodes, node 0 first,
// as a rolling swap and certs renew go through them: behind HAProxy,
// TakeOut and PutBack are TakeOutAPIServer and PutBackAPIServer of the
// node; Relist is left to the swap.
func (c *Cluster) ControlPlaneNodes() ([]layout.ControlPlaneNode, error) {
	var out []layout.ControlPlaneNode
	for _, cp := range c.Config.ControlPlanes() {
		if cp.Leaving {
			continue // being removed: nothing to swap there
		}
		n, err := c.nodeNamed(cp.Name)
		if err != nil {
			return nil, err
		}
		name := n.Name()
		e := layout.ControlPlaneNode{Name: name, Node: n.Files.ControlPlane(c.Config, n.Net)}
		if c.Config.HA() {
			e.TakeOut = func(ctx context.Context) error { return c.TakeOutAPIServer(ctx, name) }
			e.PutBack = func(ctx context.Context, untilUp bool) error { return c.PutBackAPIServer(ctx, name, untilUp) }
		}
		out = append(out, e)
	}
	return out, nil
}

// swapIdleWait bounds the wait, once a swap took an API server out of
// HAProxy, for the requests it serves to end: short requests take
// milliseconds; watches and HTTP/2 connections end only when the old
// API server shuts down gracefully (it tells its clients to go).
const swapIdleWait = 2 * time.Second

// upTimeout bounds the wait for HAProxy's checks to pass on an API
// server put back or joined (its /readyz passed already: a check
// interval or two); upPoll is how often that wait asks HAProxy.
const (
	upTimeout = time.Minute
	upPoll    = 100 * time.Millisecond
)

// drainAPIServer stops HAProxy giving node's API server new connections
// (drain) and waits, at most within, for those it has to end; the
// connections still open then are left to the API server's graceful
// shutdown.
func (c *Cluster) drainAPIServer(ctx context.Context, node string, within time.Duration) error {
	api := c.loadBalancer().API()
	if err := api.SetState(ctx, loadbalancer.BackendName, node, loadbalancer.Drain); err != nil {
		return err
	}
	if err := api.WaitIdleWithin(ctx, loadbalancer.BackendName, node, within); err != nil && ctx.Err() == nil {
		c.Reporter.Debugf("%v", err)
	}
	return ctx.Err()
}

// waitAPIServerUp waits, at most upTimeout, until HAProxy's checks pass
// on node's API server.
func (c *Cluster) waitAPIServerUp(ctx context.Context, node string) error {
	api := c.loadBalancer().API()
	var status string
	err := wait.PollUntilContextTimeout(ctx, upPoll, upTimeout, true, func(ctx context.Context) (bool, error) {
		s, err := api.Server(ctx, loadbalancer.BackendName, node)
		if err != nil {
			return false, err
		}
		status = s.Status
		return strings.HasPrefix(s.Status, "UP"), nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("HAProxy still says %s for the API server of %s after %s: its /readyz fails? see its log under %s", status, node, upTimeout, c.FirstNode().Files.Logs())
	}
	return err
}

// TakeOutAPIServer takes node's API server out of HAProxy for a swap
// (drainAPIServer, at most swapIdleWait).
func (c *Cluster) TakeOutAPIServer(ctx context.Context, node string) error {
	return c.drainAPIServer(ctx, node, swapIdleWait)
}

// PutBackAPIServer lets HAProxy give node's API server connections again
// (state ready, unless it is UP already: a server taken out and then
// down may show only DOWN); with untilUp it then waits until
// HAProxy's checks pass on it, so that the next node is taken out only
// once this one serves. Without, it only clears the state (a swap
// resuming one killed with a node out: that node's checks decide whether
// it gets traffic, and a broken API server must not stop the swap that
// would mend it).
func (c *Cluster) PutBackAPIServer(ctx context.Context, node string, untilUp bool) error {
	api := c.loadBalancer().API()
	s, err := api.Server(ctx, loadbalancer.BackendName, node)
	if err != nil {
		return err
	}
	if strings.HasPrefix(s.Status, "UP") {
		return nil
	}
	if err := api.SetState(ctx, loadbalancer.BackendName, node, loadbalancer.Ready); err != nil {
		return err
	}
	if !untilUp {
		return nil
	}
	return c.waitAPIServerUp(ctx, node)
}
