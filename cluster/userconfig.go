package cluster

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gojson "encoding/json"

	yaml3 "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	strictjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/pki"
)

// A cluster's config file, `devk up --config FILE`, in the spirit of
// kind's: a versioned document that says what the cluster should be. It
// is the whole truth for what it covers: a key left out means its
// default, not "as before". Two exceptions: networking.nodeSubnet left
// out means "a free one" for a new cluster and "the one it has" for an
// existing one, and name left out means --name (else devk).
const (
	// UserConfigAPIVersion and UserConfigKind head every config file.
	UserConfigAPIVersion = "devk.dev/v1alpha1"
	UserConfigKind       = "Cluster"

	// TaintKeep and TaintRemove are controlPlaneTaint's values.
	TaintKeep   = "keep"
	TaintRemove = "remove"
	// DefaultControlPlaneTaint is kind's way: pods schedule on the one node.
	DefaultControlPlaneTaint = TaintRemove

	// nodeCIDRMaskSize is the controller-manager's --node-cidr-mask-size
	// for IPv4: each node gets a /24 of the pod subnet.
	nodeCIDRMaskSize = 24
	// maxServiceSubnetBits: the API server refuses a Service range of
	// more than 2^20 addresses.
	maxServiceSubnetBits = 20
	// minServiceSubnetBits: CoreDNS's Service is the range's tenth
	// address (layout.Config.DNSIP), so it needs 16.
	minServiceSubnetBits = 4
	// minNodeSubnetBits: the host's end of the bridge and the node need
	// an address each, besides the network and broadcast addresses.
	minNodeSubnetBits = 2
)

// UserConfig is the config file.
type UserConfig struct {
	metav1.TypeMeta `json:",inline"`
	// Name names the cluster; --name, when given too, must agree.
	Name string `json:"name,omitempty"`
	// Spec: featureGates, runtimeConfig, apiServer, controllerManager,
	// scheduler, kubelet, kubeProxy, addons.
	layout.Spec `json:",inline"`
	Networking  Networking `json:"networking,omitzero"`
	// ControlPlaneTaint is keep or remove (the default).
	ControlPlaneTaint string `json:"controlPlaneTaint,omitempty"`
	// Nodes are the cluster's nodes, as kind's config lists them: the
	// first the control plane (the node up makes), then workers, each
	// joined as `devk node add` joins it. Left out: as many as the
	// cluster has (a new cluster: one).
	Nodes []UserNode `json:"nodes,omitempty"`

	// file and root are where it was read from, for problems found later.
	file string
	root *yaml3.Node
}

// UserNode is one node of the config file.
type UserNode struct {
	// Role is control-plane or worker.
	Role string `json:"role"`
	// Name defaults to kind's: <cluster>-control-plane for the first,
	// <cluster>-worker, <cluster>-worker2, … for the workers.
	Name string `json:"name,omitempty"`
}

// joinNodes are the nodes the file lists after the first, which up
// joins: control-plane nodes first (each makes the next a member of a
// larger etcd), then workers, each in the file's order; Name "" for
// those it leaves to the default.
func (u *UserConfig) joinNodes() []UserNode {
	var cps, workers []UserNode
	for _, n := range u.Nodes[min(1, len(u.Nodes)):] {
		if n.Role == layout.RoleControlPlane {
			cps = append(cps, n)
		} else {
			workers = append(workers, n)
		}
	}
	return append(cps, workers...)
}

// controlPlanes is how many control-plane nodes the file lists.
func (u *UserConfig) controlPlanes() int {
	n := 0
	for _, un := range u.Nodes {
		if un.Role == layout.RoleControlPlane {
			n++
		}
	}
	return n
}

// Networking are the cluster's networks; each is fixed when the cluster
// is made.
type Networking struct {
	// PodSubnet defaults to layout.DefaultPodCIDR.
	PodSubnet string `json:"podSubnet,omitempty"`
	// ServiceSubnet defaults to layout.DefaultServiceCIDR.
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	// NodeSubnet defaults to the first free /24 of
	// layout.DefaultNodeSubnets.
	NodeSubnet string `json:"nodeSubnet,omitempty"`
}

