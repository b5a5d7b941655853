package config

import (
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/pki"
)

const (
	// NodeCIDRMaskSize is the controller-manager's --node-cidr-mask-size
	// for IPv4: each node gets a /24 of the pod subnet.
	NodeCIDRMaskSize = 24
	// maxServiceSubnetBits: the API server refuses a Service range of
	// more than 2^20 addresses.
	maxServiceSubnetBits = 20
	// minServiceSubnetBits: CoreDNS's Service is the range's tenth
	// address (layout.Config.DNSIP), so it needs 16.
	minServiceSubnetBits = 4
	// minNodeSubnetBits: the host's end of the bridge and the node need
	// an address each, besides the network and broadcast addresses.
	minNodeSubnetBits = 2
	// MinCertValidity is the shortest certificate lifetime up issues: up
	// itself takes a good part of a minute.
	MinCertValidity = 2 * time.Minute
)

var (
	// featureGateName: Kubernetes' gates are CamelCase words.
	featureGateName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	// flagName is a long flag's name without its dashes.
	flagName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
	// majorMinor is a version as --emulated-version takes it.
	majorMinor = regexp.MustCompile(`^[1-9][0-9]*\.(0|[1-9][0-9]*)$`)
)

// validate checks every value on its own and against the others.
func (c *Cluster) validate(p *problems) {
	for _, f := range []struct{ key, got, want string }{{"apiVersion", c.APIVersion, APIVersion}, {"kind", c.Kind, Kind}} {
		switch f.got {
		case f.want:
		case "":
			p.add([]string{f.key}, "missing: the file starts with apiVersion: %s and kind: %s", APIVersion, Kind)
		default:
			p.add([]string{f.key}, "is %q, want %s", f.got, f.want)
		}
	}
	if c.Name != "" {
		if err := layout.ValidateName(c.Name); err != nil {
			p.add([]string{"name"}, "%v", err)
		}
	}
	validateSpec(c.Spec, p)
	c.validateFakeNodes(p)
	switch c.ControlPlaneTaint {
	case "", TaintKeep, TaintRemove:
	default:
		p.add([]string{"controlPlaneTaint"}, "is %q, want %s or %s", c.ControlPlaneTaint, TaintKeep, TaintRemove)
	}
	c.validateNetworking(p)
	c.validateNodes(p)
}

// validateNodes checks the node list: the first node is the control
// plane (its name, when given, is the one up gives it), the others
// control-plane nodes or workers, names DNS labels and unique, a tree
// only for a named worker.
func (c *Cluster) validateNodes(p *problems) {
	seen := map[string]int{}
	for i, n := range c.Nodes {
		at := []string{"nodes", strconv.Itoa(i)}
		switch {
		case i == 0 && n.Role != layout.RoleControlPlane:
			p.add(append(at, "role"), "is %q: the first node is the control plane (role: %s)", n.Role, layout.RoleControlPlane)
		case i > 0 && n.Role != layout.RoleWorker && n.Role != layout.RoleControlPlane:
			p.add(append(at, "role"), "is %q, want %s or %s", n.Role, layout.RoleControlPlane, layout.RoleWorker)
		}
		switch {
		case n.Tree != "" && n.Role != layout.RoleWorker:
			p.add(append(at, "tree"), "a control-plane node runs the cluster's tree: give tree to a worker (devk upgrade or devk swap --tree moves the control plane)")
		case n.Tree != "" && n.Name == "":
			p.add(append(at, "tree"), "name the node too (e.g. name: old-worker), so that the tree stays with it as nodes come and go")
		}
		if n.Name == "" {
			continue
		}
		if i == 0 {
			p.add(append(at, "name"), "the control-plane node is named by the cluster (<name>-control-plane): leave it out")
			continue
		}
		if err := validname.Node(n.Name); err != nil {
			p.add(append(at, "name"), "%v", err)
		}
		if j, dup := seen[n.Name]; dup {
			p.add(append(at, "name"), "%s is nodes[%d]'s name too", n.Name, j)
		}
		seen[n.Name] = i
	}
}

// ValidateSpec checks a spec that did not come from a config file
// (cluster.json's, one a flag changed) as a file's is checked; file
// names it in the problems.
func ValidateSpec(s layout.Spec, file string) error {
	p := &problems{file: file}
	validateSpec(s, p)
	return p.err()
}

