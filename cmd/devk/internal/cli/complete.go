package cli

import (
	"slices"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/layout"
)

// Shell completion of the names commands take, derived from build's
// catalog and the addons so a new component completes everywhere.

// StaticPodAndAddonNames are what the cluster runs as static pods and
// addons: what digest verify checks.
func StaticPodAndAddonNames() []string {
	var out []string
	for _, c := range build.Catalog {
		if c.StaticPod {
			out = append(out, c.Name)
		}
	}
	for _, w := range addon.Workloads {
		if !slices.Contains(out, w.Component) {
			out = append(out, w.Component)
		}
	}
	return out
}

// SwappableNames are what devk swap takes: static pods, addons and the
// kubectl and kubelet binaries.
func SwappableNames() []string {
	return append(StaticPodAndAddonNames(), "kubectl", "kubelet")
}

// TreeComponentNames are the components built from the tree (what devk
// watch can watch).
func TreeComponentNames() []string {
	var out []string
	for _, c := range build.Catalog {
		if !c.External {
			out = append(out, c.Name)
		}
	}
	return out
}

// KubeadmNode is kubeadm's layout of a node, which the help of the
// flags naming a node devk did not make gives as the default.
var KubeadmNode = layout.Kubeadm("")

// CompleteNames completes each argument from names, once each.
func CompleteNames(names func() []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, n := range names() {
			if !slices.Contains(args, n) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeClusterNames offers the clusters under $DEVK_HOME.
func completeClusterNames(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	home, err := layout.HomeDir("")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return layout.Clusters(home), cobra.ShellCompDirectiveNoFileComp
}

// RegisterClusterCompletion completes --name (and etcd's old --cluster)
// with cluster names on every command that has it.
func RegisterClusterCompletion(c *cobra.Command) {
	for _, name := range []string{"name", "cluster"} {
		if c.LocalFlags().Lookup(name) != nil || c.PersistentFlags().Lookup(name) != nil {
			_ = c.RegisterFlagCompletionFunc(name, completeClusterNames)
		}
	}
	for _, sub := range c.Commands() {
		RegisterClusterCompletion(sub)
	}
}
