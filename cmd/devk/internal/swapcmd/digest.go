package swapcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/image"
)

// NewDigestCmd is `devk digest`.
func NewDigestCmd(g *cli.Options) *cobra.Command {
	var (
		o    digest.Options
		node nodeFlags
	)
	cmd := &cobra.Command{
		Use:   "digest COMPONENT...",
		Short: "Show and compare a component's digests: pushed, in the registry, in the manifest, running",
		Long: `Show, for each component, the image digest devk last pushed (recorded in
the tree's _output/devk/state.json), the digest the registry has now under
that tag and, when a devk cluster is up (or --manifests-dir, --kubeconfig
and --cri-socket name a node), the digest its static-pod manifest names,
the running container's CRI imageRef and the mirror pod's imageID (for an
addon: its workload's image and its pods' imageIDs); and compare them. ` + "`devk digest verify`" + ` does the same for every pushed static pod.

Exit status: 0 when every source agrees, 2 when they differ or one has no
digest (so scripts can tell), 1 when a source could not be read (e.g. the
registry is down).`,
		Example: `  devk digest apiserver
  devk digest apiserver scheduler -o json`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: cli.CompleteNames(build.Names),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Components = args
			// With a cluster whose runtime is up, also show what the
			// manifests name and what the node runs.
			r, err := node.resolve()
			if err != nil && !isNoCluster(err) {
				return err
			}
			if err == nil && fileExists(r.CRISocket) {
				sources, closeSources, err := digest.NodeSources(cmd.Context(), r.Node, r.NodeName, r.otherRuntimes())
				if err != nil {
					return err
				}
				defer closeSources()
				o.Extra = sources
			}
			return runDigest(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	f.StringVar(&o.Registry, "registry", image.DefaultRegistry(), "registry for components never pushed (pushed ones are looked up where they went)")
	f.BoolVar(&o.Remote.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	node.add(f)
	cmd.AddCommand(newDigestVerifyCmd(g))
	cli.ResultHelp(cmd, []digest.Report{}, false)
	return cmd
}

// runDigest compares and prints; a mismatch is printed and then returned
// (exit status 2), a failure to look is returned unprinted.
func runDigest(ctx context.Context, g *cli.Options, o digest.Options) error {
	reports, err := digest.Run(ctx, o)
	var mismatch *digest.MismatchError
	if err != nil && !errors.As(err, &mismatch) {
		return err
	}
	if perr := printDigestReports(g, reports); perr != nil {
		return perr
	}
	return err
}

func printDigestReports(g *cli.Options, reports []digest.Report) error {
	if g.Structured() {
		return g.Result(reports)
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
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
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range reports {
		verdict := "match"
		if !r.Match {
			verdict = "MISMATCH"
		}
		if r.Absent {
			verdict += " (not on the cluster)"
		}
		if r.Debug {
			verdict += " (the debug image: `devk debug --stop " + r.Component + "` puts the normal build back)"
		}
		fmt.Fprintf(g.Stdout, "%s: %s\n", r.Component, verdict)
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
