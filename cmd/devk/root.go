package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/output"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	// Verbosity is -v N: 0 by default; VerboseDevk and up show what devk
	// does (the commands it runs, cache decisions, phase timings);
	// VerboseComponents and up also the components' own output.
	Verbosity int
	// verbose is the old --verbose, kept working as -v 1.
	verbose bool
	Quiet   bool
	Output  string // one of output.Formats

	format output.Format
	stdout io.Writer
	stderr io.Writer
}

// Verbosity levels of -v.
const (
	// VerboseDevk shows what devk does: the commands it runs, its cache
	// decisions and each phase's time.
	VerboseDevk = 1
	// VerboseComponents also streams the components' own output: go
	// build's, the kubelet's and containerd's
	// log lines while a command changes the cluster.
	VerboseComponents = 2
)

// Debug reports whether devk's own detail is shown (-v 1 and up).
func (g *globalOptions) Debug() bool { return g.Verbosity >= VerboseDevk }

// ComponentLogs reports whether the components' output is streamed too
// (-v 2 and up).
func (g *globalOptions) ComponentLogs() bool { return g.Verbosity >= VerboseComponents }

// Reporter is the progress reporter for this invocation; progress goes to
// stderr, never stdout.
func (g *globalOptions) Reporter() progress.Reporter {
	mode := progress.Auto
	if g.format == output.JSON {
		mode = progress.JSON
	}
	return progress.New(g.stderr, progress.Options{Mode: mode, Verbose: g.Debug(), Quiet: g.Quiet})
}

// phaseOptions are the runner's options for a command's phase flags:
// the plan (--dry-run) on stderr, and with -v the phases' summary.
func (g *globalOptions) phaseOptions(flags *phase.Flags) phase.Options {
	popts := flags.Options()
	popts.PlanOut, popts.Summary = g.stderr, g.Debug()
	return popts
}

// Structured reports whether results are a data format (-o json|yaml),
// each command's documented result type.
func (g *globalOptions) Structured() bool { return g.format.Structured() }

// Result writes a command's result as -o json or -o yaml asks.
func (g *globalOptions) Result(v any) error { return output.Write(g.stdout, g.format, v) }

func (g *globalOptions) validate() error {
	f, err := output.Parse(g.Output)
	if err != nil {
		return err
	}
	g.format = f
	if g.verbose && g.Verbosity < VerboseDevk {
		g.Verbosity = VerboseDevk
	}
	if g.Verbosity < 0 {
		return fmt.Errorf("-v %d: verbosity is 0 (the default) or more", g.Verbosity)
	}
	if g.Verbosity > 0 && g.Quiet {
		return fmt.Errorf("-v and --quiet contradict each other: pick one")
	}
	return nil
}