// validateSpec checks the component settings: gate and flag names, the
// certificates' lifetime, and that no extra arg changes a setting devk
// owns (Owned).
func validateSpec(s layout.Spec, p *problems) {
	gates := func(path []string, g map[string]bool) {
		for _, k := range slices.Sorted(maps.Keys(g)) {
			if !featureGateName.MatchString(k) {
				p.add(append(path, k), "is not a feature gate name (they are CamelCase, e.g. ComponentFlagz)")
			}
		}
	}
	gates([]string{"featureGates"}, s.FeatureGates)
	if s.CertValidity != nil {
		if v := s.CertValidity.Duration; v < MinCertValidity || v > pki.CAValidity {
			p.add([]string{"certValidity"}, "is %s: give a lifetime from %s to %s (the CAs' ten years), e.g. 10m or 8760h", v, MinCertValidity, pki.CAValidity)
		}
	}
	validateBootstrapper(s, p)
	if s.Audit.PolicyFile != "" && !s.Audit.On() {
		p.add([]string{"audit", "policyFile"}, "is set, but audit.enabled is false: leave one of them out")
	}
	for _, k := range slices.Sorted(maps.Keys(s.RuntimeConfig)) {
		v := s.RuntimeConfig[k]
		if k == "" || strings.ContainsAny(k, ",= ") || v == "" || strings.ContainsAny(v, ", ") {
			p.add([]string{"runtimeConfig", k}, "%q: want an API group/version (or api/all, api/alpha…) and a value such as \"true\"", k+"="+v)
		}
	}
	if s.EmulatedVersion != "" && !majorMinor.MatchString(s.EmulatedVersion) {
		p.add([]string{"emulatedVersion"}, "is %q: give a MAJOR.MINOR version such as \"1.33\" (quoted, so YAML keeps it a string)", s.EmulatedVersion)
	}
	own := ownFlags()
	comps := SpecComponents(&s)
	for _, name := range slices.Sorted(maps.Keys(comps)) {
		c := comps[name]
		gates([]string{name, "featureGates"}, c.FeatureGates)
		for _, flag := range slices.Sorted(maps.Keys(c.ExtraArgs)) {
			path := []string{name, "extraArgs", flag}
			switch {
			case strings.HasPrefix(flag, "-"):
				p.add(path, "write the flag's name without dashes: %s", strings.TrimLeft(flag, "-"))
			case !flagName.MatchString(flag):
				p.add(path, "is not a flag name (lowercase words joined by '-')")
			case flag == FeatureGatesFlag:
				p.add(path, "set feature gates with featureGates (every component) or %s.featureGates (this one)", name)
			case flag == RuntimeConfigFlag:
				p.add(path, "set the API server's runtime config with runtimeConfig")
			case flag == EmulatedVersionFlag:
				p.add(path, "set the control plane's emulated version with emulatedVersion (the API server, controller-manager and scheduler together)")
			case own[name][flag] != "":
				p.add(path, "%s: leave it out of extraArgs", own[name][flag])
			}
		}
	}
}

// validateBootstrapper checks bootstrapper and what only kubeadm reads:
// the patches of its config, each parsed as it will be applied.
func validateBootstrapper(s layout.Spec, p *problems) {
	switch s.Bootstrapper {
	case "", layout.BootstrapperDevk, layout.BootstrapperKubeadm:
	default:
		p.add([]string{"bootstrapper"}, "is %q, want %s (the default) or %s", s.Bootstrapper, layout.BootstrapperDevk, layout.BootstrapperKubeadm)
	}
	if s.Bootstrapper == layout.BootstrapperDevk {
		if key := PatchesKey(s); key != "" {
			p.add([]string{key}, "patches kubeadm's config, but the bootstrapper is %s: set bootstrapper: %s, or leave %s out",
				s.BootstrappedBy(), layout.BootstrapperKubeadm, key)
		}
		return
	}
	// Unset: --bootstrapper kubeadm may make it kubeadm's (Open refuses
	// patches for a cluster devk bootstraps); the patches are checked.
	for i, patch := range s.KubeadmConfigPatches {
		if _, err := ParseMergePatch(patch); err != nil {
			p.add([]string{keyMergePatches, strconv.Itoa(i)}, "%v", err)
		}
	}
	for i, patch := range s.KubeadmConfigPatchesJSON6902 {
		at := []string{keyJSON6902Patches, strconv.Itoa(i)}
		if patch.Kind == "" {
			p.add(append(at, "kind"), "missing: give the kind of the documents it patches (and their group and version), e.g. kind: ClusterConfiguration")
		}
		if _, err := ParseJSON6902(patch); err != nil {
			p.add(append(at, "patch"), "%v", err)
		}
	}
	if len(s.KubeProxy.ExtraArgs) > 0 && s.Kubeadm() {
		p.add([]string{KubeProxy, "extraArgs"}, "kubeadm runs kube-proxy with its config file alone: set its KubeProxyConfiguration (logging.verbosity for v) with %s, and leave kubeProxy.extraArgs out", keyMergePatches)
	}
}