func (u *UserConfig) podSubnet() string { return or(u.Networking.PodSubnet, layout.DefaultPodCIDR) }
func (u *UserConfig) serviceSubnet() string {
	return or(u.Networking.ServiceSubnet, layout.DefaultServiceCIDR)
}
func (u *UserConfig) keepTaint() bool {
	return or(u.ControlPlaneTaint, DefaultControlPlaneTaint) == TaintKeep
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// UserConfigError lists what is wrong with a config file, one problem a
// line: FILE:LINE: KEY: what is wrong.
type UserConfigError struct {
	File     string
	Problems []string
}

func (e *UserConfigError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0]
	}
	return fmt.Sprintf("%d problems in %s:\n  %s", len(e.Problems), e.File, strings.Join(e.Problems, "\n  "))
}

// problems collects a config file's problems, each at a key path.
type problems struct {
	file string
	// root is the file's YAML, to find the line of a key (nil: none).
	root *yaml3.Node
	list []problem
}

type problem struct {
	line int
	text string
}

func (p *problems) add(path []string, format string, args ...any) {
	where, line := p.file, keyLine(p.root, path)
	if line > 0 {
		where = fmt.Sprintf("%s:%d", p.file, line)
	}
	msg := fmt.Sprintf(format, args...)
	if len(path) > 0 {
		msg = keyName(path) + ": " + msg
	}
	p.list = append(p.list, problem{line, where + ": " + msg})
}

// err is the problems in the file's order, nil when there are none.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	slices.SortStableFunc(p.list, func(a, b problem) int { return a.line - b.line })
	e := &UserConfigError{File: p.file}
	for _, pr := range p.list {
		e.Problems = append(e.Problems, pr.text)
	}
	return e
}

// keyName writes a key path as the file has it: networking.podSubnet;
// a map key holding a dot or slash in brackets: runtimeConfig["api/all"].
func keyName(path []string) string {
	var b strings.Builder
	for i, k := range path {
		_, index := listIndex(k)
		switch {
		case index && i > 0:
			b.WriteString("[" + k + "]")
		case strings.ContainsAny(k, "./ ") || k == "":
			fmt.Fprintf(&b, "[%q]", k)
		case i > 0:
			b.WriteString("." + k)
		default:
			b.WriteString(k)
		}
	}
	return b.String()
}

// listIndex is a path element that indexes a list (nodes[1]).
func listIndex(k string) (int, bool) {
	i, err := strconv.Atoi(k)
	return i, err == nil && i >= 0
}

// keyLine is the line of the key at path in the YAML document root, or
// of its deepest ancestor there; 0 when none is.
func keyLine(root *yaml3.Node, path []string) int {
	if root == nil {
		return 0
	}
	n := root
	if n.Kind == yaml3.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, k := range path {
		if i, ok := listIndex(k); ok && n.Kind == yaml3.SequenceNode {
			if i >= len(n.Content) {
				break
			}
			n = n.Content[i]
			line = n.Line
			continue
		}
		if n.Kind != yaml3.MappingNode {
			break
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				line, n, found = n.Content[i].Line, n.Content[i+1], true
				break
			}
		}
		if !found {
			break
		}
	}
	return line
}

// ReadUserConfig reads and checks the config file at path: strict
// decoding (an unknown or repeated key is an error naming it and its
// line), then every value on its own (see validate). What depends on the
// machine (host routes, other clusters, the cluster as it is) Open
// checks.
func ReadUserConfig(path string) (*UserConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the cluster config file: %w", err)
	}
	return DecodeUserConfig(data, path)
}

// DecodeUserConfig is ReadUserConfig of data read from file.
func DecodeUserConfig(data []byte, file string) (*UserConfig, error) {
	var root yaml3.Node
	if err := yaml3.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", file, err)
	}
	j, err := sigsyaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	p := &problems{file: file, root: &root}
	var u UserConfig
	strict, err := strictjson.UnmarshalStrict(j, &u)
	var typeErr *gojson.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		p.add(splitPath(typeErr.Field), "is %s, want %s", typeErr.Value, typeWord(typeErr.Type))
		return nil, p.err()
	case err != nil:
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, e := range strict {
		var fe interface{ FieldPath() string }
		if !errors.As(e, &fe) {
			p.add(nil, "%v", e)
			continue
		}
		path := splitPath(fe.FieldPath())
		if !strings.HasPrefix(e.Error(), "unknown field") {
			p.add(path, "%v", e)
			continue
		}
		if len(path) == 0 { // the key is the empty string
			path = []string{""}
		}
		p.add(path, "unknown key%s", knownKeysHint(path))
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	u.validate(p)
	if err := p.err(); err != nil {
		return nil, err
	}
	u.normalize()
	u.file, u.root = file, &root
	return &u, nil
}

