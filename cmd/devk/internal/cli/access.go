package cli

import (
	"github.com/spf13/pflag"
)

// Access are the flags of a command that can reach a cluster through its
// API alone (devk's node agent, package remote): which cluster, and the
// registry its nodes pull devk's agent image from.
type Access struct {
	// Kubeconfig is --kubeconfig: the cluster's credentials, as kubectl's
	// ("": $KUBECONFIG, else ~/.kube/config).
	Kubeconfig string
	// ViaCluster is --via-cluster.
	ViaCluster bool
	// Registry is --registry: where devk pushes its agent image for the
	// nodes to pull.
	Registry string
}

// Add puts the access flags on fs.
func (a *Access) Add(fs *pflag.FlagSet) {
	fs.StringVar(&a.Kubeconfig, "kubeconfig", "", "a cluster's kubeconfig, as kubectl's (default $KUBECONFIG, else ~/.kube/config): a devk cluster of this machine it names runs as --name would; any other through the cluster, by devk's node agent")
	fs.BoolVar(&a.ViaCluster, "via-cluster", false, "through the cluster even when the kubeconfig names a devk cluster of this machine")
	fs.StringVar(&a.Registry, "registry", "", "through the cluster: the registry devk pushes its node agent's image to, which the nodes pull from (host[:port][/prefix])")
}