// PatchesKey is the first key of s that patches kubeadm's config
// (kubeadmConfigPatches, kubeadmConfigPatchesJSON6902), "" when none.
func PatchesKey(s layout.Spec) string {
	switch {
	case len(s.KubeadmConfigPatches) > 0:
		return keyMergePatches
	case len(s.KubeadmConfigPatchesJSON6902) > 0:
		return keyJSON6902Patches
	}
	return ""
}

// The config file's keys of the kubeadm config's patches.
const (
	keyMergePatches    = "kubeadmConfigPatches"
	keyJSON6902Patches = "kubeadmConfigPatchesJSON6902"
)

// subnet parses the IPv4 network at key of networking; nil after adding
// a problem.
func subnet(p *problems, key, s string) *net.IPNet {
	path := []string{"networking", key}
	ip, n, err := net.ParseCIDR(s)
	switch {
	case err != nil:
		p.add(path, "%q is not a CIDR (e.g. 10.244.0.0/16)", s)
		return nil
	case ip.To4() == nil:
		p.add(path, "%q is not IPv4 (devk's clusters are IPv4)", s)
		return nil
	case n.String() != s:
		p.add(path, "%q is not a network's address: did you mean %s?", s, n)
		return nil
	}
	return n
}

// validateNetworking checks each subnet and that they do not overlap.
func (c *Cluster) validateNetworking(p *problems) {
	nw := c.Networking
	pods := subnet(p, "podSubnet", c.PodSubnet())
	services := subnet(p, "serviceSubnet", c.ServiceSubnet())
	var nodes *net.IPNet
	if nw.NodeSubnet != "" {
		nodes = subnet(p, "nodeSubnet", nw.NodeSubnet)
	}
	if pods != nil {
		if ones, _ := pods.Mask.Size(); ones > NodeCIDRMaskSize {
			p.add([]string{"networking", "podSubnet"}, "%s is smaller than the /%d the controller-manager gives each node of it: want /%d or larger", pods, NodeCIDRMaskSize, NodeCIDRMaskSize)
		}
	}
	if services != nil {
		if ones, _ := services.Mask.Size(); ones < 32-maxServiceSubnetBits {
			p.add([]string{"networking", "serviceSubnet"}, "%s is larger than the API server takes: want /%d or smaller", services, 32-maxServiceSubnetBits)
		} else if ones > 32-minServiceSubnetBits {
			p.add([]string{"networking", "serviceSubnet"}, "%s has no room for CoreDNS's Service (its tenth address): want /%d or larger", services, 32-minServiceSubnetBits)
		}
	}
	if nodes != nil {
		if err := layout.CheckPrivate(nodes); err != nil {
			p.add([]string{"networking", "nodeSubnet"}, "%v", err)
		}
		if ones, _ := nodes.Mask.Size(); ones > 32-minNodeSubnetBits {
			p.add([]string{"networking", "nodeSubnet"}, "%s has no room for the host's address and the node's: want /%d or larger", nodes, 32-minNodeSubnetBits)
		}
	}
	named := func(key string, n *net.IPNet) string {
		if (key == "podSubnet" && nw.PodSubnet == "") || (key == "serviceSubnet" && nw.ServiceSubnet == "") {
			return fmt.Sprintf("the default %s %s", key, n)
		}
		return fmt.Sprintf("networking.%s %s", key, n)
	}
	if pods != nil && services != nil && layout.Overlaps(pods, services) {
		p.add([]string{"networking", "serviceSubnet"}, "%s overlaps %s", services, named("podSubnet", pods))
	}
	for _, o := range []struct {
		key   string
		n     *net.IPNet
		given bool
	}{{"podSubnet", pods, nw.PodSubnet != ""}, {"serviceSubnet", services, nw.ServiceSubnet != ""}} {
		if o.n == nil || nodes == nil || !layout.Overlaps(o.n, nodes) {
			continue
		}
		// The problem is at the key the file gave: a default did not.
		path := []string{"networking", o.key}
		if !o.given {
			path = []string{"networking", "nodeSubnet"}
		}
		p.add(path, "%s overlaps networking.nodeSubnet %s", named(o.key, o.n), nodes)
	}
}