func splitPath(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ".")
}

// typeWord names what a key's value must be.
func typeWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return `a string (quote it: "…")`
	case reflect.Map:
		return "a mapping of key: " + typeWord(t.Elem())
	case reflect.Struct:
		return "a mapping"
	case reflect.Ptr:
		return typeWord(t.Elem())
	}
	return t.String()
}

// knownKeysHint says, for an unknown key at path, which keys its parent
// takes, and the one meant when only its case differs.
func knownKeysHint(path []string) string {
	t := reflect.TypeFor[UserConfig]()
	for _, k := range path[:len(path)-1] {
		f, ok := jsonFields(t)[k]
		if !ok {
			return ""
		}
		t = f
	}
	fields := jsonFields(t)
	bad := path[len(path)-1]
	for name := range fields {
		if strings.EqualFold(name, bad) {
			return fmt.Sprintf(" (did you mean %s?)", name)
		}
	}
	return " (known here: " + strings.Join(slices.Sorted(maps.Keys(fields)), ", ") + ")"
}

// jsonFields are the keys of struct type t (embedded structs
// flattened), with their value types; none for another type.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			maps.Copy(out, jsonFields(f.Type))
			continue
		}
		if name != "" && name != "-" {
			out[name] = f.Type
		}
	}
	return out
}

var (
	// featureGateName: Kubernetes' gates are CamelCase words.
	featureGateName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	// flagName is a long flag's name without its dashes.
	flagName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
)

// validate checks every value on its own and against the others.
func (u *UserConfig) validate(p *problems) {
	for _, f := range []struct{ key, got, want string }{{"apiVersion", u.APIVersion, UserConfigAPIVersion}, {"kind", u.Kind, UserConfigKind}} {
		switch f.got {
		case f.want:
		case "":
			p.add([]string{f.key}, "missing: the file starts with apiVersion: %s and kind: %s", UserConfigAPIVersion, UserConfigKind)
		default:
			p.add([]string{f.key}, "is %q, want %s", f.got, f.want)
		}
	}
	if u.Name != "" {
		if err := layout.ValidateName(u.Name); err != nil {
			p.add([]string{"name"}, "%v", err)
		}
	}
	validateSpec(u.Spec, p)
	switch u.ControlPlaneTaint {
	case "", TaintKeep, TaintRemove:
	default:
		p.add([]string{"controlPlaneTaint"}, "is %q, want %s or %s", u.ControlPlaneTaint, TaintKeep, TaintRemove)
	}
	u.validateNetworking(p)
	u.validateNodes(p)
}

