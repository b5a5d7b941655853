package cluster

import (
	"context"
	"net"
	"path/filepath"
	"strconv"

	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/phase"
)

// loadBalancer is the HAProxy in front of an HA cluster's API servers:
// listening on the control-plane endpoint (the host's bridge address),
// one server per control-plane node in cluster.json, named by its node.
// A node being joined is in it from its register phase on; its checks
// fail until its API server is ready, so HAProxy sends it nothing before.
func (c *Cluster) loadBalancer() loadbalancer.LB {
	lp := c.Paths.LoadBalancer()
	var backends []loadbalancer.Backend
	for _, n := range c.Config.ControlPlanes() {
		backends = append(backends, loadbalancer.Backend{Name: n.Name, Address: net.JoinHostPort(n.IP, strconv.Itoa(c.Config.Ports.APIServer))})
	}
	return loadbalancer.LB{
		Config: loadbalancer.Config{
			Frontend:    c.Config.ControlPlaneEndpoint,
			Backends:    backends,
			StatsSocket: filepath.Join(lp.Run(), "admin.sock"),
			StateFile:   filepath.Join(lp.Run(), "servers.state"),
		},
		File:  filepath.Join(lp.Dir, "haproxy.cfg"),
		Procs: lp.Procs(),
	}
}

// haIf runs a phase only on a cluster with a load balancer.
func haIf(c *Cluster) (bool, string) {
	if !c.Config.HA() {
		return false, "one control-plane node: clients talk to its API server (--control-planes 2 or more gives a new cluster a load balancer)"
	}
	return true, ""
}

// runLoadBalancer starts HAProxy, or reloads it when its servers changed.
func (c *Cluster) runLoadBalancer(ctx context.Context) (phase.Outcome, error) {
	lb := c.loadBalancer()
	act, err := lb.Apply(ctx)
	if err != nil {
		return phase.Done, err
	}
	out := phase.Unchanged("%s on %s, %d API servers", act, lb.Config.Frontend, len(lb.Config.Backends))
	out.Changed = act != loadbalancer.Unchanged
	return out, nil
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
