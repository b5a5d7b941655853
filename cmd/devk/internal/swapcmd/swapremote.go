package swapcmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/remote"
	"github.com/devk/devk/source"
	"github.com/devk/devk/swap"
)

// swapThroughCluster is `devk swap` on a cluster reached through its API:
// the static pods named (none: every one pushed from the tree) swapped on
// each control-plane node in turn by devk's node agent there.
func swapThroughCluster(cmd *cobra.Command, g *cli.Options, d remote.Decision, access *cli.Access, o swap.Options, flags *phase.Flags, nodes []string) error {
	if flags.DryRun || flags.Only != "" {
		return fmt.Errorf("through the cluster the swap runs in devk's node agent on each node, which has no --dry-run or single phase: run it on a devk cluster (--name) or on the node to see the plan (%s)", d.Why)
	}
	in := remote.SwapInput{Rollback: o.Rollback, Only: nodes, Timeout: o.Timeout, Insecure: o.Insecure, Skip: flags.Skip, Command: nodelock.Command()}
	var err error
	if in.Components, err = remoteComponents(o); err != nil {
		return err
	}
	if !o.Rollback {
		tree, err := source.Open(o.TreeDir)
		if err != nil {
			return err
		}
		if in.State, err = build.LoadState(tree.Root); err != nil {
			return err
		}
	}
	ctx := cmd.Context()
	s, err := remote.Connect(ctx, d, access.Agent(), g.Version().Version, image.RemoteOptions{Insecure: o.Insecure}, g.Reporter(), remote.SwapNeeds)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.Swap(ctx, in)
	rep.Via = swap.ViaCluster
	printSwap(g, rep)
	return err
}

// remoteComponents are the static pods a swap through the cluster
// changes: those named (each a static pod: addons, kubectl and the
// kubelet are not swapped this way yet), else every one the tree pushed.
func remoteComponents(o swap.Options) ([]string, error) {
	var out []string
	if len(o.Components) == 0 {
		if o.Rollback {
			return nil, fmt.Errorf("name what to roll back: a static pod (apiserver, controller-manager, scheduler, etcd)")
		}
		pushed, err := digest.PushedOnCluster(o.TreeDir)
		if err != nil {
			return nil, err
		}
		for _, name := range pushed {
			if c, err := build.Lookup(name); err == nil && c.StaticPod {
				out = append(out, c.Name)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no static pod pushed from the tree yet: run `devk build apiserver --push`")
		}
		return out, nil
	}
	comps, err := build.Resolve(o.Components)
	if err != nil {
		return nil, err
	}
	for _, c := range comps {
		if c.Name == "kubelet" {
			return nil, fmt.Errorf("through the cluster devk does not swap the kubelet: that is the node's own binary, restarted by the host's init, which devk's node agent does not drive yet; run `devk swap kubelet` on the node, or with --name on the machine of a devk cluster")
		}
		if !c.StaticPod {
			return nil, fmt.Errorf("through the cluster devk swaps static pods (apiserver, controller-manager, scheduler, etcd); %s is swapped by a devk on the cluster's machine (--name) or on the node", c.Name)
		}
		out = append(out, c.Name)
	}
	return out, nil
}
