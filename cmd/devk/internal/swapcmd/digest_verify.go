package swapcmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
)

func newDigestVerifyCmd(g *cli.Options) *cobra.Command {
	var (
		o    digest.Options
		node nodeFlags
	)
	cmd := &cobra.Command{
		Use:   "verify [COMPONENT...]",
		Short: "Exit non-zero unless pushed, registry, manifest, CRI and API views agree",
		Long: `Check that a static-pod component runs exactly what devk pushed: the digest
recorded at push, the registry's digest for that tag, the image the manifest
names, the imageRef of the running container (CRI) and the imageID of the
mirror pod must all be the same. For an addon (kube-proxy, coredns) the
views are the workload's image and every pod's imageID (and the CRI
imageRef, on every node of a devk cluster; on a kubeadm node, for its own
pods); an addon the cluster does not run is
reported as not on the cluster, not as a mismatch. With no COMPONENT, every
static-pod component and addon that was pushed is checked.

Exit status: 0 when all agree, 2 on any mismatch, 1 when a view could not
be read.`,
		Example: `  devk digest verify
  devk digest verify apiserver && echo "the cluster runs my build"
  devk digest verify kube-proxy`,
		ValidArgsFunction: cli.CompleteNames(cli.StaticPodAndAddonNames),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			o.Components = args
			if len(args) == 0 {
				if o.Components, err = digest.PushedOnCluster(o.TreeDir); err != nil {
					return err
				}
			}
			for _, name := range o.Components {
				if _, isAddon := addon.Lookup(name); isAddon {
					continue
				}
				if c, err := build.Lookup(name); err == nil && !c.StaticPod {
					return fmt.Errorf("%s is neither a static pod nor an addon: verify checks what the cluster's static pods and addons run", name)
				}
			}
			return runDigest(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	f.BoolVar(&o.Remote.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	node.add(f)
	cli.ResultHelp(cmd, []digest.Report{}, false)
	return cmd
}
