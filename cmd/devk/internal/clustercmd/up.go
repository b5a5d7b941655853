// Package clustercmd is the commands of a devk cluster's life: `devk up`,
// `devk down`, `devk node`, `devk status`, `devk certs` and `devk export`.
package clustercmd

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/fakenodes"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// NewUpCmd is `devk up`.
func NewUpCmd(g *cli.Options) *cobra.Command {
	var (
		o            cluster.Options
		flags        phase.Flags
		keepTaint    bool
		certValidity time.Duration
		fakeNodes    int
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring up a throwaway cluster from the tree's components",
		Long: `Bring up a Kubernetes cluster whose control plane runs as static
pods from images built from the tree around you, pushed by digest to the
embedded registry. It is kubeadm's init made for a laptop: each node its
own network and mount namespace with a private containerd and a
supervised kubelet (no systemd), on a bridge only this machine reaches. Then the
addons: kube-proxy and CoreDNS (which answers for the cluster domain only
and forwards no other name: devk's clusters contact nothing beyond the
machine). The node is labelled control-plane but not tainted, so pods
schedule on it as in kind; --keep-taint keeps kubeadm's NoSchedule taint.
--nodes N adds workers (devk-worker, devk-worker2, …), each its own
network namespace, containerd and kubelet, joined as ` + "`devk node add`" + ` joins
them (token discovery with the CA pinned, TLS bootstrap).
--control-planes N makes N of the nodes control-plane nodes (devk-control-plane2,
…): each joins with the cluster's certificates shared as kubeadm's
upload-certs shares them, its own etcd member (added as a learner, then
promoted) and API server, controller-manager and scheduler on its own
address. A cluster made with two or more has HAProxy on the host's bridge
address in front of every API server (health-checked on /readyz): every
kubeconfig, cluster-info and kube-proxy name it, and ` + "`devk swap apiserver`" + `
swaps one node at a time, taking it out of the load balancer first.

Everything the cluster owns is in $DEVK_HOME/clusters/NAME/ (DEVK_HOME
defaults to ~/.devk); the registry keeps its content in $DEVK_HOME/registry.
Context devk-NAME is added to your kubeconfig.

--bootstrapper kubeadm makes the cluster with the tree's own kubeadm, for
kubeadm contributors: devk builds it with the other components, makes the
nodes (each node's /etc/kubernetes, /var/lib/kubelet and /var/lib/etcd are
its own directories, bound in its mount namespace; the host's are never
touched), tags its images with the names kubeadm lists, writes kubeadm's
config from the config file (kubeadmConfigPatches and
kubeadmConfigPatchesJSON6902 patch it, as in kind) and runs kubeadm init on
node 0 and kubeadm join on the others, inside each node (with
--control-planes N, kubeadm join --control-plane behind HAProxy after
node 0's kubeadm uploads the certificates); the kubelet
kubeadm starts through systemctl is devk's, supervised. kubeadm does the
rest, addons included (CoreDNS finds no DNS server beyond the machine).
` + "`devk node exec NODE -- kubeadm …`" + ` runs that kubeadm in the node.

Running it again on a healthy cluster changes nothing; on a half-made one it
resumes. ` + "`devk down`" + ` removes everything. Needs root.

--config FILE describes the cluster (apiVersion devk.dev/v1alpha1, kind
Cluster; docs/config.md has every key): feature gates, the API server's runtime config,
extra flags per component, the pod, Service and node subnets, which addons
to apply, the control-plane taint. It is checked in full before anything
is made (an unknown key is an error) and remembered in cluster.json, so a
later up without --config keeps it. On a running cluster, up --config
applies a changed file: only the static pods, kubelet or kube-proxy whose
flags changed restart; a changed subnet needs ` + "`devk down`" + ` first.

--fake-nodes N (or fakeNodes: in the config file, with groups of their own
capacity, labels, taints and zones) adds N of kwok's fake nodes beside the
real ones, for scheduler, controller and API-server scaling work: kwok
(sigs.k8s.io/kwok ` + build.KwokVersion + `, built from its module) runs supervised in node 0's
namespaces and keeps them Ready and their pods Running by its stages. They
are labelled and tainted ` + layout.FakeNodeTaint + `: only pods that
tolerate it land there; kube-proxy keeps off them. ` + "`devk node add --fake N`" + `
and ` + "`devk node remove --fake N`" + ` change the count; ` + "`devk down`" + ` removes them
with kwok. Each fake node takes a /24 of the pod subnet (the default
10.244.0.0/16 holds 256 nodes: set networking.podSubnet wider for more).`,
		Example: `  devk up
  devk up --name dev2 --tree ~/src/kubernetes
  devk up --nodes 3                    # a control plane and two workers
  devk up --control-planes 3           # three control-plane nodes behind HAProxy
  devk up --config devk.yaml
  devk up --bootstrapper kubeadm --nodes 2   # the tree's kubeadm init and join
  devk up --bootstrapper kubeadm --control-planes 3   # kubeadm's HA: join --control-plane behind HAProxy
  devk up --fake-nodes 200             # and 200 of kwok's fake nodes
  devk up --dry-run
  devk up phase control-plane/apiserver

  # devk.yaml: an alpha gate on the API server alone, kube-proxy left out
  apiVersion: devk.dev/v1alpha1
  kind: Cluster
  apiServer:
    featureGates:
      ComponentFlagz: true
  addons:
    kubeProxy: false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Reporter = g.Reporter()
			if o.ImagesFrom != "" {
				if _, err := cluster.ParseImagesTag(o.ImagesTag); err != nil {
					return err
				}
			}
			if !cmd.Flags().Changed("name") {
				o.Name = "" // the config file's, else the default
			}
			defer g.FollowLogs(cmd.Context(), o.Name)()
			if cmd.Flags().Changed("keep-taint") {
				o.KeepTaint = &keepTaint
			}
			if cmd.Flags().Changed("cert-validity") {
				o.CertValidity = &certValidity
			}
			popts := g.PhaseOptions(&flags)
			if cmd.Flags().Changed("fake-nodes") {
				o.FakeNodes = &fakeNodes
			}
			fake := fakenodes.Options{Options: o}
			if err := fakenodes.Precheck(fake); err != nil {
				return err
			}
			t0 := time.Now()
			c, res, err := cluster.Up(cmd.Context(), o, popts)
			if err == nil && !flags.DryRun && flags.Only == "" && (o.FakeNodes != nil || c.Config.Spec.FakeNodes.Total() > 0) {
				var fres phase.Result
				fres, err = fakenodes.Ensure(cmd.Context(), c, fake, phase.Options{Reporter: progress.Under(o.Reporter, "fake-nodes")})
				for _, t := range fres.Timings {
					t.Path = "fake-nodes/" + t.Path
					res.Timings = append(res.Timings, t)
				}
			}
			if err != nil {
				var failed *phase.Failed
				if c != nil && c.Exists() && !flags.DryRun && flags.Only == "" && (errors.As(err, &failed) || cmd.Context().Err() != nil) {
					return fmt.Errorf("%w\nthe cluster is left as it is: run `devk up` again to resume, or `devk down%s` to remove it", err, nameFlag(c.Config.Name))
				}
				return err
			}
			if flags.DryRun {
				return nil
			}
			return printUp(g, c, res, time.Since(t0), flags.Only)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", layout.DefaultName, "cluster name (directory $DEVK_HOME/clusters/NAME, context devk-NAME)")
	f.StringVar(&o.UserConfigFile, "config", "", "cluster config file (apiVersion devk.dev/v1alpha1, kind Cluster): make the cluster by it, or apply it to the running one")
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree to build from (default: the one around the working directory)")
	f.StringVar(&o.Registry, "registry", "", "push to and pull from this running registry (HOST:PORT) instead of starting the embedded one")
	f.StringVar(&o.ImagesFrom, "images-from", "", "take the control-plane images from this registry instead of building them, at the tags --images-tag names (needs a kubelet already installed in the cluster)")
	f.StringVar(&o.ImagesTag, "images-tag", "", "with --images-from (required): the tag of the Kubernetes images and etcd's, TAG,etcd=TAG, e.g. v1.34.4,etcd=3.6.5-0; COMPONENT=TAG or COMPONENT=sha256:… names one component's tag or digest. devk never takes the newest tag it finds")
	f.StringVar(&o.UserKubeconfig, "write-kubeconfig", "", "kubeconfig to add context devk-NAME to (default $KUBECONFIG, else ~/.kube/config)")
	// --kubeconfig meant this before it meant, everywhere, the credentials
	// devk talks to an API server with (as kubectl's).
	f.StringVar(&o.UserKubeconfig, "kubeconfig", "", "same as --write-kubeconfig")
	cli.Deprecate(f, "kubeconfig", "use --write-kubeconfig (--kubeconfig is the credentials devk uses, as kubectl's)")
	f.DurationVar(&o.WaitTimeout, "wait", cluster.DefaultWaitTimeout, "how long wait-control-plane waits for the control plane and node")
	f.DurationVar(&certValidity, "cert-validity", pki.CertValidity, "lifetime of the certificates and kubeconfig client certificates up issues (e.g. 10m, to test rotation; later ups remember it); existing ones are replaced with half their life or a day left")
	f.BoolVar(&o.RenewCerts, "renew-certs", false, "renew every certificate once the control plane runs, restart what uses them and verify (devk certs renew all); up warns when any expires within 30 days")
	f.IntVar(&o.Nodes, "nodes", 0, "how many nodes the cluster has: node 0, then control-plane nodes up to --control-planes, then workers, joined as `devk node add` joins them (default: as many as it has; a new cluster: 1)")
	f.IntVar(&o.ControlPlanes, "control-planes", 0, "how many of the nodes are control-plane nodes, each with its own etcd member and API server; 2 or more give a new cluster HAProxy in front of the API servers, the endpoint of every kubeconfig (default: as many as it has; a new cluster: 1)")
	f.BoolVar(&o.AllowBridgeForward, strings.TrimPrefix(cluster.AllowBridgeForwardFlag, "--"), false, "add one rule to the host's iptables FORWARD chain accepting traffic between the cluster's nodes on its bridge, for hosts whose FORWARD policy drops it (Docker's); down removes it")
	f.StringVar(&o.Bootstrapper, "bootstrapper", "", "what bootstraps a new cluster: devk (devk's own phases, the default) or kubeadm (the tree's kubeadm init and join inside the nodes, its addons; the config file's bootstrapper key says the same); an existing cluster keeps its own")
	f.StringSliceVar(&o.KubeadmSkipPhases, "kubeadm-skip-phases", nil, "with --bootstrapper kubeadm: kubeadm init phases to skip (kubeadm's --skip-phases, e.g. addon/kube-proxy)")
	f.IntVar(&fakeNodes, "fake-nodes", 0, "how many of kwok's fake nodes the cluster has beside its real ones (default: as many as it has; the config file's fakeNodes says the same, with groups)")
	f.BoolVar(&keepTaint, "keep-taint", false, "keep the control-plane NoSchedule taint on the node (later ups remember it until --keep-taint=false)")
	phase.Bind(cmd, cluster.UpPhases(), &flags)
	cli.ResultHelp(cmd, upResult{}, false)
	return cmd
}

func nameFlag(name string) string {
	if name == "" || name == layout.DefaultName {
		return ""
	}
	return " --name " + name
}

type upResult struct {
	Name       string               `json:"name"`
	Dir        string               `json:"dir"`
	Context    string               `json:"context"`
	Kubeconfig string               `json:"kubeconfig"`
	Node       string               `json:"node"`
	Version    string               `json:"version"`
	Images     map[string]string    `json:"images"`
	Seconds    float64              `json:"seconds"`
	Changed    bool                 `json:"changed"`
	Phases     []layout.PhaseTiming `json:"phases"`
	// FakeNodes is how many of kwok's fake nodes the cluster has.
	FakeNodes int `json:"fakeNodes,omitempty"`
	// Kubectl is the kubectl built from the cluster's tree, if installed.
	Kubectl string `json:"kubectl,omitempty"`
}

func printUp(g *cli.Options, c *cluster.Cluster, res phase.Result, took time.Duration, only string) error {
	r := upResult{Name: c.Config.Name, Dir: c.Files.Dir, Context: cluster.ContextName(c.Config.Name), Kubeconfig: c.FirstNode().Files.Kubeconfig("admin"),
		Node: c.Config.FirstNode().Name, Version: c.Config.KubeVersion, Images: c.Config.Images, Seconds: took.Seconds(), Changed: res.Changed(), Phases: cluster.PhaseTimings(res), FakeNodes: c.Config.Spec.FakeNodes.Total()}
	kubectl := "kubectl"
	if _, err := os.Stat(c.KubectlPath()); err == nil {
		r.Kubectl, kubectl = c.KubectlPath(), c.KubectlPath()
	}
	if g.Structured() {
		return g.Result(r)
	}
	if only != "" {
		fmt.Fprintf(g.Stdout, "phase %s of cluster %s done in %s\n", only, r.Name, progress.Round(took))
		return nil
	}
	if r.Changed {
		fake := ""
		if r.FakeNodes > 0 {
			fake = fmt.Sprintf(", %d fake nodes", r.FakeNodes)
		}
		fmt.Fprintf(g.Stdout, "cluster %s is up (%s, node %s%s) in %s\n", r.Name, r.Version, r.Node, fake, progress.Round(took))
	} else {
		fmt.Fprintf(g.Stdout, "cluster %s was up and healthy already; nothing changed (checked in %s)\n", r.Name, progress.Round(took))
	}
	fmt.Fprintf(g.Stdout, "  %s --kubeconfig %s get pods -A\n", kubectl, r.Kubeconfig)
	fmt.Fprintf(g.Stdout, "  or: kubectl --context %s (context added to your kubeconfig)", r.Context)
	if r.Kubectl != "" {
		fmt.Fprintf(g.Stdout, "; kubectl built from the tree: %s", r.Kubectl)
	}
	fmt.Fprintln(g.Stdout)
	return nil
}
