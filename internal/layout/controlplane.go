package layout

import (
	"context"
	"fmt"
)

// ControlPlaneNode is one control-plane node of a cluster as a job that
// visits them one at a time (a rolling swap, certs renew) sees it: its
// name, its layout, and behind a load balancer how to take its API
// server out and put it back. cluster's ControlPlaneNodes makes them;
// swap and certs, which do not import cluster, go through them.
type ControlPlaneNode struct {
	// Name is the node's (its kubelet's) name; "" for a kubeadm node
	// given by its directories alone.
	Name string
	// Node is where its manifests, PKI, kubeconfigs, CRI socket and
	// kubelet root are.
	Node Node
	// Relist, when set, restarts its kubelet so that it lists its pods
	// afresh (swap's Options.Relist); nil: never.
	Relist func(ctx context.Context) error
	// TakeOut, when set, stops the load balancer sending the node's API
	// server new connections and waits for its requests in flight; nil
	// on a cluster without one.
	TakeOut func(ctx context.Context) error
	// PutBack puts it back; with untilUp it waits until the load
	// balancer's checks pass on it again. PutBack of a node that is in
	// already does nothing.
	PutBack func(ctx context.Context, untilUp bool) error
}

// EnsureIn puts the node's API server back into the load balancer, if it
// is behind one, without waiting: what a rolling job does first to each
// node, since one that was killed may have left it out (its checks decide
// whether it then gets traffic).
func (n ControlPlaneNode) EnsureIn(ctx context.Context) error {
	if n.PutBack == nil {
		return nil
	}
	if err := n.PutBack(ctx, false); err != nil {
		return fmt.Errorf("node %s: put its API server back into the load balancer: %w", n.Name, err)
	}
	return nil
}
