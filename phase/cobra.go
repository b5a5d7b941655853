package phase

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Flags are the phase-selection flags a bound command fills in.
type Flags struct {
	Skip   []string
	DryRun bool
	// Only is set by the generated `phase <path>` subcommands.
	Only string
}

// Options turns the flags into runner options (reporter and output are the
// caller's).
func (f *Flags) Options() Options {
	return Options{Only: f.Only, Skip: f.Skip, DryRun: f.DryRun}
}

// Bind wires a phase tree into cmd: it adds --skip-phases and --dry-run,
// lists the phases in cmd's help, and adds `phase <path>` subcommands that
// run one phase (and its children) with the same flags and arguments as
// cmd. Call it after cmd's own flags are defined; cmd.RunE must read flags.
func Bind[S any](cmd *cobra.Command, roots []*Phase[S], flags *Flags) {
	steps := Flatten(roots)
	var paths []string
	for _, s := range steps {
		paths = append(paths, s.Path)
	}
	cmd.Flags().StringSliceVar(&flags.Skip, "skip-phases", nil, "phases to leave out, by path (comma separated); see the phase list above")
	cmd.Flags().BoolVar(&flags.DryRun, "dry-run", false, "print the plan (each phase and what it reads and writes) and run nothing")
	_ = cmd.RegisterFlagCompletionFunc("skip-phases", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return paths, cobra.ShellCompDirectiveNoFileComp
	})

	var help strings.Builder
	help.WriteString("\n\nPhases (run in this order; skip with --skip-phases, run one with `")
	help.WriteString(cmd.CommandPath() + " phase PATH`):\n")
	width := 0
	for _, s := range steps {
		width = max(width, len(s.Path)+2*s.Depth)
	}
	for _, s := range steps {
		name := strings.Repeat("  ", s.Depth) + s.Path
		fmt.Fprintf(&help, "  %-*s  %s\n", width, name, s.Phase.Short)
	}
	cmd.Long = strings.TrimRight(cmd.Long, "\n") + strings.TrimRight(help.String(), "\n")

	parent := &cobra.Command{
		Use:   "phase PATH",
		Short: "Run one phase of `" + cmd.Name() + "` (and its children)",
		Long: "Run a single phase of `" + cmd.CommandPath() + "`, with its children, relying on what earlier runs left behind.\n" +
			"Every phase is idempotent, so running one again is safe.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("name a phase: %s", strings.Join(paths, ", "))
		},
	}
	for _, s := range steps {
		path := s.Path
		sub := &cobra.Command{
			Use:   path + strings.TrimPrefix(cmd.Use, cmd.Name()),
			Short: s.Phase.Short,
			Args:  cmd.Args,
			RunE: func(c *cobra.Command, args []string) error {
				flags.Only = path
				return cmd.RunE(c, args)
			},
			ValidArgsFunction: cmd.ValidArgsFunction,
		}
		sub.Flags().AddFlagSet(cmd.Flags())
		parent.AddCommand(sub)
	}
	cmd.AddCommand(parent)
}
