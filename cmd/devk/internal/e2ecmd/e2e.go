// Package e2ecmd is `devk e2e`: the tree's end-to-end tests against a
// devk cluster, and their images.
package e2ecmd

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/conformance"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
)

// NewE2ECmd is `devk e2e`.
func NewE2ECmd(g *cli.Options) *cobra.Command {
	o := conformance.Options{Parallel: 1}
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "Run the tree's own end-to-end and conformance specs (e2e.test) against a devk cluster",
		Long: `Run Kubernetes' own end-to-end suite, test/e2e of the tree around you as
` + "`devk build e2e`" + ` built it (e2e.test and ginkgo), against a devk cluster: its
admin kubeconfig, --provider local, the number of nodes it has, and
KUBE_TEST_REPO_LIST pointing every registry the framework pulls from at
the cluster's registry (<registry>/<upstream>/…, filled by
` + "`devk e2e images`" + `), so nothing is pulled from the internet.

What the run needs is made first: e2e.test and ginkgo are built in the
tree when missing or stale (as ` + "`devk build e2e`" + `: about 5 minutes the first
time, seconds when nothing changed), and test images the registry lacks
that devk can make are built and pushed (as ` + "`devk e2e images`" + `), so no spec
waits on a pull that cannot succeed. Before anything runs devk refuses: no
cluster, a cluster without its addons (kube-proxy and CoreDNS rolled
out), an e2e.test whose version is not the API server's (--suite-skew
takes one a minor version older, as after ` + "`devk upgrade`" + `), and filters
that select no spec (a ginkgo dry run counts them).

A few specs need more nodes than the cluster has and fail rather than
skip themselves there (` + nodeNeedsList() + `):
devk leaves them out and the summary lists them among the skipped, with why.

--focus and --skip are ginkgo's regular expressions on a spec's full text
(one each: ginkgo ORs repeated ones); --conformance keeps the specs
labelled Conformance. --parallel N runs N ginkgo processes ([Serial]
specs still run alone, at the end); 1 runs e2e.test itself.

Each finished spec prints one line (✓ passed, ✗ failed, - skipped, and
its time); the run's directory _output/devk/e2e/<time>/ in the tree holds
e2e.log (everything the suite printed), junit.xml, ginkgo's report.json
and the repo list. The summary says how many passed, each failure with
its first lines, the skipped specs grouped by the reason they gave, and
the slowest specs. Exit status 1 when any spec failed. Ctrl-C stops the
specs (ginkgo's clean-up runs first), prints the summary of those that
finished, and exits 130.`,
		Example: `  devk e2e --conformance --focus 'sig-node.*Pods' --dry-run
  devk e2e --focus 'Pods should get a host IP'
  devk e2e --conformance --focus 'sig-apps' --skip 'Serial' --parallel 2
  devk e2e --name dev2 --conformance --parallel 2 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Reporter = g.Reporter()
			if g.ComponentLogs() {
				o.Log = g.Stderr
			}
			res, err := conformance.Run(cmd.Context(), o)
			if res == nil {
				return err
			}
			if g.Structured() {
				if rerr := g.Result(res); rerr != nil {
					return rerr
				}
				return err
			}
			printE2E(g, res)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", layout.DefaultName, "cluster name")
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree e2e.test was built in (default: the one around the working directory)")
	f.StringVar(&o.Focus, "focus", "", "run only the specs whose full text matches this regular expression")
	f.StringVar(&o.Skip, "skip", "", "leave out the specs whose full text matches this regular expression")
	f.BoolVar(&o.Conformance, "conformance", false, "run only the specs labelled Conformance")
	f.IntVar(&o.Parallel, "parallel", 1, fmt.Sprintf("ginkgo processes, 1 to %d (1: e2e.test alone)", conformance.MaxParallel))
	f.BoolVar(&o.DryRun, "dry-run", false, "list the specs that would run, and run none")
	f.BoolVar(&o.SuiteSkew, "suite-skew", false, "run an e2e.test one minor version older than the API server, as upstream's version-skew jobs run the older suite against an upgraded cluster")
	cmd.AddCommand(newE2EImagesCmd(g))
	cli.ResultHelp(cmd, conformance.Result{}, false)
	return cmd
}

func printE2E(g *cli.Options, r *conformance.Result) {
	w := g.Stdout
	if r.Summary == nil { // --dry-run
		for _, s := range r.Specs {
			fmt.Fprintln(w, s)
		}
		for _, g := range r.Excluded {
			fmt.Fprintf(w, "left out, %s:\n", g.Reason)
			for _, n := range g.Specs {
				fmt.Fprintf(w, "  %s\n", n)
			}
		}
		fmt.Fprintf(w, "%d specs would run on cluster %s (%s, %d node(s))\n", r.ToRun(), r.Cluster, r.Version, r.Nodes)
		return
	}
	s := r.Summary
	if r.Interrupted {
		stopped := 0
		for _, f := range s.Failed {
			if f.State == conformance.StateInterrupted {
				stopped++
			}
		}
		fmt.Fprintf(w, "\ninterrupted: %d of %d selected specs had finished, %d were stopped (counted as failed)\n",
			s.Passed+len(s.Failed)-stopped+s.SkippedCount(), r.Selected, stopped)
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped of %d selected on cluster %s (%s, %d node(s)) in %s\n",
		s.Passed, len(s.Failed), s.SkippedCount(), r.Selected, r.Cluster, r.Version, r.Nodes, progress.Round(time.Duration(r.Seconds*float64(time.Second))))
	if len(s.Failed) > 0 {
		fmt.Fprintln(w, "\nfailed:")
		for _, f := range s.Failed {
			fmt.Fprintf(w, "  ✗ %s (%s)\n", f.Name, progress.Round(f.Took))
			if f.Location != "" {
				fmt.Fprintf(w, "      at %s\n", f.Location)
			}
			for _, l := range strings.Split(f.Message, "\n") {
				fmt.Fprintf(w, "      %s\n", l)
			}
		}
	}
	if len(s.Skipped) > 0 {
		fmt.Fprintln(w, "\nskipped:")
		for _, sk := range s.Skipped {
			fmt.Fprintf(w, "  %d × %s\n", len(sk.Specs), sk.Reason)
			for _, n := range sk.Specs[:min(len(sk.Specs), skippedNamesShown)] {
				fmt.Fprintf(w, "      %s\n", n)
			}
			if len(sk.Specs) > skippedNamesShown {
				fmt.Fprintf(w, "      … and %d more\n", len(sk.Specs)-skippedNamesShown)
			}
		}
	}
	if len(s.Slowest) > 0 {
		fmt.Fprintln(w, "\nslowest:")
		for _, sp := range s.Slowest {
			fmt.Fprintf(w, "  %8s  %s\n", progress.Round(sp.Took), sp.Name)
		}
	}
	fmt.Fprintf(w, "\nlog %s\njunit %s\n", r.Log, r.JUnit)
}

// nodeNeedsList names the specs conformance.NodeNeeds leaves out.
func nodeNeedsList() string {
	var out []string
	for _, n := range conformance.NodeNeeds {
		out = append(out, fmt.Sprintf("%q needs %d", n.Spec, n.Nodes))
	}
	return strings.Join(out, "; ")
}

// skippedNamesShown is how many specs of each skip reason the summary names.
const skippedNamesShown = 3
