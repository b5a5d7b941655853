package swapcmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/image"
	"github.com/devk/devk/loop"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap"
)

// NewWatchCmd is `devk watch`.
func NewWatchCmd(g *cli.Options) *cobra.Command {
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
a swap in progress completes or rolls back first.

--e2e-focus RE runs the tree's e2e specs that RE selects (as devk e2e
--focus RE does; the first cycle builds e2e.test and the test images when
missing, later ones keep that e2e.test) after each verified
swap, and adds their result to the cycle's line; a failed spec prints its
first lines and fails the cycle (nothing is rolled back: the build is what
you are testing). e2e.test built from the tree's commit runs against
components built from the same commit with your changes.`,
		Example: `  devk watch apiserver
  devk watch apiserver scheduler --no-swap     # build and push only
  devk watch apiserver --once                  # one cycle, for scripts
  devk watch apiserver --e2e-focus 'should get a host IP'   # and run that spec after each swap
  devk watch apiserver --dry-run               # the plan of one cycle
  devk watch apiserver --skip-phases swap/apiserver/hand-over`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: cli.CompleteNames(cli.TreeComponentNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Build.Components = args
			o.Reporter = g.Reporter()
			o.Build.Reporter = o.Reporter
			o.Out = g.Stdout
			if !o.NoSwap {
				if _, err := node.swapNode(&o.Swap); err != nil {
					return err
				}
				if o.Swap.NoNode != nil {
					return fmt.Errorf("%w; or pass --no-swap", o.Swap.NoNode)
				}
			}
			if !o.NoSwap && node.ManifestsDir == "" {
				defer g.FollowLogs(cmd.Context(), node.Name)()
			}
			if o.E2E.Focus != "" {
				if node.ManifestsDir != "" {
					return fmt.Errorf("--e2e-focus runs devk e2e, which needs a devk cluster (its kubeconfig, addons and registry): drop --manifests-dir, or run e2e.test yourself")
				}
				o.E2E.Name, o.E2E.Parallel = node.Name, 1
				if g.ComponentLogs() {
					o.E2E.Log = g.Stderr
				}
			}
			o.Swap.Insecure = o.Image.Insecure
			o.Phases = g.PhaseOptions(&flags)
			return loop.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Build.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	f.StringVar(&o.Image.Registry, "registry", image.DefaultRegistry(), "registry to push to")
	f.BoolVar(&o.Image.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	f.BoolVar(&o.NoSwap, "no-swap", false, "build and push only")
	f.StringVar(&o.E2E.Focus, "e2e-focus", "", "after each verified swap, run the e2e specs this regular expression selects (devk e2e --focus)")
	f.BoolVar(&o.Once, "once", false, "run one cycle for the first change, then exit with its status")
	f.DurationVar(&o.Quiet, "debounce", loop.DefaultQuiet, "quiet time after the last save before a cycle starts")
	f.DurationVar(&o.Swap.Timeout, "timeout", swap.DefaultTimeout, "how long a swap waits for health before rolling back")
	node.addSwap(f)
	phase.Bind(cmd, loop.CyclePhases(), &flags)
	return cmd
}