// Flags are the command-line flags of `devk up` that say what a config
// file can say too; each is unset when zero or nil.
type Flags struct {
	Name          string
	Bootstrapper  string
	CertValidity  *time.Duration
	Nodes         int
	ControlPlanes int
	KeepTaint     *bool
}

// Agrees checks the file against the flags given with it: each flag
// given must say what the file says (neither silently wins over the
// other). A file without a name serves any cluster.
func (c *Cluster) Agrees(o Flags) error {
	p := c.problemsAt()
	if c.Name != "" && o.Name != "" && o.Name != c.Name {
		p.add([]string{"name"}, "is %q, but --name is %q: leave one of them out (a file without a name serves any cluster)", c.Name, o.Name)
	}
	if c.Bootstrapper != "" && o.Bootstrapper != "" && c.Bootstrapper != o.Bootstrapper {
		p.add([]string{"bootstrapper"}, "is %s, but --bootstrapper is %s: leave one of them out", c.Bootstrapper, o.Bootstrapper)
	}
	if c.CertValidity != nil && o.CertValidity != nil && c.CertValidity.Duration != *o.CertValidity {
		p.add([]string{"certValidity"}, "is %s, but --cert-validity is %s: leave one of them out", c.CertValidity.Duration, *o.CertValidity)
	}
	if len(c.Nodes) > 0 && o.Nodes > 0 && o.Nodes != len(c.Nodes) {
		p.add([]string{"nodes"}, "lists %d nodes, but --nodes is %d: leave one of them out", len(c.Nodes), o.Nodes)
	}
	if len(c.Nodes) > 0 && o.ControlPlanes > 0 && o.ControlPlanes != c.ControlPlanes() {
		p.add([]string{"nodes"}, "lists %d control-plane nodes, but --control-planes is %d: leave one of them out", c.ControlPlanes(), o.ControlPlanes)
	}
	if c.ControlPlaneTaint != "" && o.KeepTaint != nil && *o.KeepTaint != c.KeepTaint() {
		p.add([]string{"controlPlaneTaint"}, "is %s, but --keep-taint=%t says otherwise: leave one of them out", c.ControlPlaneTaint, *o.KeepTaint)
	}
	return p.err()
}

// Unchangeable refuses a file that changes what the existing cluster
// cfg cannot change: its networks (the certificates, the node's
// namespace, every Service and pod address depend on them) and its
// bootstrapper (what made the nodes' control plane and files). A
// nodeSubnet left out keeps the cluster's.
func (c *Cluster) Unchangeable(cfg layout.Config) error {
	p := c.problemsAt()
	if want, has := c.BootstrappedBy(), cfg.Spec.BootstrappedBy(); want != has {
		p.add([]string{"bootstrapper"}, "is %s, but %s made cluster %s, and a cluster's bootstrapper cannot change: `devk down --name %s` first, then up with the file",
			want, has, cfg.Name, cfg.Name)
	}
	for _, f := range []struct{ key, want, has string }{
		{"podSubnet", c.PodSubnet(), cfg.PodCIDR},
		{"serviceSubnet", c.ServiceSubnet(), cfg.ServiceCIDR},
		{"nodeSubnet", or(c.Networking.NodeSubnet, cfg.Network.Subnet), cfg.Network.Subnet},
	} {
		if f.want != f.has {
			p.add([]string{"networking", f.key}, "is %s, but cluster %s has %s, and a cluster's networks cannot change: `devk down --name %s` first, then up with the file",
				f.want, cfg.Name, f.has, cfg.Name)
		}
	}
	return p.err()
}
