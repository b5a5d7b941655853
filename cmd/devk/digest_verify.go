package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
)

func newDigestVerifyCmd(g *globalOptions) *cobra.Command {
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
mirror pod must all be the same. With no COMPONENT, every static-pod
component that was pushed is checked.

Exit status: 0 when all agree, 2 on any mismatch, 1 when a view could not
be read.

Examples:
  devk digest verify
  devk digest verify apiserver && echo "the cluster runs my build"`,
		ValidArgsFunction: cobra.FixedCompletions([]string{"apiserver", "controller-manager", "scheduler", "etcd"}, cobra.ShellCompDirectiveNoFileComp),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := node.resolve()
			if err != nil {
				return err
			}
			sources, closeSources, err := digest.NodeSources(cmd.Context(), r.Node, r.NodeName)
			if err != nil {
				return err
			}
			defer closeSources()
			o.Extra = sources
			o.Components = args
			if len(args) == 0 {
				if o.Components, err = digest.PushedStaticPods(o.TreeDir); err != nil {
					return err
				}
			}
			for _, name := range o.Components {
				if c, err := build.Lookup(name); err == nil && !c.StaticPod {
					return fmt.Errorf("%s is not a static pod: verify checks what the cluster's static pods run", name)
				}
			}
			return runDigest(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	f.BoolVar(&o.Remote.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	node.add(f)
	return cmd
}
