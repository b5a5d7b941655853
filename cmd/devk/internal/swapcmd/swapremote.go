package swapcmd

import (
	"fmt"
	"slices"
	"strings"

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
	if slices.Equal(in.Components, []string{"kubelet"}) {
		return swapKubeletThroughCluster(cmd, g, d, access, o, nodes)
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

// remoteComponents are what a swap through the cluster changes: the
// static pods named (addons and kubectl are not swapped this way), or
// the kubelet alone; else every static pod the tree pushed.
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
		if c.Name == "kubelet" && len(comps) > 1 {
			return nil, fmt.Errorf("through the cluster the kubelet is swapped on its own (every node, one at a time, restarted by its systemd): run `devk swap kubelet` and `devk swap %s` as two commands", strings.Join(slices.DeleteFunc(slices.Clone(o.Components), func(n string) bool { return n == "kubelet" }), " "))
		}
		if c.Name == "kubelet" {
			out = append(out, c.Name)
			continue
		}
		if !c.StaticPod {
			return nil, fmt.Errorf("through the cluster devk swaps static pods (apiserver, controller-manager, scheduler, etcd); %s is swapped by a devk on the cluster's machine (--name) or on the node", c.Name)
		}
		out = append(out, c.Name)
	}
	return out, nil
}

// swapKubeletThroughCluster is `devk swap kubelet` through the cluster:
// the tree's built kubelet sent to each node's agent, which installs it
// where systemd runs the node's kubelet and restarts the unit.
func swapKubeletThroughCluster(cmd *cobra.Command, g *cli.Options, d remote.Decision, access *cli.Access, o swap.Options, nodes []string) error {
	in := remote.KubeletInput{Rollback: o.Rollback, Only: nodes, Timeout: o.Timeout}
	if !o.Rollback {
		tree, err := source.Open(o.TreeDir)
		if err != nil {
			return err
		}
		st, err := build.LoadState(tree.Root)
		if err != nil {
			return err
		}
		if cs := st.Components["kubelet"]; cs != nil {
			in.Binary = cs.Binary
		}
		if in.Binary == nil {
			return fmt.Errorf("kubelet is not built yet: run `devk build kubelet`")
		}
	}
	ctx := cmd.Context()
	s, err := remote.Connect(ctx, d, access.Agent(), g.Version().Version, image.RemoteOptions{Insecure: o.Insecure}, g.Reporter(), remote.KubeletNeeds)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.SwapKubelet(ctx, in)
	rep.Via = swap.ViaCluster
	printSwap(g, rep)
	return err
}
