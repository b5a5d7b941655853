package swap

import (
	"context"
	"fmt"
	"slices"

	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// ControlPlaneNode is one control-plane node of a cluster with several:
// where its static pods are, and, behind a load balancer, how to take its
// API server out and put it back.
type ControlPlaneNode struct {
	// Name is the node's name (the kubelet's).
	Name string
	// Node is where it keeps its manifests, CRI socket and kubelet root.
	Node layout.Node
	// Relist restarts its kubelet (see Options.Relist); nil: never.
	Relist func(ctx context.Context) error
	// TakeOut, when set, stops the load balancer sending the node's API
	// server new connections and waits for its requests in flight.
	TakeOut func(ctx context.Context) error
	// PutBack puts it back; with untilUp it waits until the load
	// balancer's checks pass on it again. PutBack of a node that is in
	// already does nothing.
	PutBack func(ctx context.Context, untilUp bool) error
}

// runRolling swaps the static pods on each control-plane node in turn,
// as Options.ControlPlanes lists them: a job per node, each verified (by
// digest, on that node's runtime) before the next starts, so at most one
// node's control plane is down at a time. A node whose pods change is
// taken out of the load balancer before its hand-over and put back once
// its new API server is ready; its old containers stop gracefully
// (StopGrace), so clients finish on it or go elsewhere. The addons,
// kubelet and kubectl are swapped with the first node only. A node put
// out by a rolling swap that was killed is put back first, without
// waiting (its checks decide whether it then gets traffic; a broken API
// server must not stop the swap that mends it). The first failure stops the
// roll: the nodes after it keep their pods.
func runRolling(ctx context.Context, o Options, popts phase.Options) (*Report, error) {
	rep := &Report{}
	var held *nodelock.Set
	if !popts.DryRun && o.ClusterDir != "" {
		// The cluster's lock and every node's, for the whole roll: no
		// node is removed, added or changed while its turn comes.
		s, err := nodelock.AcquireCluster(o.ClusterDir, o.ClusterNodes, nodelock.Command())
		if err != nil {
			return rep, err
		}
		defer s.Release()
		held = s
	}
	if !popts.DryRun {
		for _, cp := range o.ControlPlanes {
			if cp.PutBack == nil {
				continue
			}
			if err := cp.PutBack(ctx, false); err != nil {
				return rep, fmt.Errorf("node %s: put its API server back into the load balancer: %w", cp.Name, err)
			}
		}
	}
	rest, err := staticPodsOnly(o.Components)
	if err != nil {
		return rep, err
	}
	base := popts.Reporter
	if base == nil {
		base = o.Reporter
	}
	if base == nil {
		base = progress.Discard()
	}
	for i, cp := range o.ControlPlanes {
		oi := o
		oi.Node, oi.NodeName, oi.Relist, oi.ControlPlanes, oi.held = cp.Node, cp.Name, cp.Relist, nil, held
		if i > 0 {
			if len(o.Components) > 0 && len(rest) == 0 {
				break // nothing but addons and binaries was named
			}
			oi.Components, oi.Kubelets = rest, nil
			failpoint.Hit("swap/rolling/next") // one node done, the next not begun
		}
		pi := popts
		pi.Reporter = progress.Under(base, cp.Name)
		oi.Reporter = pi.Reporter
		r, err := runOne(ctx, oi, pi, func(ctx context.Context, j *Job) (func(context.Context) error, error) {
			if cp.TakeOut == nil || !j.swapsStaticPods() {
				return nil, nil
			}
			if err := cp.TakeOut(ctx); err != nil {
				return nil, fmt.Errorf("take the API server out of the load balancer: %w", err)
			}
			failpoint.Hit("swap/rolling/drained") // the node out of HAProxy, its pods not swapped yet
			return func(ctx context.Context) error {
				if ctx.Err() != nil {
					// Interrupted: put it back without waiting (the
					// runtime API's commands are bounded); the next
					// swap would otherwise, first thing.
					return cp.PutBack(context.WithoutCancel(ctx), false)
				}
				return cp.PutBack(ctx, true)
			}, nil
		})
		for _, p := range r.StaticPods {
			p.Node = cp.Name
		}
		rep.StaticPods = append(rep.StaticPods, r.StaticPods...)
		rep.Addons = append(rep.Addons, r.Addons...)
		rep.Binaries = append(rep.Binaries, r.Binaries...)
		if r.Nothing != "" && i == 0 {
			rep.Nothing = r.Nothing
		}
		if err != nil {
			if i+1 < len(o.ControlPlanes) {
				err = fmt.Errorf("node %s: %w (the nodes after it were not swapped)", cp.Name, err)
			} else {
				err = fmt.Errorf("node %s: %w", cp.Name, err)
			}
			return rep, err
		}
	}
	if len(rep.StaticPods) > 0 {
		rep.Nothing = ""
	}
	return rep, nil
}

// staticPodsOnly are the static-pod components among names (the ones a
// rolling swap repeats on every control-plane node).
func staticPodsOnly(names []string) ([]string, error) {
	comps, _, err := selectComponents(names)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range comps {
		if c.StaticPod {
			out = append(out, c.Name)
		}
	}
	return slices.Compact(out), nil
}

// swapsStaticPods says whether the job changes a static pod of its node.
func (j *Job) swapsStaticPods() bool {
	if err := j.selectPods(); err != nil {
		return true // the phases say what is wrong; be careful meanwhile
	}
	for _, p := range j.pods {
		if !p.unchanged {
			return true
		}
	}
	return false
}