// validateNodes checks the node list: the first node is the control
// plane (its name, when given, is the one up gives it), the others
// control-plane nodes or workers, names DNS labels and unique.
func (u *UserConfig) validateNodes(p *problems) {
	seen := map[string]int{}
	for i, n := range u.Nodes {
		at := []string{"nodes", strconv.Itoa(i)}
		switch {
		case i == 0 && n.Role != layout.RoleControlPlane:
			p.add(append(at, "role"), "is %q: the first node is the control plane (role: %s)", n.Role, layout.RoleControlPlane)
		case i > 0 && n.Role != layout.RoleWorker && n.Role != layout.RoleControlPlane:
			p.add(append(at, "role"), "is %q, want %s or %s", n.Role, layout.RoleControlPlane, layout.RoleWorker)
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

// validateSpec checks the component settings: gate and flag names, and
// that no extra arg changes a flag devk owns. cluster.json's spec is
// checked by it too.
// MinCertValidity is the shortest certificate lifetime up issues: up
// itself takes a good part of a minute.
const MinCertValidity = 2 * time.Minute

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
	for _, k := range slices.Sorted(maps.Keys(s.RuntimeConfig)) {
		v := s.RuntimeConfig[k]
		if k == "" || strings.ContainsAny(k, ",= ") || v == "" || strings.ContainsAny(v, ", ") {
			p.add([]string{"runtimeConfig", k}, "%q: want an API group/version (or api/all, api/alpha…) and a value such as \"true\"", k+"="+v)
		}
	}
	own := ownFlags()
	comps := map[string]layout.Component{"apiServer": s.APIServer, "controllerManager": s.ControllerManager,
		"scheduler": s.Scheduler, "kubelet": s.Kubelet, "kubeProxy": s.KubeProxy}
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
			case flag == featureGatesFlag:
				p.add(path, "set feature gates with featureGates (every component) or %s.featureGates (this one)", name)
			case flag == runtimeConfigFlag:
				p.add(path, "set the API server's runtime config with runtimeConfig")
			case own[name][flag] != "":
				p.add(path, "%s: leave it out of extraArgs", own[name][flag])
			}
		}
	}
}

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
func (u *UserConfig) validateNetworking(p *problems) {
	nw := u.Networking
	pods := subnet(p, "podSubnet", u.podSubnet())
	services := subnet(p, "serviceSubnet", u.serviceSubnet())
	var nodes *net.IPNet
	if nw.NodeSubnet != "" {
		nodes = subnet(p, "nodeSubnet", nw.NodeSubnet)
	}
	if pods != nil {
		if ones, _ := pods.Mask.Size(); ones > nodeCIDRMaskSize {
			p.add([]string{"networking", "podSubnet"}, "%s is smaller than the /%d the controller-manager gives each node of it: want /%d or larger", pods, nodeCIDRMaskSize, nodeCIDRMaskSize)
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

// problemsAt starts a list of problems of the file u was read from.
func (u *UserConfig) problemsAt() *problems { return &problems{file: u.file, root: u.root} }

// agrees checks the file against the flags given with it: --name and
// --keep-taint, when given, must say what the file says (neither
// silently wins over the other). A file without a name serves any
// cluster.
func (u *UserConfig) agrees(o Options) error {
	p := u.problemsAt()
	if u.Name != "" && o.Name != "" && o.Name != u.Name {
		p.add([]string{"name"}, "is %q, but --name is %q: leave one of them out (a file without a name serves any cluster)", u.Name, o.Name)
	}
	if u.CertValidity != nil && o.CertValidity != nil && u.CertValidity.Duration != *o.CertValidity {
		p.add([]string{"certValidity"}, "is %s, but --cert-validity is %s: leave one of them out", u.CertValidity.Duration, *o.CertValidity)
	}
	if len(u.Nodes) > 0 && o.Nodes > 0 && o.Nodes != len(u.Nodes) {
		p.add([]string{"nodes"}, "lists %d nodes, but --nodes is %d: leave one of them out", len(u.Nodes), o.Nodes)
	}
	if len(u.Nodes) > 0 && o.ControlPlanes > 0 && o.ControlPlanes != u.controlPlanes() {
		p.add([]string{"nodes"}, "lists %d control-plane nodes, but --control-planes is %d: leave one of them out", u.controlPlanes(), o.ControlPlanes)
	}
	if u.ControlPlaneTaint != "" && o.KeepTaint != nil && *o.KeepTaint != u.keepTaint() {
		p.add([]string{"controlPlaneTaint"}, "is %s, but --keep-taint=%t says otherwise: leave one of them out", u.ControlPlaneTaint, *o.KeepTaint)
	}
	return p.err()
}

// unchangeable refuses a file that changes what an existing cluster
// cannot change: its networks (the certificates, the node's namespace,
// every Service and pod address depend on them). A nodeSubnet left out
// keeps the cluster's.
func (u *UserConfig) unchangeable(cfg layout.Config) error {
	p := u.problemsAt()
	for _, f := range []struct{ key, want, has string }{
		{"podSubnet", u.podSubnet(), cfg.PodCIDR},
		{"serviceSubnet", u.serviceSubnet(), cfg.ServiceCIDR},
		{"nodeSubnet", or(u.Networking.NodeSubnet, cfg.Network.Subnet), cfg.Network.Subnet},
	} {
		if f.want != f.has {
			p.add([]string{"networking", f.key}, "is %s, but cluster %s has %s, and a cluster's networks cannot change: `devk down --name %s` first, then up with the file",
				f.want, cfg.Name, f.has, cfg.Name)
		}
	}
	return p.err()
}

// normalize drops empty maps, so that a spec compares and stores the
// same however the file spelled "nothing".
func (u *UserConfig) normalize() {
	drop := func(c *layout.Component) {
		if len(c.ExtraArgs) == 0 {
			c.ExtraArgs = nil
		}
		if len(c.FeatureGates) == 0 {
			c.FeatureGates = nil
		}
	}
	if len(u.FeatureGates) == 0 {
		u.FeatureGates = nil
	}
	if len(u.RuntimeConfig) == 0 {
		u.RuntimeConfig = nil
	}
	for _, c := range []*layout.Component{&u.APIServer, &u.ControllerManager, &u.Scheduler, &u.Kubelet, &u.KubeProxy} {
		drop(c)
	}
}
