package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/devk/devk/image"
	"github.com/devk/devk/loop"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap"
)

func newWatchCmd(g *globalOptions) *cobra.Command {
	var (
		o     loop.Options
		node  nodeFlags
		flags phase.Flags
	)
	cmd := &cobra.Command{
		Use:   "watch COMPONENT...",
		Short: "Save a file and the cluster runs it: build, push, swap and verify on every change",
		Long: `Watch the sources of the components and, on every save, run build → push →
swap → verify (the phases of ` + "`devk build --push`" + ` and ` + "`devk swap`" + `), one line per
stage, then the time from save to verified.

Only the directories of the Go packages the components import from the tree
and its staging modules are watched (go list -deps), not the whole tree;
the set is recomputed after each cycle, so new imports and go.mod/go.work
edits are followed. _output/, .git/, zz_generated*, tests and editor temp
and backup files are ignored. Saves are debounced (--debounce), and saves
made while a cycle runs start exactly one more cycle after it.

A compile error is shown and the loop keeps watching; a failed swap is
rolled back (as devk swap does) and the loop goes on. Ctrl-C stops cleanly:
a swap in progress completes or rolls back first.`,
		Example: `  devk watch apiserver
  devk watch apiserver scheduler --no-swap     # build and push only
  devk watch apiserver --once                  # one cycle, for scripts
  devk watch apiserver --dry-run               # the plan of one cycle
  devk watch apiserver --skip-phases swap/apiserver/hand-over`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeNames(treeComponentNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Build.Components = args
			o.Reporter = g.Reporter()
			o.Build.Reporter = o.Reporter
			o.Out = g.stdout
			if !o.NoSwap {
				if _, err := node.swapNode(&o.Swap); err != nil {
					return err
				}
				if o.Swap.NoNode != nil {
					return fmt.Errorf("%w; or pass --no-swap", o.Swap.NoNode)
				}
			}
			if !o.NoSwap && node.ManifestsDir == "" {
				defer g.followLogs(cmd.Context(), node.Name)()
			}
			o.Swap.Insecure = o.Image.Insecure
			o.Phases = flags.Options()
			o.Phases.PlanOut, o.Phases.Summary = g.stderr, g.Debug()
			return loop.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Build.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	f.StringVar(&o.Image.Registry, "registry", image.DefaultRegistry(), "registry to push to")
	f.BoolVar(&o.Image.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	f.BoolVar(&o.NoSwap, "no-swap", false, "build and push only")
	f.BoolVar(&o.Once, "once", false, "run one cycle for the first change, then exit with its status")
	f.DurationVar(&o.Quiet, "debounce", loop.DefaultQuiet, "quiet time after the last save before a cycle starts")
	f.DurationVar(&o.Swap.Timeout, "timeout", swap.DefaultTimeout, "how long a swap waits for health before rolling back")
	node.addSwap(f)
	phase.Bind(cmd, loop.CyclePhases(), &flags)
	return cmd
}
