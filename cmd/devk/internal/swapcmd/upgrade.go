package swapcmd

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap"
	"github.com/devk/devk/upgrade"
)

// NewUpgradeCmd is `devk upgrade`.
func NewUpgradeCmd(g *cli.Options) *cobra.Command {
	var (
		o     upgrade.Options
		node  nodeFlags
		flags phase.Flags
	)
	cmd := &cobra.Command{
		Use:   "upgrade --tree DIR",
		Short: "Upgrade a devk cluster to another tree's build in kubeadm's order, each step verified by digest; --rollback goes back",
		Long: `Move a running devk cluster to the build of another tree (one ` + "`devk source get`" + `
made, e.g. v1.35.4 beside a v1.34.4 cluster), in the order kubeadm upgrades
a cluster, each step a ` + "`devk swap`" + ` verified by digest before the next:

  1. preflight: the tree's version and every component's in the cluster
     (each API server's, controller-manager's and scheduler's /version,
     each Node's kubelet, devk's kubectl); Kubernetes' version skew policy
     checked for the cluster as it runs and after every step (no minor
     version skipped, no kubelet newer than the API server, controllers at
     most one minor behind, kubelets three). --force-skew runs an upgrade
     the policy refuses, for a contributor testing exactly that skew.
  2. build: the tree's components and images (devk build --push).
  3. flags: each new binary's --help against what the cluster gives it
     (the static pods' flags, kube-proxy's, each kubelet's command line and
     its config's feature gates): one it no longer takes is refused,
     naming it and where it is set, before anything changes.
  4. journal: what runs now (versions, images) in the cluster's
     upgrade.json.
  5. etcd, then kube-apiserver, kube-controller-manager and
     kube-scheduler, one control-plane node at a time (out of HAProxy
     around its own swap on an HA cluster); then kube-proxy and CoreDNS;
     then each node's kubelet: cordoned, drained through the Eviction API
     (PodDisruptionBudgets hold; DaemonSet and static pods stay), the
     kubelet swapped and Ready, uncordoned; then devk's kubectl.
  6. verify: every component's version read again.

A failing step is rolled back by its swap, and the upgrade stops there:
the cluster runs a known mixed set of versions (` + "`devk status`" + `), and ` + "`devk\nupgrade`" + ` again resumes (what already runs the tree's build is left alone).
--rollback goes back step by step in the reverse order (kubectl, the
kubelets, the addons, the control plane, etcd), each component to what it
ran before the upgrade, and checks every version and image against the
journal. --dry-run reads the cluster and prints the plan: each step's
component and node, its version now and after, and the image it moves to
(once the tree is built).

A cluster the tree's kubeadm bootstrapped (bootstrapper: kubeadm) is
upgraded by the new tree's kubeadm, as a kubeadm user upgrades one: devk
builds that kubeadm with the rest, gives its images the names the new
kubeadm lists, and runs inside the nodes ` + "`kubeadm upgrade apply VERSION`" + ` on
the first control-plane node (etcd, its static pods, kubeadm's and the
kubelets' config, CoreDNS and kube-proxy) and ` + "`kubeadm upgrade node`" + ` on
each other node, one at a time (phases kubeadm-apply and kubeadm-node, in
place of etcd, control-plane and addons); then the kubelets and kubectl
as above. kubeadm's output shows with -v 1. kubeadm has no rollback of an
upgrade (it never downgrades etcd), so --rollback refuses such a cluster.`,
		Example: `  devk source get v1.35.4 ~/src/kubernetes-v1.35.4
  devk upgrade --tree ~/src/kubernetes-v1.35.4 --dry-run
  devk upgrade --tree ~/src/kubernetes-v1.35.4
  devk upgrade --rollback
  devk upgrade --tree ~/src/kubernetes-v1.36.0 --force-skew   # skip a minor version on purpose`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var so swap.Options
			r, err := node.swapNode(&so)
			if err != nil {
				return err
			}
			if r.Cluster == nil || !r.Cluster.Exists() {
				return fmt.Errorf("no devk cluster %s here: devk upgrade upgrades a cluster `devk up` made", node.Name)
			}
			defer g.FollowLogs(cmd.Context(), r.Cluster.Config.Name)()
			so.KubectlDest = swap.DefaultKubectlDest(r.Home)
			so.Command = node.command("upgrade")
			o.Cluster, o.Swap, o.Reporter = r.Cluster, so, g.Reporter()
			popts := g.PhaseOptions(&flags)
			popts.Reporter = o.Reporter
			j, err := upgrade.Run(cmd.Context(), o, popts)
			if j != nil {
				printUpgrade(g, j.Report, flags.DryRun)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&node.Name, "name", layout.DefaultName, "the devk cluster")
	f.BoolVar(&node.NoKubeletRestart, "no-kubelet-restart", false, "wait for a lagging mirror pod instead of restarting devk's kubelet so that it lists pods again")
	f.StringVar(&o.TreeDir, "tree", "", "the `DIR` of the tree to upgrade to (one devk source get made; --rollback: the journal's)")
	f.BoolVar(&o.ForceSkew, "force-skew", false, "upgrade even when Kubernetes' version skew policy refuses it (a minor version skipped, a kubelet newer than the API server)")
	f.BoolVar(&o.Rollback, "rollback", false, "go back, step by step in the reverse order, to what ran before the last upgrade")
	phase.Bind(cmd, upgrade.Phases(), &flags)
	cli.ResultHelp(cmd, upgrade.Report{}, false)
	return cmd
}

// printUpgrade prints the plan (--dry-run) or what the upgrade left
// running.
func printUpgrade(g *cli.Options, rep *upgrade.Report, dryRun bool) {
	if g.Structured() {
		g.Result(rep)
		return
	}
	w := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	if dryRun {
		if len(rep.Plan) == 0 {
			return
		}
		if rep.Rollback {
			fmt.Fprintf(w, "the rollback from %s (%s), step by step:\n", rep.To, rep.Tree)
		} else {
			fmt.Fprintf(w, "the upgrade to %s (%s), step by step:\n", rep.To, rep.Tree)
		}
		fmt.Fprintln(w, "STEP\tCOMPONENT\tNODE\tNOW\tAFTER\tIMAGE NOW\tIMAGE AFTER")
		for _, s := range rep.Plan {
			after := s.Image
			switch {
			case after == "" && rep.Rollback:
				after = "-"
			case after == "":
				after = "(built by the build step)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Step, s.Component, orDash(s.Node), orDash(s.From), orDash(s.To), orDash(digest.ShortImage(s.FromImage)), digest.ShortImage(after))
		}
		return
	}
	if len(rep.Versions) == 0 {
		return
	}
	if rep.Rollback {
		fmt.Fprintf(w, "rolled back from %s: every component runs what it ran before the upgrade\n", rep.To)
	} else {
		fmt.Fprintf(w, "upgraded to %s (%s)\n", rep.To, rep.Tree)
	}
	fmt.Fprintln(w, "COMPONENT\tNODE\tVERSION")
	for _, v := range rep.Versions {
		fmt.Fprintf(w, "%s\t%s\t%s\n", v.Component, orDash(v.Node), v.Version)
	}
	if rep.SkewForced != "" {
		fmt.Fprintf(w, "(--force-skew overrode: %s)\n", strings.SplitN(rep.SkewForced, "\n", 2)[0])
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
