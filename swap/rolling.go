package swap

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

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
			if err := cp.EnsureIn(ctx); err != nil {
				return rep, err
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

// Cluster is a devk cluster as a swap of its static pods sees it; cmd/devk
// fills it from package cluster, which swap does not import.
type Cluster struct {
	// Dir is the cluster's directory and NodeManifests its nodes'
	// manifests dirs (Options.ClusterDir, ClusterNodes).
	Dir           string
	NodeManifests []string
	// NodeName is node 0's name.
	NodeName string
	// ControlPlaneNames are the cluster's control-plane nodes, node 0
	// first, those being removed too.
	ControlPlaneNames []string
	// ControlPlanes are those a swap may go through (not those being
	// removed), node 0 first; their Relist is set from Relist.
	ControlPlanes []layout.ControlPlaneNode
	// Relist restarts node's kubelet so that it lists pods afresh (see
	// Options.Relist); nil: a swap never does.
	Relist func(ctx context.Context, node string) error
	// StopGrace is Options.StopGrace on this cluster: a grace behind a
	// load balancer, none without.
	StopGrace time.Duration
}

// OnCluster points o, whose Node is node 0 of the devk cluster c, at c's
// control-plane nodes named in picked (none: every one): one control
// plane is the plain swap of one node; several are a rolling swap
// (Options.ControlPlanes) of those picked, in c's order. Picking none of
// them leaves o's node for the kubelets' waits and says, in NoNode, what
// to add for the static pods and addons.
func (o *Options) OnCluster(c Cluster, picked []string) {
	o.ClusterDir, o.ClusterNodes = c.Dir, c.NodeManifests
	if c.Relist != nil {
		o.Relist = func(ctx context.Context) error { return c.Relist(ctx, c.NodeName) }
	}
	var cps []layout.ControlPlaneNode
	for _, cp := range c.ControlPlanes {
		if len(picked) > 0 && !slices.Contains(picked, cp.Name) {
			continue
		}
		if c.Relist != nil {
			cp.Relist = func(ctx context.Context) error { return c.Relist(ctx, cp.Name) }
		}
		cps = append(cps, cp)
	}
	switch {
	case len(cps) == 0:
		// The node stays for the kubelets' waits; a swap of what runs
		// on a control-plane node says this.
		if o.NoNode == nil {
			o.NoNode = fmt.Errorf("the static pods and the addons' swap run on the control-plane nodes (%s), which --node leaves out: add --node %s", strings.Join(c.ControlPlaneNames, ", "), c.NodeName)
		}
	case len(c.ControlPlaneNames) == 1:
		// One control plane: the plain swap of one node.
	default:
		// Several (picked may name one): each in turn, taken out of the
		// load balancer around its own swap.
		o.Node, o.NodeName, o.Relist = cps[0].Node, cps[0].Name, cps[0].Relist
		o.ControlPlanes = cps
	}
	o.StopGrace = c.StopGrace
}