// newRootCmd is devk's command tree, to run with args (os.Args[1:]).
func newRootCmd(stdout, stderr io.Writer, args []string) *cobra.Command {
	g := &globalOptions{stdout: stdout, stderr: stderr}
	cobra.EnableCommandSorting = false // the help lists commands in the order of the loop
	root := &cobra.Command{
		Use:   "devk",
		Short: "Build, swap and inspect Kubernetes components, fast and verified",
		Long: `devk is a toolchain for hacking on Kubernetes itself: get a tree, build
one component in seconds, push its image without Docker, run a throwaway
cluster built from the tree, hot-swap the component into it, verify that
what runs is exactly what was built, and see what it wrote to etcd.

Results go to stdout (-o json or -o yaml for scripts: each command's help
names its result); progress goes to stderr (-q: results and errors only;
-v 1: what devk does; -v 2: the components' own output too).

Exit status:
  0    success
  1    failure (the error says what to do)
  2    a check found what it checks for: digest verify found a digest that
       differs, certs check-expiration --fail-within found a certificate
       expiring sooner
  130  interrupted (Ctrl-C or SIGTERM); what was being changed is rolled
       back or left resumable, as the command's help says`,
		Example: `  devk source get v1.34.4 && cd kubernetes-v1.34.4
  devk up                              # a cluster built from the tree
  devk build apiserver --push          # after a change
  devk swap                            # run it, verified
  devk watch apiserver                 # or: every save, built and swapped`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.validate(); err != nil {
				return err
			}
			return validateFlags(cmd, g.stderr)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(verbosityArgs(args))
	pf := root.PersistentFlags()
	pf.IntVarP(&g.Verbosity, "verbosity", "v", 0, "detail on stderr: 1 shows the commands devk runs, cache decisions and phase times; 2 also the components' own output (-v alone means 1)")
	pf.Lookup("verbosity").NoOptDefVal = "1" // see verbosityArgs for -v N
	pf.BoolVar(&g.verbose, "verbose", false, "same as -v 1")
	deprecate(pf, "verbose", "use -v 1 (or -v 2 for the components' output too)")
	pf.BoolVarP(&g.Quiet, "quiet", "q", false, "show only results and errors")
	pf.StringVarP(&g.Output, "output", "o", string(output.Text), "result format: "+strings.Join(output.Formats, ", ")+" (json and yaml: the result type each command's help describes)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(output.Formats, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(
		newVersionCmd(g),
		newSourceCmd(g),
		newBuildCmd(g),
		newPushCmd(g),
		newRegistryCmd(g),
		newDigestCmd(g),
		newUpCmd(g),
		newDownCmd(g),
		newNodeCmd(g),
		newStatusCmd(g),
		newSwapCmd(g),
		newWatchCmd(g),
		newE2ECmd(g),
		newEtcdCmd(g),
		newCertsCmd(g),
		newExportCmd(g),
		newStacksCmd(g),
		newDebugCmd(g),
		newRunCmd(g),
		newTraceCmd(g),
	)
	groupCommands(root)
	registerClusterCompletion(root)
	refuseUnknownSubcommands(root)
	return root
}

// commandGroups are the root help's sections, in order; groupOf puts
// each command in one. A command in no group fails TestEveryCommandIsGrouped.
var commandGroups = []*cobra.Group{
	{ID: "build", Title: "Build and images:"},
	{ID: "cluster", Title: "Cluster:"},
	{ID: "swap", Title: "Swap and verify:"},
	{ID: "etcd", Title: "etcd:"},
	{ID: "loop", Title: "The inner loop:"},
	{ID: "debug", Title: "Look inside:"},
	{ID: "other", Title: "Other commands:"},
}

var groupOf = map[string]string{
	"source": "build", "build": "build", "push": "build", "registry": "build",
	"up": "cluster", "down": "cluster", "node": "cluster", "status": "cluster", "certs": "cluster", "export": "cluster",
	"swap": "swap", "digest": "swap",
	"etcd":  "etcd",
	"watch": "loop", "e2e": "loop",
	"stacks": "debug", "debug": "debug", "run": "debug", "trace": "debug",
	"version": "other", "completion": "other", "help": "other",
}

func groupCommands(root *cobra.Command) {
	root.AddGroup(commandGroups...)
	root.SetHelpCommandGroupID(groupOf["help"])
	root.SetCompletionCommandGroupID(groupOf["completion"])
	for _, c := range root.Commands() {
		c.GroupID = groupOf[c.Name()]
	}
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

// deprecatedAnnotation marks a flag kept for an old spelling; its value
// is what to use instead.
const deprecatedAnnotation = "devk/deprecated"

// deprecate hides an old spelling of a flag that keeps working;
// validateFlags says what to use instead when it is given. (pflag's own
// MarkDeprecated prints through cobra to stdout, among the results.)
func deprecate(fs *pflag.FlagSet, name, instead string) {
	_ = fs.SetAnnotation(name, deprecatedAnnotation, []string{instead})
	_ = fs.MarkHidden(name)
}

// validateFlags checks what every command shares: a cluster named with
// --name or --cluster (an empty one would silently mean the default
// cluster), and durations, which must not be negative; and says on
// stderr when an old spelling of a flag was used.
func validateFlags(cmd *cobra.Command, stderr io.Writer) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || !f.Changed {
			return
		}
		if instead, ok := f.Annotations[deprecatedAnnotation]; ok {
			fmt.Fprintf(stderr, "devk: --%s is deprecated: %s\n", f.Name, instead[0])
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

// verbosityArgs lets -v take its level as the next argument (-v 2), as
// kubectl's and kind's do, while -v alone still means 1: pflag reads a
// flag with a default-when-bare value only as -v=2 or -v2, so a bare -v
// followed by a level is joined here. Arguments after "--" (a command
// devk runs, as etcd diff's) are left alone.
func verbosityArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if (a == "-v" || a == "--verbosity") && i+1 < len(args) {
			if _, err := strconv.Atoi(args[i+1]); err == nil {
				out = append(out, a+"="+args[i+1])
				i++
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// followLogs streams cluster name's component logs (kubelet, containerd,
// the containers') to stderr while a command changes it, with -v 2;
// stop ends it after the last lines are out.
func (g *globalOptions) followLogs(ctx context.Context, name string) (stop func()) {
	home, err := layout.HomeDir("")
	if !g.ComponentLogs() || err != nil {
		return func() {}
	}
	if name == "" {
		name = layout.DefaultName
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		supervise.Follow(ctx, layout.HomeFiles(home).Cluster(name).FirstNode().Logs(), g.stderr)
	}()
	return func() { cancel(); <-done }
}
