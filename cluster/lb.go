package cluster

import (
	"context"

	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
)

// loadBalancer is the HAProxy in front of an HA cluster's API servers
// (loadbalancer.ForCluster).
func (c *Cluster) loadBalancer() loadbalancer.LB {
	return loadbalancer.ForCluster(c.Config, c.Files.LoadBalancer())
}

// haIf runs a phase only on a cluster with a load balancer.
func haIf(c *Cluster) (bool, string) {
	if !c.Config.HA() {
		return false, "one control-plane node: clients talk to its API server (--control-planes 2 or more gives a new cluster a load balancer)"
	}
	return true, ""
}

// ConfigureLoadBalancer and downLoadBalancer are the load-balancer phases.
func (c *Cluster) ConfigureLoadBalancer(ctx context.Context) (phase.Outcome, error) {
	return c.loadBalancer().Up(ctx)
}

func (c *Cluster) downLoadBalancer(ctx context.Context) (phase.Outcome, error) {
	return c.loadBalancer().Down(ctx)
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

// TakeOutAPIServer takes node's API server out of HAProxy for a swap
// (drained, at most loadbalancer.SwapIdleWait).
func (c *Cluster) TakeOutAPIServer(ctx context.Context, node string) error {
	return c.loadBalancer().API().DrainAPIServer(ctx, node, loadbalancer.SwapIdleWait, c.Reporter.Debugf)
}

// PutBackAPIServer lets HAProxy give node's API server connections again
// (loadbalancer's PutBackAPIServer; untilUp waits until its checks pass).
func (c *Cluster) PutBackAPIServer(ctx context.Context, node string, untilUp bool) error {
	return c.loadBalancer().API().PutBackAPIServer(ctx, node, untilUp, c.FirstNode().Files.Logs())
}
