package swapcmd

import (
	"fmt"
	"regexp"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/remote"
	"github.com/devk/devk/stacks"
)

// NewStacksCmd is `devk stacks`.
func NewStacksCmd(g *cli.Options) *cobra.Command {
	var o stacks.Options
	var match string
	var access cli.Access
	cmd := &cobra.Command{
		Use:   "stacks COMPONENT",
		Short: "Print a running component's goroutines, each frame as PATH:LINE: FUNCTION in the tree",
		Long: `Read the goroutine dump of a running component of a devk cluster from its
own profiling endpoint (/debug/pprof/goroutine?debug=2) with the cluster's
admin credentials: kube-apiserver and, on their secure ports,
kube-controller-manager and kube-scheduler at the node's address; the
kubelet through the API server's node proxy; etcd's on its client URL
(devk runs it with --enable-pprof) with the node's etcd health-check client
certificate.

Each frame's file, a module path in a -trimpath build, is mapped to the
file here: relative to the tree (k8s.io/kubernetes at its root, each staging
module under staging/src/k8s.io/<name>, as go.work says), or absolute in
the Go module cache or GOROOT. Goroutines with identical stacks (state,
calls, creator) are printed once with their count, the largest group first:
a header line, then a line per frame, PATH:LINE: FUNCTION, which
` + "`vim -q`" + ` and a terminal's click-to-open read (run it in the tree's root).
--match REGEXP keeps the stacks with a frame whose function or path matches.
It changes nothing.

Another cluster, reached only through its kubeconfig (--kubeconfig, else
$KUBECONFIG's current context when there is no devk cluster named devk
here; --via-cluster forces it): the API server's goroutines are read at
the kubeconfig's server with its credentials (with --node, at that node's
API server, the address its pod advertises), a kubelet's through the node
proxy (--node, default the first node). The controller-manager's and
scheduler's secure ports serve certificates the cluster's CA did not sign
(kubeadm makes them in memory), and etcd's wants its client certificate
on the node: those are read on a devk cluster of this machine only.`,
		Example: `  devk stacks apiserver
  devk stacks apiserver --match routes
  vim -q <(devk stacks scheduler --match 'scheduleOne')
  devk stacks kubelet --node devk-worker -o json
  devk stacks apiserver --kubeconfig work.conf --match watch   # any cluster, through its API`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cli.CompleteNames(func() []string { return stacks.Components }),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Component = args[0]
			if match != "" {
				re, err := regexp.Compile(match)
				if err != nil {
					return fmt.Errorf("--match %q is not a regular expression: %w", match, err)
				}
				o.Match = re
			}
			d, err := access.Decide(cmd, g, o.Name, "")
			if err != nil {
				return err
			}
			switch d.Mode {
			case remote.DevkCluster:
				o.Name = d.Name
			case remote.ThroughCluster:
				if o.Cluster, err = d.Target.RESTConfig(); err != nil {
					return err
				}
			}
			r, err := stacks.Get(cmd.Context(), o)
			if err != nil {
				return err
			}
			if g.Structured() {
				return g.Result(r)
			}
			return stacks.WriteText(g.Stdout, r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", layout.DefaultName, "cluster name")
	f.StringVar(&o.Node, "node", "", "the node whose component to read (default: node 0; the controller-manager and scheduler run on control-plane nodes)")
	f.StringVar(&match, "match", "", "keep only the stacks with a frame whose function or path matches this regular expression")
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree the component was built from (default: the one around the working directory)")
	access.AddAPI(f)
	cli.ResultHelp(cmd, stacks.Result{}, false)
	return cmd
}
