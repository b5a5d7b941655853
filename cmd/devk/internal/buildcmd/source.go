package buildcmd

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
)

// NewSourceCmd is `devk source`.
func NewSourceCmd(g *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "source",
		Short: "Get a buildable Kubernetes tree, or describe the one you are in",
	}
	cmd.AddCommand(newSourceGetCmd(g), newSourceInfoCmd(g))
	return cmd
}

func newSourceGetCmd(g *cli.Options) *cobra.Command {
	var flags phase.Flags
	cmd := &cobra.Command{
		Use:   "get VERSION [DIR]",
		Short: "Make a buildable Kubernetes tree of a release from the Go module proxy",
		Long: `Make a buildable Kubernetes tree of a release, without git clone.

The release comes from the Go module proxy (k8s.io/kubernetes@VERSION, with
its staging modules k8s.io/<name>@v0.X.Y copied into staging/src/k8s.io).
devk restores what the module zips drop (exec bits, the Makefile symlinks),
removes the go.work entries that are not published, and makes a git
repository tagged VERSION so that versions are stamped as
hack/lib/version.sh does. DIR defaults to ./kubernetes.

Running it again on the same directory and version does nothing; an
interrupted get resumes. A directory holding anything else is refused and
left untouched.`,
		Example: `  devk source get v1.34.4
  devk source get v1.34.4 ~/src/k8s-1.34 && cd ~/src/k8s-1.34 && devk build apiserver`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := source.GetOptions{Version: args[0], Dir: "kubernetes", Reporter: g.Reporter(), Phases: flags, PlanOut: g.Stderr}
			if len(args) == 2 {
				o.Dir = args[1]
			}
			res, err := source.Get(cmd.Context(), o)
			if err != nil || flags.DryRun {
				return err
			}
			if g.Structured() {
				return g.Result(res)
			}
			if res.Already {
				fmt.Fprintf(g.Stdout, "%s already holds Kubernetes %s\n", res.Root, res.Version)
				return nil
			}
			fmt.Fprintf(g.Stdout, "Kubernetes %s is in %s (%d files", res.Version, res.Root, res.Files)
			if len(res.Dropped) > 0 {
				fmt.Fprintf(g.Stdout, "; not published, left out of go.work: %s", strings.Join(res.Dropped, ", "))
			}
			fmt.Fprintf(g.Stdout, ")\nnext: cd %s && devk build apiserver\n", res.Root)
			return nil
		},
	}
	phase.Bind(cmd, source.GetPhases(), &flags)
	cli.ResultHelp(cmd, source.GetResult{}, false)
	return cmd
}

type sourceInfo struct {
	Root        string         `json:"root"`
	Version     source.Version `json:"version"`
	GoMinimum   string         `json:"goMinimum"`
	GoRelease   string         `json:"goRelease,omitempty"`
	GoToolchain string         `json:"goToolchain"`
}

func newSourceInfoCmd(g *cli.Options) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Show the tree's root, its version as the build stamps it, and the Go it wants",
		Long: `Show the Kubernetes tree around the working directory (or --tree): its root,
the version git describe gives under hack/lib/version.sh's rules
(-dirty for uncommitted or untracked changes, +<commit> past a tag), and the
Go version the tree asks for.`,
		Example: `  cd kubernetes/staging/src/k8s.io/apiserver && devk source info`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := source.Open(dir)
			if err != nil {
				return err
			}
			v, err := t.Version(cmd.Context())
			if err != nil {
				return err
			}
			minimum, release, err := t.GoVersions()
			if err != nil {
				return err
			}
			info := sourceInfo{Root: t.Root, Version: v, GoMinimum: minimum, GoRelease: release, GoToolchain: strings.TrimPrefix(runtime.Version(), "go")}
			if g.Structured() {
				return g.Result(info)
			}
			w := g.Stdout
			fmt.Fprintf(w, "root:        %s\n", info.Root)
			fmt.Fprintf(w, "version:     %s\n", v.GitVersion)
			fmt.Fprintf(w, "commit:      %s (%s)\n", v.GitCommit, v.GitTreeState)
			fmt.Fprintf(w, "build date:  %s\n", v.BuildDate)
			fmt.Fprintf(w, "go:          %s or newer (go.work)", minimum)
			if release != "" {
				fmt.Fprintf(w, "; the release builds with %s (.go-version)", release)
			}
			fmt.Fprintln(w)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	cli.ResultHelp(cmd, sourceInfo{}, false)
	return cmd
}
