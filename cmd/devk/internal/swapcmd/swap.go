// Package swapcmd is the commands that change or look into what a node
// runs: `devk swap`, `devk digest`, `devk watch`, `devk debug`, `devk run`
// and `devk stacks`, and the flags naming the node they act on.
package swapcmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/remote"
	"github.com/devk/devk/swap"
	"github.com/devk/devk/upgrade"
)

// NewSwapCmd is `devk swap`.
func NewSwapCmd(g *cli.Options) *cobra.Command {
	var (
		o         swap.Options
		node      nodeFlags
		flags     phase.Flags
		access    cli.Access
		forceSkew bool
	)
	cmd := &cobra.Command{
		Use:   "swap [COMPONENT...]",
		Short: "Hot-swap a static pod's or an addon's image, or the kubectl/kubelet binary, and verify the digest",
		Long: `Put what you last built and pushed into the running cluster, and prove it runs.

For a static-pod component (apiserver, controller-manager, scheduler, etcd)
devk pulls the pushed image through CRI, keeps the old manifest as a
backup, moves it out of the manifests dir and stops the old container
through CRI so no grace period is waited out. Once the kubelet has let go
of the old pod (so the new one skips the kubelet's ` + swap.KubeletBackoff.String() + ` static-pod
back-off) it writes the manifest naming the pushed image (repo@sha256:…,
never a tag) atomically: written and fsynced outside the manifests dir,
then renamed into place. It reports "ready" when the new container runs
the digest and is healthy, then waits for the mirror pod (config hash and
imageID) and checks the manifest, the CRI imageRef, the mirror pod's
imageID and (for the apiserver) /version against what was pushed and
built. If the new container fails, times out or a check about the node
fails, it restores the old manifest, waits for the old pod to be healthy,
prints the new container's last log lines and exits non-zero. An etcd
swap stops the node's API server with the old etcd (it cannot serve
without it, and the kubelet's housekeeping would hang on it for minutes);
the kubelet restarts it on the new etcd.

After an API server swap the mirror pod may lag, up to two minutes when
API server swaps follow each other closely: the kubelet's pod watch backs
off while the API server is down. On its own cluster devk then restarts
the kubelet (its pods keep running) so that it lists pods at once; with
--no-kubelet-restart, or on a node devk does not supervise, it waits.

For an addon (kube-proxy, the DaemonSet kube-system/kube-proxy; coredns,
the Deployment kube-system/coredns) devk applies the pushed image to the
workload's container by server-side apply (field manager devk-swap, so
` + "`devk up`" + ` keeps it), recording the image it replaces in the annotation
devk.dev/previous-image on the workload. It waits for the controller to
roll it out (every pod updated and available, no old pod left), then
checks the workload's image, every pod's imageID and readiness and, for
the pods on this node, the CRI imageRef against the pushed digest. A pod
that crash-loops or cannot pull its image, --timeout, or a failed check
puts the previous image back, waits for that rollout and prints the
failing pod's last log lines.

With no COMPONENT it swaps every static-pod component whose last pushed
digest differs from what its manifest names, and every addon on the
cluster whose last pushed digest differs from what its workload names.

kubectl and kubelet are binaries: devk compares bytes (no-op if equal),
installs by atomic rename keeping PATH.prev, and runs the new binary's
version check; the kubelet is restarted and the node must be Ready again,
else the old kubelet is put back. A worker that runs a tree of its own
(tree: in up's --config file) keeps that tree's kubelet unless --node
names it.

By default devk swaps into the cluster ` + "`devk up`" + ` made (--name); for a
kubeadm node pass --manifests-dir /etc/kubernetes/manifests, --kubeconfig
/etc/kubernetes/admin.conf and --cri-socket /run/containerd/containerd.sock
(and --node-name if devk cannot tell the kubelet's node name from the
runtime). --dry-run prints each phase and what it reads and writes.

Any other cluster is swapped through the cluster itself: --kubeconfig (or
$KUBECONFIG's current context when there is no devk cluster named devk
here; --via-cluster forces it) with --registry, a registry the nodes pull
from. devk pushes its node agent's image there, checks that the registry
has each pushed image and has every control-plane node pull them by
digest, then swaps the static pods on one node at a time, each verified
before the next, by an agent pod on the node running this same swap (the
node's lock and journal; the agent finishes or rolls back on its own if
devk is killed, and the next swap says what it did). The pushed images'
registry must be one the nodes pull from too; --load instead sends devk's
images to each node's runtime through the API (no registry the nodes
reach), named 127.0.0.1:5098/NAME@sha256:…. Through the cluster devk swaps
static pods, and the kubelet alone: on every node (or --node), one at a
time, where systemd runs it (its unit restarted, the node Ready before
the next; the old binary back if the new one is not healthy); elsewhere
the node's agent says why not. The first line says which way devk runs.

Components named from a tree of another minor version than the cluster's
(--tree ../kubernetes-v1.35.4 on a v1.34 cluster: a mixed-version
cluster by choice) are checked first against Kubernetes' version skew
policy for the cluster after the swap (no kubelet or controller newer
than the API server, kubelets at most three minors behind, …): a swap
outside it is refused, naming each component and the rule, unless
--force-skew. ` + "`devk upgrade`" + ` moves a whole cluster in the policy's order.`,
		Example: `  devk build apiserver --push && devk swap
  devk swap apiserver scheduler
  devk swap --rollback apiserver
  devk build kube-proxy --push && devk swap kube-proxy
  devk swap --rollback kube-proxy
  devk swap kubectl                       # into $DEVK_HOME/bin/kubectl
  devk swap kubectl --dest ~/bin/kubectl
  devk swap kubelet
  devk swap --dry-run apiserver
  devk swap apiserver --skip-phases apiserver/hand-over   # as a manifest edit would: the kubelet's back-off included
  devk swap apiserver --kubeconfig ~/work.conf --registry registry.example:5000   # any cluster, through it
  devk swap apiserver --kubeconfig ~/work.conf --load       # no registry the nodes reach
  devk swap kubelet --kubeconfig ~/work.conf --load         # where systemd runs the nodes' kubelets
  devk swap kubelet --tree ../kubernetes-v1.33.9 --node devk-worker   # one worker's kubelet two minors behind`,
		ValidArgsFunction: cli.CompleteNames(cli.SwappableNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Components = args
			o.Reporter = g.Reporter()
			if !binariesOnly(args) {
				// kubectl alone needs no cluster; the rest may be one
				// reached through its API.
				d, err := decide(cmd, g, &node, &access)
				if err != nil && !isNoCluster(err) {
					return err
				}
				if err == nil && d.Mode == remote.ThroughCluster {
					return swapThroughCluster(cmd, g, d, &access, o, &flags, node.Nodes)
				}
			}
			r, err := node.swapNode(&o)
			if err != nil {
				return err
			}
			if r.Cluster != nil {
				defer g.FollowLogs(cmd.Context(), r.Cluster.Config.Name)()
				if r.Cluster.Exists() && !flags.DryRun {
					forced, err := upgrade.SwapSkew(cmd.Context(), r.Cluster, o, forceSkew)
					if err != nil {
						return err
					}
					if forced != "" {
						o.Reporter.Infof("--force-skew: %s", forced)
					}
				}
			}
			if o.KubectlDest == "" {
				o.KubectlDest = swap.DefaultKubectlDest(r.Home)
			}
			popts := g.PhaseOptions(&flags)
			popts.Reporter = o.Reporter
			rep, err := swap.Run(cmd.Context(), o, popts)
			rep.Via = swap.ViaLocal
			if !flags.DryRun {
				printSwap(g, rep)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Rollback, "rollback", false, "restore the manifest (or binary) from before the last swap")
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree whose pushed digests to use (default: the one around the working directory)")
	node.addSwap(f)
	access.AddRemote(f)
	f.Lookup("kubeconfig").Usage = "kubeconfig for the node's API server (kubeadm: " + cli.KubeadmNode.Kubeconfig + ", with --manifests-dir and --cri-socket); alone, any cluster's (as kubectl's): a devk cluster of this machine it names is swapped as --name would, any other through the cluster, by devk's node agent on each control-plane node"
	f.StringVar(&o.KubectlDest, "dest", "", "the `path` swap kubectl installs kubectl at (default $DEVK_HOME/bin/kubectl)")
	f.DurationVar(&o.Timeout, "timeout", swap.DefaultTimeout, "how long to wait for the new pod to be healthy (an addon: for its rollout) before rolling back")
	f.BoolVar(&o.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	f.BoolVar(&forceSkew, "force-skew", false, "swap components of another minor version even where Kubernetes' version skew policy refuses it (a kubelet newer than the API server)")
	phase.Bind(cmd, swap.Phases(), &flags)
	cli.ResultHelp(cmd, swap.Report{}, false)
	return cmd
}

// binariesOnly says args name kubectl alone (which is installed on this
// machine, whatever the cluster).
func binariesOnly(args []string) bool {
	return len(args) > 0 && !slices.ContainsFunc(args, func(a string) bool { return a != "kubectl" })
}

func printSwap(g *cli.Options, rep *swap.Report) {
	if rep == nil {
		return
	}
	if g.Structured() {
		g.Result(rep)
		return
	}
	w := g.Stdout
	if rep.Nothing != "" {
		fmt.Fprintf(w, "nothing to swap: %s\n", rep.Nothing)
	}
	for _, b := range rep.Binaries {
		what := b.Component
		if b.Node != "" && rep.Via == swap.ViaCluster {
			what += " on " + b.Node
		}
		switch {
		case !b.Changed:
			fmt.Fprintf(w, "%s: %s already holds these bytes (%s)\n", what, b.Dest, b.Version)
		default:
			fmt.Fprintf(w, "%s: installed %s (%s)", what, b.Dest, b.Version)
			if b.Prev != "" {
				fmt.Fprintf(w, "; the previous one is %s", b.Prev)
			}
			fmt.Fprintln(w)
		}
		if b.Component == "kubectl" && !onPath(filepath.Dir(b.Dest)) {
			fmt.Fprintf(w, "  put it on your PATH: export PATH=%s:$PATH\n", filepath.Dir(b.Dest))
		}
	}
	for _, r := range rep.StaticPods {
		what := r.Pod
		if r.Node != "" {
			what += " on " + r.Node
		}
		printSwapped(w, what, staticPodStatus(r), r.NewImage, r.OldImage, "ready", r.Ready, r.Took)
		printChecks(w, r.Checks)
		printLog(g.Stderr, "the new "+r.Pod+" container", r.Log)
	}
	for _, r := range rep.Addons {
		status := swapStatus(r.RolledBack, r.Restored, r.Unchanged)
		printSwapped(w, r.Component+" ("+r.Workload+")", status, r.NewImage, r.OldImage, "rolled out", r.RolledOut, r.Took)
		printChecks(w, r.Checks)
		printLog(g.Stderr, "pod "+r.Pod+" (container "+r.Component+")", r.Log)
	}
}

// staticPodStatus is what a swap of a static pod did, or the resume of
// an interrupted swap or run, as printSwap says it.
func staticPodStatus(r *swap.Result) string {
	switch {
	case r.Resumed && r.Run && r.Unchanged:
		return "dropped the journal of the interrupted run (its manifest was rewritten since):"
	case r.Resumed && r.Run:
		return "put back after an interrupted devk run:"
	case r.Resumed && r.RolledBack:
		return "ROLLED BACK the interrupted swap:"
	case r.Resumed && r.Restored:
		return "undid the interrupted swap:"
	case r.Resumed && r.Unchanged:
		return "dropped the journal of the interrupted swap (its manifest was rewritten since):"
	case r.Resumed:
		return "finished the interrupted swap:"
	}
	return swapStatus(r.RolledBack, r.Restored, r.Unchanged)
}

// swapStatus is what a swap of a static pod or an addon did, as
// printSwap says it.
func swapStatus(rolledBack, restored, unchanged bool) string {
	switch {
	case rolledBack:
		return "ROLLED BACK"
	case restored && unchanged:
		return "already restored"
	case restored:
		return "restored"
	case unchanged:
		return "already running"
	}
	return "swapped"
}

// printSwapped prints what a static pod or an addon runs now, what it
// ran before, and how long the swap took: until it was settled (ready,
// rolled out) when it waited for that, and in all.
func printSwapped(w io.Writer, what, status, newImage, oldImage, settledAs string, settled, took time.Duration) {
	fmt.Fprintf(w, "%s: %s %s", what, status, newImage)
	if oldImage != "" && oldImage != newImage {
		fmt.Fprintf(w, " (was %s)", oldImage)
	}
	if settled > 0 {
		fmt.Fprintf(w, " %s in %s, verified in %s\n", settledAs, progress.Round(settled), progress.Round(took))
	} else {
		fmt.Fprintf(w, " in %s\n", progress.Round(took))
	}
}

func printChecks(w io.Writer, checks []swap.Check) {
	for _, c := range checks {
		mark := "✓"
		if !c.OK {
			mark = "✗"
		}
		fmt.Fprintf(w, "  %s %-20s %s", mark, c.Name, c.Got)
		if !c.OK {
			fmt.Fprintf(w, " (want %s)", c.Want)
		}
		fmt.Fprintln(w)
	}
}

func onPath(dir string) bool {
	for _, p := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.Clean(p) == filepath.Clean(dir) {
			return true
		}
	}
	return false
}

// printLog prints the last log lines of what failed, if there are any.
func printLog(w io.Writer, of string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "last log lines of %s:\n", of)
	for _, l := range lines {
		fmt.Fprintf(w, "  | %s\n", l)
	}
}
