// Package cli is what devk's commands share (kubectl's cmdutil): the
// flags every command has and what they decide (progress, -o results,
// -v), the result's help, the completion of names, exit statuses and
// devk's version. Each group of commands is a package beside it; the
// root command (cmd/devk) puts them together.
package cli

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

// Options are the flags every command shares, and where its results and
// progress go.
type Options struct {
	// Verbosity is -v N: 0 by default; VerboseDevk and up show what devk
	// does (the commands it runs, cache decisions, phase timings);
	// VerboseComponents and up also the components' own output.
	Verbosity int
	// verbose is the old --verbose, kept working as -v 1.
	verbose bool
	Quiet   bool
	Output  string // one of output.Formats

	// Stdout takes results, Stderr progress, logs and errors.
	Stdout io.Writer
	Stderr io.Writer

	// version is what `make build` stamped (see VersionOf).
	version string
	format  output.Format
}

// NewOptions are the shared options of a devk writing results to stdout
// and progress to stderr; stamped is the version `make build` stamped
// into the binary.
func NewOptions(stdout, stderr io.Writer, stamped string) *Options {
	return &Options{Stdout: stdout, Stderr: stderr, version: stamped}
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
func (g *Options) Debug() bool { return g.Verbosity >= VerboseDevk }

// ComponentLogs reports whether the components' output is streamed too
// (-v 2 and up).
func (g *Options) ComponentLogs() bool { return g.Verbosity >= VerboseComponents }

// Reporter is the progress reporter for this invocation; progress goes to
// stderr, never stdout.
func (g *Options) Reporter() progress.Reporter {
	mode := progress.Auto
	if g.format == output.JSON {
		mode = progress.JSON
	}
	return progress.New(g.Stderr, progress.Options{Mode: mode, Verbose: g.Debug(), Quiet: g.Quiet})
}

// PhaseOptions are the runner's options for a command's phase flags:
// the plan (--dry-run) on stderr, and with -v the phases' summary.
func (g *Options) PhaseOptions(flags *phase.Flags) phase.Options {
	popts := flags.Options()
	popts.PlanOut, popts.Summary = g.Stderr, g.Debug()
	return popts
}

// Format is -o's result format.
func (g *Options) Format() output.Format { return g.format }

// Structured reports whether results are a data format (-o json|yaml),
// each command's documented result type.
func (g *Options) Structured() bool { return g.format.Structured() }

// Result writes a command's result as -o json or -o yaml asks.
func (g *Options) Result(v any) error { return output.Write(g.Stdout, g.format, v) }

func (g *Options) validate() error {
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

// Bind makes root the root of a devk command tree run with args
// (os.Args[1:]): its output to Stdout and Stderr, the flags every
// command shares as its persistent flags, and their check before any
// command runs.
func (g *Options) Bind(root *cobra.Command, args []string) {
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := g.validate(); err != nil {
			return err
		}
		return validateFlags(cmd, g.Stderr)
	}
	root.SetOut(g.Stdout)
	root.SetErr(g.Stderr)
	root.SetArgs(VerbosityArgs(args))
	pf := root.PersistentFlags()
	pf.IntVarP(&g.Verbosity, "verbosity", "v", 0, "detail on stderr: 1 shows the commands devk runs, cache decisions and phase times; 2 also the components' own output (-v alone means 1)")
	pf.Lookup("verbosity").NoOptDefVal = "1" // see VerbosityArgs for -v N
	pf.BoolVar(&g.verbose, "verbose", false, "same as -v 1")
	Deprecate(pf, "verbose", "use -v 1 (or -v 2 for the components' output too)")
	pf.BoolVarP(&g.Quiet, "quiet", "q", false, "show only results and errors")
	pf.StringVarP(&g.Output, "output", "o", string(output.Text), "result format: "+strings.Join(output.Formats, ", ")+" (json and yaml: the result type each command's help describes)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(output.Formats, cobra.ShellCompDirectiveNoFileComp))
}

// deprecatedAnnotation marks a flag kept for an old spelling; its value
// is what to use instead.
const deprecatedAnnotation = "devk/deprecated"

// Deprecate hides an old spelling of a flag that keeps working;
// validateFlags says what to use instead when it is given. (pflag's own
// MarkDeprecated prints through cobra to stdout, among the results.)
func Deprecate(fs *pflag.FlagSet, name, instead string) {
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

// VerbosityArgs lets -v take its level as the next argument (-v 2), as
// kubectl's and kind's do, while -v alone still means 1: pflag reads a
// flag with a default-when-bare value only as -v=2 or -v2, so a bare -v
// followed by a level is joined here. Arguments after "--" (a command
// devk runs, as etcd diff's) are left alone.
func VerbosityArgs(args []string) []string {
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

// FollowLogs streams cluster name's component logs (kubelet, containerd,
// the containers') to stderr while a command changes it, with -v 2;
// stop ends it after the last lines are out.
func (g *Options) FollowLogs(ctx context.Context, name string) (stop func()) {
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
		supervise.Follow(ctx, layout.HomeFiles(home).Cluster(name).FirstNode().Logs(), g.Stderr)
	}()
	return func() { cancel(); <-done }
}
