package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/image"
)

func newDigestCmd(g *globalOptions) *cobra.Command {
	var o digest.Options
	cmd := &cobra.Command{
		Use:   "digest COMPONENT...",
		Short: "Show and compare a component's digests: last pushed, and in the registry now",
		Long: `Show, for each component, the image digest devk last pushed (recorded in
the tree's _output/devk/state.json) and the digest the registry has now
under that tag, and compare them.

Exit status: 0 when every source agrees, 2 when they differ or one has no
digest (so scripts can tell), 1 when a source could not be read (e.g. the
registry is down).

Examples:
  devk digest apiserver
  devk digest apiserver scheduler -o json`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: cobra.FixedCompletions(build.CompletionNames(), cobra.ShellCompDirectiveNoFileComp),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Components = args
			reports, err := digest.Run(cmd.Context(), o)
			var mismatch *digest.MismatchError
			if err != nil && !errors.As(err, &mismatch) {
				return err
			}
			if g.JSON() {
				if jerr := json.NewEncoder(g.stdout).Encode(reports); jerr != nil {
					return jerr
				}
				return err
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "COMPONENT\tSOURCE\tDIGEST\tREF\tNOTE")
			for _, r := range reports {
				for _, ob := range r.Observations {
					d := ob.Digest
					if d == "" {
						d = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Component, ob.Source, d, ob.Ref, ob.Note)
				}
			}
			if ferr := tw.Flush(); ferr != nil {
				return ferr
			}
			for _, r := range reports {
				verdict := "match"
				if !r.Match {
					verdict = "MISMATCH"
				}
				fmt.Fprintf(g.stdout, "%s: %s\n", r.Component, verdict)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	f.StringVar(&o.Registry, "registry", image.DefaultRegistry(), "registry for components never pushed (pushed ones are looked up where they went)")
	f.BoolVar(&o.Remote.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	return cmd
}
