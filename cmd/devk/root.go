package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	Verbose bool
	Quiet   bool
	Output  string // text or json

	stdout io.Writer
	stderr io.Writer
}

// Reporter is the progress reporter for this invocation; progress goes to
// stderr, never stdout.
func (g *globalOptions) Reporter() progress.Reporter {
	mode := progress.Auto
	if g.JSON() {
		mode = progress.JSON
	}
	return progress.New(g.stderr, progress.Options{Mode: mode, Verbose: g.Verbose, Quiet: g.Quiet})
}

// JSON reports whether results should be machine-readable.
func (g *globalOptions) JSON() bool { return g.Output == "json" }

func (g *globalOptions) validate() error {
	switch g.Output {
	case "text", "json":
	default:
		return fmt.Errorf("-o %q: use text or json", g.Output)
	}
	if g.Verbose && g.Quiet {
		return fmt.Errorf("--verbose and --quiet contradict each other: pick one")
	}
	return nil
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globalOptions{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "devk",
		Short: "Build, swap and inspect Kubernetes components, fast and verified",
		Long: `devk is a toolchain for hacking on Kubernetes itself.

  devk source get v1.34.4      a buildable Kubernetes tree in seconds
  devk build apiserver         incremental, version-stamped build of one component
  devk version                 devk's own version

Results go to stdout (-o json for scripts); progress goes to stderr.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.validate(); err != nil {
				return err
			}
			return validateFlags(cmd)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.BoolVarP(&g.Verbose, "verbose", "v", false, "show more detail (commands run, cache decisions)")
	pf.BoolVarP(&g.Quiet, "quiet", "q", false, "show only results and errors")
	pf.StringVarP(&g.Output, "output", "o", "text", "result format: text or json")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(
		newVersionCmd(g),
		newSourceCmd(g),
		newBuildCmd(g),
		newPushCmd(g),
		newRegistryCmd(g),
		newDigestCmd(g),
		newUpCmd(g),
		newDownCmd(g),
		newStatusCmd(g),
		newSwapCmd(g),
		newWatchCmd(g),
		newEtcdCmd(g),
		newCertsCmd(g),
		newExportCmd(g),
	)
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command group (devk registry, devk
// etcd, …) fail on a subcommand it does not have, instead of printing its
// help and exiting 0; alone, it still prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}

// validateFlags checks what every command shares: a cluster named with
// --name or --cluster (an empty one would silently mean the default
// cluster), and durations, which must not be negative.
func validateFlags(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || !f.Changed {
			return
		}
		switch {
		case f.Name == "name" || f.Name == "cluster":
			if verr := layout.ValidateName(f.Value.String()); verr != nil {
				err = fmt.Errorf("--%s: %w", f.Name, verr)
			}
		case f.Value.Type() == "duration":
			if d, perr := time.ParseDuration(f.Value.String()); perr == nil && d < 0 {
				err = fmt.Errorf("--%s %s: a duration must not be negative", f.Name, f.Value.String())
			}
		}
	})
	return err
}
