package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/devk/devk/cluster/internal/kwok"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/cluster/internal/teardown"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
)

// eachNode runs f on every node, node 0 last, and joins what each says.
func (c *Cluster) eachNode(ctx context.Context, f func(context.Context, Node) (phase.Outcome, error)) (phase.Outcome, error) {
	ns, err := c.nodesLastFirst()
	if err != nil {
		return phase.Done, err
	}
	if len(ns) == 1 {
		return f(ctx, ns[0])
	}
	var out phase.Outcome
	var details []string
	for _, n := range ns {
		o, err := f(ctx, n)
		if err != nil {
			return phase.Done, fmt.Errorf("node %s: %w", n.Name(), err)
		}
		out.Changed = out.Changed || o.Changed
		details = append(details, n.Name()+": "+o.Detail)
	}
	out.Detail = strings.Join(details, "; ")
	return out, nil
}

// downKwok stops kwok; its fake nodes go with the cluster's etcd.
func (c *Cluster) downKwok(ctx context.Context) (phase.Outcome, error) {
	stopped, err := kwok.Stop(ctx, c.FirstNode().Files)
	return phase.ChangedIf(stopped, "stopped: %v", stopped), err
}

// NodeProcs is node n's supervised processes, as teardown takes them.
func NodeProcs(n Node) teardown.NodeProcs {
	return teardown.NodeProcs{Name: n.Name(), Procs: n.Files.Procs()}
}

func (c *Cluster) downKubelet(ctx context.Context) (phase.Outcome, error) {
	return c.eachNode(ctx, StopKubelet)
}

// StopKubelet stops node n's kubelet.
func StopKubelet(ctx context.Context, n Node) (phase.Outcome, error) {
	return teardown.StopKubelet(ctx, n.Files.Procs())
}

func (c *Cluster) downPods(ctx context.Context) (phase.Outcome, error) {
	return c.eachNode(ctx, c.RemovePods)
}

// RemovePods stops and removes node n's pod sandboxes and containers.
func (c *Cluster) RemovePods(ctx context.Context, n Node) (phase.Outcome, error) {
	socket := c.criSocket(n)
	if c.Config.OwnRuntime {
		socket = n.Files.ContainerdSocket()
	}
	return teardown.RemovePods(ctx, teardown.Pods{Socket: socket, OwnRuntime: c.Config.OwnRuntime, Procs: n.Files.Procs(), KubeletRoot: c.FirstNode().Files.KubeletRoot()})
}

func (c *Cluster) downRuntime(ctx context.Context) (phase.Outcome, error) {
	if !c.Config.OwnRuntime {
		return phase.Unchanged("not devk's (%s)", c.Config.CRISocket), nil
	}
	return c.eachNode(ctx, StopRuntime)
}

// StopRuntime stops node n's containerd and any shim it left.
func StopRuntime(ctx context.Context, n Node) (phase.Outcome, error) {
	return teardown.StopRuntime(ctx, n.Files.Procs(), n.Files.ContainerdSocket())
}

// removeMounts is node n's Node.RemoveMounts.
func removeMounts(ctx context.Context, n Node) (phase.Outcome, error) { return n.RemoveMounts(ctx) }

func (c *Cluster) downMounts(ctx context.Context) (phase.Outcome, error) {
	return c.eachNode(ctx, removeMounts)
}

func (c *Cluster) downCgroups(ctx context.Context) (phase.Outcome, error) {
	ns, err := c.nodesLastFirst()
	if err != nil {
		return phase.Done, err
	}
	var nets []layout.NodeNet
	for _, n := range ns {
		nets = append(nets, n.Net)
	}
	return teardown.RemoveCgroups(ctx, nets, c.Config.OwnRuntime, node.LeftoverGrace)
}

func (c *Cluster) downKubeconfig(ctx context.Context) (phase.Outcome, error) {
	removed, err := c.removeUserContext(ctx)
	if err != nil {
		return phase.Done, err
	}
	if removed {
		return phase.Changed("context %s removed", ContextName(c.Config.Name)), nil
	}
	return phase.Unchanged("no context %s", ContextName(c.Config.Name)), nil
}

// downFiles removes the cluster directory (teardown.RemoveClusterDir),
// checked against every node's processes.
func (c *Cluster) downFiles(ctx context.Context) (phase.Outcome, error) {
	ns, err := c.nodes()
	if err != nil {
		return phase.Done, err
	}
	var procs []teardown.NodeProcs
	for _, n := range ns {
		procs = append(procs, NodeProcs(n))
	}
	return teardown.RemoveClusterDir(c.Files.Dir, c.Home, procs, c.KeepData)
}
