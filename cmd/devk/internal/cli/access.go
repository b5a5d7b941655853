package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/remote"
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
	// Load is --load: devk sends its images to the nodes through the API
	// instead.
	Load bool
}

// Agent is where the nodes get devk's agent image from.
func (a *Access) Agent() remote.Agent { return remote.Agent{Registry: a.Registry, Load: a.Load} }

// Add puts the access flags on fs.
func (a *Access) Add(fs *pflag.FlagSet) {
	a.AddAPI(fs)
	a.addRegistry(fs)
}

// AddAPI puts --kubeconfig and --via-cluster on fs, for a command that
// reads a cluster reached through its API with no node agent.
func (a *Access) AddAPI(fs *pflag.FlagSet) {
	fs.StringVar(&a.Kubeconfig, "kubeconfig", "", "a cluster's kubeconfig, as kubectl's (default $KUBECONFIG, else ~/.kube/config): a devk cluster of this machine it names runs as --name would; any other through the cluster")
	a.addVia(fs)
}

// AddRemote puts --via-cluster and --registry on fs, for a command whose
// --kubeconfig is defined already.
func (a *Access) AddRemote(fs *pflag.FlagSet) {
	a.addVia(fs)
	a.addRegistry(fs)
}

func (a *Access) addVia(fs *pflag.FlagSet) {
	fs.BoolVar(&a.ViaCluster, "via-cluster", false, "through the cluster even when the kubeconfig names a devk cluster of this machine")
}

func (a *Access) addRegistry(fs *pflag.FlagSet) {
	fs.StringVar(&a.Registry, "registry", "", "through the cluster: the registry devk pushes its node agent's image to, which the nodes pull from (host[:port][/prefix])")
	fs.BoolVar(&a.Load, "load", false, "through the cluster, with no registry the nodes reach: devk sends its images to each node's runtime through the API (as `kind load` does), named "+agentLoaded)
}

// agentLoaded is how --load's help names what it loads.
var agentLoaded = agent.LoadRegistry + "/NAME@sha256:…"

// Decide is which way cmd runs (remote.Decide) given its --name (name),
// what this machine has without a cluster (local, "" for nothing), the
// access flags and those of nodeFlags (node files: --pki-dir, …) the
// user set. It says which way when the kubeconfig decided it, and
// refuses --registry on this machine.
func (a *Access) Decide(cmd *cobra.Command, g *Options, name, local string, nodeFlags ...string) (remote.Decision, error) {
	home, err := layout.HomeDir("")
	if err != nil {
		return remote.Decision{}, err
	}
	in := remote.Input{Home: home, Name: name, NameSet: cmd.Flags().Changed("name") || cmd.Flags().Changed("cluster"), Kubeconfig: a.Kubeconfig, ViaCluster: a.ViaCluster, Local: local}
	for _, fl := range nodeFlags {
		if cmd.Flags().Changed(fl) {
			in.NodeFlags = append(in.NodeFlags, "--"+fl)
		}
	}
	d, err := remote.Decide(in)
	if err != nil {
		return d, err
	}
	if d.Mode == remote.ThroughCluster || a.Kubeconfig != "" {
		g.Reporter().Infof("%s", d.Why)
	}
	if d.Mode != remote.ThroughCluster && a.Registry != "" {
		return d, fmt.Errorf("--registry is for a cluster reached through its API (%s)", d.Why)
	}
	if d.Mode != remote.ThroughCluster && a.Load {
		return d, fmt.Errorf("--load is for a cluster reached through its API (%s)", d.Why)
	}
	return d, nil
}
