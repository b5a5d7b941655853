// Package remote runs devk's node-side work on a cluster devk reaches
// only through its kubeconfig: which mode a command runs in (Decide),
// and the node agent's pods (Session): devk's own binary as an image,
// one short-lived pod per node in namespace devk-system with only the
// host paths its task reads, its result read from the pod's log, and
// every pod of the run deleted when the command ends.
package remote

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/pki"
)

// Mode is where a command's node-side work runs.
type Mode int

const (
	// NodeFiles: on this machine, on the files the node flags name (a
	// kubeadm node devk runs on).
	NodeFiles Mode = iota
	// DevkCluster: a devk cluster of this machine, by its name.
	DevkCluster
	// ThroughCluster: through the cluster's API, by the node agent.
	ThroughCluster
)

// Input is what a command was given that decides its mode.
type Input struct {
	// Home is the resolved devk home.
	Home string
	// Name is --name, NameSet whether it was given.
	Name    string
	NameSet bool
	// Kubeconfig is --kubeconfig ("": client-go's rules, $KUBECONFIG then
	// ~/.kube/config).
	Kubeconfig string
	// NodeFlags are the node flags given (--pki-dir, --manifests-dir, …),
	// by name.
	NodeFlags []string
	// ViaCluster is --via-cluster.
	ViaCluster bool
	// Local, when set, says this machine has what the command reads
	// without a devk cluster (a kubeadm node's /etc/kubernetes, etcdctl's
	// variables), which it uses when nothing else is named.
	Local string
}

// Decision is the mode a command runs in, and the line that says why.
type Decision struct {
	Mode Mode
	// Name is the devk cluster (DevkCluster).
	Name string
	// Target is the cluster's access (ThroughCluster).
	Target *Target
	// Why is the line the command shows before it starts.
	Why string
}

// Target is a cluster as a kubeconfig names it.
type Target struct {
	// Kubeconfig is the file given, "" for client-go's rules.
	Kubeconfig string
	// Context and Server are the current context and its server.
	Context, Server string
	config          clientcmd.ClientConfig
}

// Decide picks the mode, in order: node flags → the files they name
// (--via-cluster beside them is an error); --via-cluster → through the
// cluster; --name → that devk cluster; --kubeconfig → the devk cluster of
// this home it names (its server and CA), else through the cluster;
// nothing → the default devk cluster if there is one, else what this
// machine has (Local), else the current context of $KUBECONFIG (or
// ~/.kube/config) through the cluster.
func Decide(in Input) (Decision, error) {
	if len(in.NodeFlags) > 0 {
		if in.ViaCluster {
			return Decision{}, fmt.Errorf("--via-cluster and %s: the node flags name files on this machine, --via-cluster reaches the nodes through the cluster; give one", strings.Join(in.NodeFlags, ", "))
		}
		return Decision{Mode: NodeFiles, Why: "on this machine: the node files " + strings.Join(in.NodeFlags, ", ") + " name"}, nil
	}
	if in.NameSet && in.ViaCluster {
		return Decision{}, errors.New("--name and --via-cluster: --name is a devk cluster of this machine, --via-cluster one reached through its kubeconfig (--kubeconfig, or the current context); give one")
	}
	devk := func(name string) Decision {
		return Decision{Mode: DevkCluster, Name: name, Why: fmt.Sprintf("on this machine: devk cluster %q (%s)", name, layout.HomeFiles(in.Home).Cluster(name).Dir)}
	}
	if in.NameSet {
		return devk(in.Name), nil
	}
	if !in.ViaCluster && in.Kubeconfig == "" {
		if slices.Contains(layout.Clusters(in.Home), layout.DefaultName) {
			return devk(layout.DefaultName), nil // even a broken one: its command says what is wrong
		}
		if in.Local != "" {
			return Decision{Mode: NodeFiles, Why: "on this machine: " + in.Local}, nil
		}
	}
	t, err := Load(in.Kubeconfig)
	if err != nil {
		if !in.ViaCluster && in.Kubeconfig == "" {
			return Decision{}, fmt.Errorf("%w, and no kubeconfig names a cluster to reach through its API (%v): pass --name, or --kubeconfig", layout.NoCluster(in.Home, layout.DefaultName), err)
		}
		return Decision{}, err
	}
	if !in.ViaCluster {
		if name, ok := t.devkCluster(in.Home); ok {
			return devk(name), nil
		}
	}
	why := "--via-cluster"
	if !in.ViaCluster {
		why = "it is no devk cluster of " + in.Home
	}
	return Decision{Mode: ThroughCluster, Target: t, Why: fmt.Sprintf("through the cluster: %s (%s); devk's node agent runs in namespace %s", t, why, Namespace)}, nil
}

// Load reads the kubeconfig (file "" : client-go's rules) and its current
// context.
func Load(file string) (*Target, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = file
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", orRules(file), err)
	}
	ctx, ok := raw.Contexts[raw.CurrentContext]
	if raw.CurrentContext == "" || !ok {
		return nil, fmt.Errorf("kubeconfig %s has no current context (kubectl config use-context NAME)", orRules(file))
	}
	cl, ok := raw.Clusters[ctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s: context %s names cluster %q, which it does not have", orRules(file), raw.CurrentContext, ctx.Cluster)
	}
	return &Target{Kubeconfig: file, Context: raw.CurrentContext, Server: cl.Server, config: cc}, nil
}

func orRules(file string) string {
	if file == "" {
		return "($KUBECONFIG, else ~/.kube/config)"
	}
	return file
}

// RESTConfig is the target's connection.
func (t *Target) RESTConfig() (*rest.Config, error) { return t.config.ClientConfig() }

func (t *Target) String() string {
	return fmt.Sprintf("kubeconfig %s, context %s, server %s", orRules(t.Kubeconfig), t.Context, t.Server)
}

// devkCluster is the devk cluster of home whose API server and CA the
// target's are: the CA, not a name, says it is the same cluster (one made
// again under the same name has a new CA).
func (t *Target) devkCluster(home string) (string, bool) {
	raw, err := t.config.RawConfig()
	if err != nil {
		return "", false
	}
	ca := caData(raw.Clusters[raw.Contexts[raw.CurrentContext].Cluster])
	if len(ca) == 0 {
		return "", false
	}
	for _, cfg := range layout.Configs(home, "") {
		if cfg.APIServerURL() != t.Server {
			continue
		}
		own, err := os.ReadFile(pki.CertPath(layout.HomeFiles(home).Cluster(cfg.Name).FirstNode().PKI(), pki.CAName))
		if err == nil && bytes.Equal(bytes.TrimSpace(own), bytes.TrimSpace(ca)) {
			return cfg.Name, true
		}
	}
	return "", false
}

// caData is a kubeconfig cluster's CA, inline or from its file.
func caData(cl *clientcmdapi.Cluster) []byte {
	if cl == nil {
		return nil
	}
	if len(cl.CertificateAuthorityData) > 0 {
		return cl.CertificateAuthorityData
	}
	if cl.CertificateAuthority != "" {
		data, _ := os.ReadFile(filepath.Clean(cl.CertificateAuthority))
		return data
	}
	return nil
}
