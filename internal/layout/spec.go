package layout

import (
	"maps"
	"net"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultServiceCIDR is the cluster's Service network, kubeadm's.
const DefaultServiceCIDR = "10.96.0.0/16"

// The bootstrappers, Spec.Bootstrapper's values: what makes the nodes'
// control plane and joins them.
const (
	// BootstrapperDevk is devk's own phases (the default; "" means it).
	BootstrapperDevk = "devk"
	// BootstrapperKubeadm is the tree's kubeadm: kubeadm init on node 0,
	// kubeadm join on the others, from the config devk writes
	// (cluster/internal/kubeadmconfig) with the spec's patches applied.
	BootstrapperKubeadm = "kubeadm"
)

// KubeadmControllersHost is where kubeadm's manifests bind the
// controller-manager and the scheduler (--bind-address): the node's own
// loopback, reached from inside its network namespace.
const KubeadmControllersHost = "127.0.0.1"

// Controller is where the controller-manager or the scheduler of
// control-plane node n serves its secure port (https://host:port):
// devk's bind to the node's address, reached from the host (netns "");
// kubeadm's to KubeadmControllersHost, reached from inside the node's
// network namespace (netns).
func (c Config) Controller(n NodeNet, port int) (base, netns string) {
	host := n.IP
	if c.Spec.Kubeadm() {
		host, netns = KubeadmControllersHost, n.NetNSPath()
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(port)), netns
}

// Spec is what a cluster's config file (`devk up --config`) sets beyond
// the layout, as last applied: feature gates, the API server's runtime
// config, each component's extra flags, which addons up applies, and
// the API server's audit log.
// The networks and the taint it sets are the Config's own fields
// (PodCIDR, ServiceCIDR, Network.Subnet, KeepTaint). A later `devk up`
// without --config keeps it.
type Spec struct {
	// FeatureGates go to every component that takes --feature-gates.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// RuntimeConfig is the API server's --runtime-config.
	RuntimeConfig map[string]string `json:"runtimeConfig,omitempty"`
	// EmulatedVersion (MAJOR.MINOR) is the version whose APIs and
	// features the API server, controller-manager and scheduler emulate
	// (--emulated-version: compatibility versions, Kubernetes 1.31+);
	// unset, their own.
	EmulatedVersion   string    `json:"emulatedVersion,omitempty"`
	APIServer         Component `json:"apiServer,omitzero"`
	ControllerManager Component `json:"controllerManager,omitzero"`
	Scheduler         Component `json:"scheduler,omitzero"`
	Kubelet           Component `json:"kubelet,omitzero"`
	KubeProxy         Component `json:"kubeProxy,omitzero"`
	Addons            Addons    `json:"addons,omitzero"`
	// CertValidity is the lifetime of the leaf certificates and
	// kubeconfig client certificates up issues (kubeadm's year when
	// unset); the CAs keep ten years.
	CertValidity *metav1.Duration `json:"certValidity,omitempty"`
	// Audit is the API server's audit log, which `devk trace` reads.
	Audit Audit `json:"audit,omitzero"`
	// Bootstrapper is BootstrapperDevk ("" too) or BootstrapperKubeadm.
	Bootstrapper string `json:"bootstrapper,omitempty"`
	// KubeadmConfigPatches are merge patches, each a YAML document with
	// the kind (and, optionally, the apiVersion) of the kubeadm config
	// documents it patches, as kind's kubeadmConfigPatches.
	KubeadmConfigPatches []string `json:"kubeadmConfigPatches,omitempty"`
	// KubeadmConfigPatchesJSON6902 are RFC 6902 patches of the kubeadm
	// config documents, as kind's kubeadmConfigPatchesJSON6902.
	KubeadmConfigPatchesJSON6902 []PatchJSON6902 `json:"kubeadmConfigPatchesJSON6902,omitempty"`
	// FakeNodes are kwok's nodes beside the real ones.
	FakeNodes FakeNodes `json:"fakeNodes,omitzero"`
}

// PatchJSON6902 is an RFC 6902 JSON patch of the kubeadm config
// documents of a group, version and kind (kind's shape).
type PatchJSON6902 struct {
	// Group, Version and Kind select the documents; an empty group or
	// version selects any.
	Group   string `json:"group,omitempty"`
	Version string `json:"version,omitempty"`
	Kind    string `json:"kind"`
	// Patch is the list of operations, in YAML or JSON.
	Patch string `json:"patch"`
}

// Kubeadm says whether kubeadm bootstraps the cluster.
func (s Spec) Kubeadm() bool { return s.Bootstrapper == BootstrapperKubeadm }

// BootstrappedBy is Bootstrapper, BootstrapperDevk when unset.
func (s Spec) BootstrappedBy() string {
	if s.Bootstrapper == "" {
		return BootstrapperDevk
	}
	return s.Bootstrapper
}

// Audit says whether the API server writes an audit log and by which
// policy: devk's (nil Enabled and no PolicyFile) or the user's own.
type Audit struct {
	// Enabled: nil means yes.
	Enabled *bool `json:"enabled,omitempty"`
	// PolicyFile is an audit.k8s.io/v1 Policy on this machine (an
	// absolute path) used instead of devk's; up copies it to each
	// control-plane node.
	PolicyFile string `json:"policyFile,omitempty"`
}

// On says whether the API server writes an audit log.
func (a Audit) On() bool { return On(a.Enabled) }

// LeafValidity is CertValidity as a duration, 0 when unset.
func (s Spec) LeafValidity() time.Duration {
	if s.CertValidity == nil {
		return 0
	}
	return s.CertValidity.Duration
}

// Component is what the spec sets for one component.
type Component struct {
	// ExtraArgs are flags (name without dashes -> value) added to the
	// component's command line.
	ExtraArgs map[string]string `json:"extraArgs,omitempty"`
	// FeatureGates are this component's alone, over the spec's.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
}

// Addons say which addons `devk up` applies; nil means yes.
type Addons struct {
	KubeProxy *bool `json:"kubeProxy,omitempty"`
	CoreDNS   *bool `json:"coreDNS,omitempty"`
}

// On says whether an addon switch is on (unset is on).
func On(b *bool) bool { return b == nil || *b }

// Gates are the feature gates of component c: the spec's, with c's own
// over them; nil when there are none.
func (s Spec) Gates(c Component) map[string]bool {
	if len(s.FeatureGates) == 0 && len(c.FeatureGates) == 0 {
		return nil
	}
	out := maps.Clone(s.FeatureGates)
	if out == nil {
		out = map[string]bool{}
	}
	maps.Copy(out, c.FeatureGates)
	return out
}

// PlaceAt gives a new cluster the node subnet the user chose, after
// checking that no host route or address (taken) and no other cluster's
// nodes overlap it.
func (c *Config) PlaceAt(subnet *net.IPNet, others []Config, taken []*net.IPNet) error {
	for _, n := range taken {
		if Overlaps(subnet, n) {
			return &SubnetTakenError{Subnet: subnet, By: "the host's route or address " + n.String()}
		}
	}
	for _, o := range others {
		if _, n, err := net.ParseCIDR(o.Network.Subnet); err == nil && Overlaps(subnet, n) {
			return &SubnetTakenError{Subnet: subnet, By: "devk cluster " + o.Name + "'s nodes (" + n.String() + ")"}
		}
	}
	c.place(subnet)
	return nil
}

// SubnetTakenError says a node subnet overlaps one in use.
type SubnetTakenError struct {
	Subnet *net.IPNet
	By     string
}

func (e *SubnetTakenError) Error() string {
	return e.Subnet.String() + " overlaps " + e.By
}

// place puts the cluster's nodes in subnet.
func (c *Config) place(subnet *net.IPNet) {
	c.Network = NewNetwork(c.Name, FirstNodeName(c.Name), subnet)
}
