package swapcmd

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/remote"
)

func newDigestVerifyCmd(g *cli.Options) *cobra.Command {
	var (
		o      digest.Options
		node   nodeFlags
		access cli.Access
	)
	cmd := &cobra.Command{
		Use:   "verify [COMPONENT...]",
		Short: "Exit non-zero unless pushed, registry, manifest, CRI and API views agree",
		Long: `Check that a static-pod component runs exactly what devk pushed: the digest
recorded at push, the registry's digest for that tag, the image the manifest
names (one it names by tag alone, as kubeadm's do: the digest the node's
runtime has for that tag), the imageRef of the running container (CRI) and
the imageID of the mirror pod must all be the same. For an addon (kube-proxy, coredns) the
views are the workload's image and every pod's imageID (and the CRI
imageRef, on every node of a devk cluster; on a kubeadm node, for its own
pods); an addon the cluster does not run is
reported as not on the cluster, not as a mismatch. With no COMPONENT, every
static-pod component and addon that was pushed is checked.

A cluster devk did not make on this machine is verified through its API,
with --kubeconfig alone (else $KUBECONFIG's current context when there is
no devk cluster named devk here; --via-cluster forces it): devk pushes an
image of itself to --registry, which the nodes must pull from, and runs
it as a short-lived pod on each control-plane node (the nodes running a
kube-apiserver static pod), which reads the manifest and asks the node's
runtime (the kubelet's staticPodPath and containerRuntimeEndpoint,
mounted read-only) and prints what it saw; the mirror pods and addons are
read through the API. Every node's views are labelled with it
(manifest@cp2). The first line says which way devk runs.

Exit status: 0 when all agree, 2 on any mismatch, 1 when a view could not
be read.`,
		Example: `  devk digest verify
  devk digest verify apiserver && echo "the cluster runs my build"
  devk digest verify kube-proxy
  devk digest verify apiserver --kubeconfig ~/work.conf --registry registry.example:5000`,
		ValidArgsFunction: cli.CompleteNames(cli.StaticPodAndAddonNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := decide(cmd, g, &node, &access)
			if err != nil {
				return err
			}
			if d.Mode == remote.ThroughCluster {
				return verifyThroughCluster(cmd, g, d, &access, o, args)
			}
			r, err := node.resolve()
			if err != nil {
				return err
			}
			sources, closeSources, err := digest.NodeSources(cmd.Context(), r.Node, r.NodeName, r.otherRuntimes())
			if err != nil {
				return err
			}
			defer closeSources()
			more, closeMore, err := r.otherControlPlaneSources(cmd.Context())
			if err != nil {
				return err
			}
			defer closeMore()
			o.Extra = append(sources, more...)
			if o.Components, err = verifiedComponents(o.TreeDir, args); err != nil {
				return err
			}
			return runDigest(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	f.BoolVar(&o.Remote.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	node.add(f)
	access.AddRemote(f)
	f.Lookup("kubeconfig").Usage = "kubeconfig for the node's API server (kubeadm: " + cli.KubeadmNode.Kubeconfig + ", with --manifests-dir and --cri-socket); alone, any cluster's (as kubectl's): a devk cluster of this machine it names is verified as --name would, any other through the cluster, by devk's node agent"
	cli.ResultHelp(cmd, []digest.Report{}, false)
	return cmd
}

// verifiedComponents are the components verify checks: those named, else
// every static pod and addon pushed from the tree; each must be one of
// those kinds.
func verifiedComponents(tree string, args []string) ([]string, error) {
	comps := args
	if len(comps) == 0 {
		var err error
		if comps, err = digest.PushedOnCluster(tree); err != nil {
			return nil, err
		}
	}
	for _, name := range comps {
		if _, isAddon := addon.Lookup(name); isAddon {
			continue
		}
		if c, err := build.Lookup(name); err == nil && !c.StaticPod {
			return nil, fmt.Errorf("%s is neither a static pod nor an addon: verify checks what the cluster's static pods and addons run", name)
		}
	}
	return comps, nil
}

// decide is which way a command with the node flags runs: --manifests-dir
// and --cri-socket name a node's files; --kubeconfig alone a cluster, on
// this machine when it is a devk cluster here (then --name is set to it),
// else through the cluster.
func decide(cmd *cobra.Command, g *cli.Options, node *nodeFlags, access *cli.Access) (remote.Decision, error) {
	access.Kubeconfig = node.Kubeconfig
	d, err := access.Decide(cmd, g, node.Name, "", "manifests-dir", "cri-socket")
	if err == nil && d.Mode == remote.DevkCluster {
		node.Name, node.Kubeconfig = d.Name, ""
	}
	return d, err
}

// verifyThroughCluster is verify on a cluster reached through its API:
// each control-plane node's manifest and runtime read by devk's node
// agent there, the mirror pods and addons through the API.
func verifyThroughCluster(cmd *cobra.Command, g *cli.Options, d remote.Decision, access *cli.Access, o digest.Options, args []string) error {
	comps, err := verifiedComponents(o.TreeDir, args)
	if err != nil {
		return err
	}
	var binaries []string
	for _, name := range comps {
		if c, err := build.Lookup(name); err == nil && c.StaticPod {
			binaries = append(binaries, c.Binary)
		}
	}
	ctx := cmd.Context()
	s, err := remote.Connect(ctx, d, access.Agent(), g.Version().Version, o.Remote, g.Reporter(), append(slices.Clone(remote.ControlPlaneNeeds), remote.DigestNeeds...))
	if err != nil {
		return err
	}
	defer s.Close()
	if o.Extra, err = s.DigestSources(ctx, binaries); err != nil {
		return err
	}
	o.Components = comps
	return runDigest(ctx, g, o)
}
