package etcdwatch

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/devk/devk/internal/layout"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultPrefix is where the API server keeps its objects (its
// --etcd-prefix flag).
const DefaultPrefix = layout.DefaultEtcdPrefix

// Resource is one kind of object the API server stores, and where.
type Resource struct {
	// Name is the plural resource name, as in `kubectl get pods`.
	Name string
	// Group is the API group ("" for the core group).
	Group string
	// Kind is the object kind, e.g. Pod.
	Kind string
	// Dir is the key segment(s) after the etcd prefix. Usually Name, but
	// the API server keeps some resources under historical names
	// (services/specs, minions, controllers, ingress) and custom
	// resources under <group>/<resource>.
	Dir string
	// Namespaced resources have a namespace segment before the name.
	Namespaced bool
	// Aliases are other names a user may type: singular, short names, kind.
	Aliases []string
}

// builtinResources lists the resources kube-apiserver v1.34 stores, with
// the key layout of its storage (pkg/registry/*/storage). Irregular
// directories are spelled out; the rest use the resource name.
var builtinResources = []Resource{
	{Name: "pods", Kind: "Pod", Namespaced: true, Aliases: []string{"pod", "po"}},
	{Name: "services", Kind: "Service", Dir: "services/specs", Namespaced: true, Aliases: []string{"service", "svc"}},
	{Name: "endpoints", Kind: "Endpoints", Dir: "services/endpoints", Namespaced: true, Aliases: []string{"ep"}},
	{Name: "nodes", Kind: "Node", Dir: "minions", Aliases: []string{"node", "no", "minions"}},
	{Name: "namespaces", Kind: "Namespace", Aliases: []string{"namespace", "ns"}},
	{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Aliases: []string{"configmap", "cm"}},
	{Name: "secrets", Kind: "Secret", Namespaced: true, Aliases: []string{"secret"}},
	{Name: "serviceaccounts", Kind: "ServiceAccount", Namespaced: true, Aliases: []string{"serviceaccount", "sa"}},
	{Name: "persistentvolumes", Kind: "PersistentVolume", Aliases: []string{"persistentvolume", "pv"}},
	{Name: "persistentvolumeclaims", Kind: "PersistentVolumeClaim", Namespaced: true, Aliases: []string{"persistentvolumeclaim", "pvc"}},
	{Name: "events", Kind: "Event", Namespaced: true, Aliases: []string{"event", "ev"}},
	{Name: "limitranges", Kind: "LimitRange", Namespaced: true, Aliases: []string{"limitrange", "limits"}},
	{Name: "resourcequotas", Kind: "ResourceQuota", Namespaced: true, Aliases: []string{"resourcequota", "quota"}},
	{Name: "replicationcontrollers", Kind: "ReplicationController", Dir: "controllers", Namespaced: true, Aliases: []string{"replicationcontroller", "rc", "controllers"}},
	{Name: "podtemplates", Kind: "PodTemplate", Namespaced: true, Aliases: []string{"podtemplate"}},
	{Name: "rangeallocations", Kind: "RangeAllocation", Dir: "ranges", Aliases: []string{"ranges"}},

	{Name: "deployments", Group: "apps", Kind: "Deployment", Namespaced: true, Aliases: []string{"deployment", "deploy"}},
	{Name: "replicasets", Group: "apps", Kind: "ReplicaSet", Namespaced: true, Aliases: []string{"replicaset", "rs"}},
	{Name: "statefulsets", Group: "apps", Kind: "StatefulSet", Namespaced: true, Aliases: []string{"statefulset", "sts"}},
	{Name: "daemonsets", Group: "apps", Kind: "DaemonSet", Namespaced: true, Aliases: []string{"daemonset", "ds"}},
	{Name: "controllerrevisions", Group: "apps", Kind: "ControllerRevision", Namespaced: true, Aliases: []string{"controllerrevision"}},

	{Name: "jobs", Group: "batch", Kind: "Job", Namespaced: true, Aliases: []string{"job"}},
	{Name: "cronjobs", Group: "batch", Kind: "CronJob", Namespaced: true, Aliases: []string{"cronjob", "cj"}},
	{Name: "horizontalpodautoscalers", Group: "autoscaling", Kind: "HorizontalPodAutoscaler", Namespaced: true, Aliases: []string{"horizontalpodautoscaler", "hpa"}},

	{Name: "ingresses", Group: "networking.k8s.io", Kind: "Ingress", Dir: "ingress", Namespaced: true, Aliases: []string{"ingress", "ing"}},
	{Name: "ingressclasses", Group: "networking.k8s.io", Kind: "IngressClass", Aliases: []string{"ingressclass"}},
	{Name: "networkpolicies", Group: "networking.k8s.io", Kind: "NetworkPolicy", Namespaced: true, Aliases: []string{"networkpolicy", "netpol"}},
	{Name: "ipaddresses", Group: "networking.k8s.io", Kind: "IPAddress", Aliases: []string{"ipaddress", "ip"}},
	{Name: "servicecidrs", Group: "networking.k8s.io", Kind: "ServiceCIDR", Aliases: []string{"servicecidr"}},
	{Name: "endpointslices", Group: "discovery.k8s.io", Kind: "EndpointSlice", Namespaced: true, Aliases: []string{"endpointslice"}},
	{Name: "poddisruptionbudgets", Group: "policy", Kind: "PodDisruptionBudget", Namespaced: true, Aliases: []string{"poddisruptionbudget", "pdb"}},

	{Name: "roles", Group: "rbac.authorization.k8s.io", Kind: "Role", Namespaced: true, Aliases: []string{"role"}},
	{Name: "rolebindings", Group: "rbac.authorization.k8s.io", Kind: "RoleBinding", Namespaced: true, Aliases: []string{"rolebinding"}},
	{Name: "clusterroles", Group: "rbac.authorization.k8s.io", Kind: "ClusterRole", Aliases: []string{"clusterrole"}},
	{Name: "clusterrolebindings", Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding", Aliases: []string{"clusterrolebinding"}},

	{Name: "storageclasses", Group: "storage.k8s.io", Kind: "StorageClass", Aliases: []string{"storageclass", "sc"}},
	{Name: "volumeattachments", Group: "storage.k8s.io", Kind: "VolumeAttachment", Aliases: []string{"volumeattachment"}},
	{Name: "csidrivers", Group: "storage.k8s.io", Kind: "CSIDriver", Aliases: []string{"csidriver"}},
	{Name: "csinodes", Group: "storage.k8s.io", Kind: "CSINode", Aliases: []string{"csinode"}},
	{Name: "csistoragecapacities", Group: "storage.k8s.io", Kind: "CSIStorageCapacity", Namespaced: true, Aliases: []string{"csistoragecapacity"}},
	{Name: "volumeattributesclasses", Group: "storage.k8s.io", Kind: "VolumeAttributesClass", Aliases: []string{"volumeattributesclass", "vac"}},

	{Name: "priorityclasses", Group: "scheduling.k8s.io", Kind: "PriorityClass", Aliases: []string{"priorityclass", "pc"}},
	{Name: "leases", Group: "coordination.k8s.io", Kind: "Lease", Namespaced: true, Aliases: []string{"lease"}},
	{Name: "leasecandidates", Group: "coordination.k8s.io", Kind: "LeaseCandidate", Namespaced: true, Aliases: []string{"leasecandidate"}},
	{Name: "runtimeclasses", Group: "node.k8s.io", Kind: "RuntimeClass", Aliases: []string{"runtimeclass"}},
	{Name: "certificatesigningrequests", Group: "certificates.k8s.io", Kind: "CertificateSigningRequest", Aliases: []string{"certificatesigningrequest", "csr"}},
	{Name: "clustertrustbundles", Group: "certificates.k8s.io", Kind: "ClusterTrustBundle", Aliases: []string{"clustertrustbundle"}},

	{Name: "mutatingwebhookconfigurations", Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration", Aliases: []string{"mutatingwebhookconfiguration"}},
	{Name: "validatingwebhookconfigurations", Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration", Aliases: []string{"validatingwebhookconfiguration"}},
	{Name: "validatingadmissionpolicies", Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy", Aliases: []string{"validatingadmissionpolicy"}},
	{Name: "validatingadmissionpolicybindings", Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding", Aliases: []string{"validatingadmissionpolicybinding"}},
	{Name: "mutatingadmissionpolicies", Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy", Aliases: []string{"mutatingadmissionpolicy"}},
	{Name: "mutatingadmissionpolicybindings", Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding", Aliases: []string{"mutatingadmissionpolicybinding"}},

	{Name: "flowschemas", Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema", Aliases: []string{"flowschema"}},
	{Name: "prioritylevelconfigurations", Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration", Aliases: []string{"prioritylevelconfiguration"}},

	{Name: "resourceclaims", Group: "resource.k8s.io", Kind: "ResourceClaim", Namespaced: true, Aliases: []string{"resourceclaim"}},
	{Name: "resourceclaimtemplates", Group: "resource.k8s.io", Kind: "ResourceClaimTemplate", Namespaced: true, Aliases: []string{"resourceclaimtemplate"}},
	{Name: "resourceslices", Group: "resource.k8s.io", Kind: "ResourceSlice", Aliases: []string{"resourceslice"}},
	{Name: "deviceclasses", Group: "resource.k8s.io", Kind: "DeviceClass", Aliases: []string{"deviceclass"}},
	{Name: "devicetaintrules", Group: "resource.k8s.io", Kind: "DeviceTaintRule", Aliases: []string{"devicetaintrule"}},

	{Name: "customresourcedefinitions", Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition", Dir: "apiextensions.k8s.io/customresourcedefinitions", Aliases: []string{"customresourcedefinition", "crd", "crds"}},
	{Name: "apiservices", Group: "apiregistration.k8s.io", Kind: "APIService", Dir: "apiregistration.k8s.io/apiservices", Aliases: []string{"apiservice"}},
	{Name: "storageversionmigrations", Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration", Aliases: []string{"storageversionmigration"}},
	{Name: "storageversions", Group: "internal.apiserver.k8s.io", Kind: "StorageVersion", Aliases: []string{"storageversion"}},
}

// byName maps every lower-cased name, alias, kind and group-qualified name
// to its resource; byDir maps key directories to resources.
var byName, byDir = func() (map[string]*Resource, map[string]*Resource) {
	names := map[string]*Resource{}
	dirs := map[string]*Resource{}
	for i := range builtinResources {
		r := &builtinResources[i]
		if r.Dir == "" {
			r.Dir = r.Name
		}
		dirs[r.Dir] = r
		for _, n := range append([]string{r.Name, strings.ToLower(r.Kind)}, r.Aliases...) {
			names[n] = r
			if r.Group != "" {
				names[n+"."+r.Group] = r
			}
		}
	}
	return names, dirs
}()

// ErrUnknownResource is returned for a resource name devk does not know.
var ErrUnknownResource = errors.New("unknown resource")

// LookupResource finds a resource by any name a user may type: plural,
// singular, short name, kind, optionally group-qualified (deployments.apps).
// A name with a dot that devk does not know is taken as a custom resource
// <resource>.<group>, stored under <group>/<resource>.
func LookupResource(name string) (Resource, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if r, ok := byName[n]; ok {
		return *r, nil
	}
	if res, group, ok := strings.Cut(n, "."); ok && res != "" && strings.Contains(group, ".") {
		return Resource{Name: res, Group: group, Dir: group + "/" + res, Namespaced: true}, nil
	}
	if close := closeMatches(n, 4); len(close) > 0 {
		return Resource{}, fmt.Errorf("%w %q: did you mean %s? (custom resources: <resource>.<group>, or a raw key /registry/...)", ErrUnknownResource, name, strings.Join(close, ", "))
	}
	return Resource{}, fmt.Errorf("%w %q: `devk etcd ls --count` lists the resources in this etcd; custom resources are <resource>.<group>", ErrUnknownResource, name)
}

// ResourceNames lists the plural names of the built-in resources, sorted;
// for completion and help.
func ResourceNames() []string {
	out := make([]string, 0, len(builtinResources))
	for _, r := range builtinResources {
		out = append(out, r.Name)
	}
	sort.Strings(out)
	return out
}

// closeMatches returns up to max resource names near name: those that
// share a prefix with it or are a small edit distance away.
func closeMatches(name string, max int) []string {
	type scored struct {
		name string
		dist int
	}
	seen := map[string]bool{}
	var cands []scored
	for n, r := range byName {
		if strings.Contains(n, ".") {
			continue
		}
		d := editDistance(name, n)
		limit := 2
		switch {
		case len(n) <= 3:
			// short names (po, ds, pdb) are near everything short
			limit = 1
		case len(name) > 6:
			limit = 3
		}
		if d > limit && !(len(name) >= 3 && strings.HasPrefix(n, name)) {
			continue
		}
		if seen[r.Name] {
			// keep the best distance for each resource
			for i := range cands {
				if cands[i].name == r.Name && d < cands[i].dist {
					cands[i].dist = d
				}
			}
			continue
		}
		seen[r.Name] = true
		cands = append(cands, scored{r.Name, d})
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].dist != cands[j].dist {
			return cands[i].dist < cands[j].dist
		}
		return cands[i].name < cands[j].name
	})
	var out []string
	for i := 0; i < len(cands) && i < max; i++ {
		out = append(out, cands[i].name)
	}
	return out
}

// editDistance is the optimal string alignment distance between a and
// b: insertions, deletions, substitutions and swaps of neighbours each
// cost one, so "pdos" is one away from "pods".
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// KeyInfo is what a key says about the object it holds.
type KeyInfo struct {
	Key string `json:"key"`
	// Resource is the plural resource name ("" when the key is not under
	// the prefix).
	Resource  string `json:"resource,omitempty"`
	Group     string `json:"group,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// Object is "namespace/name" or "name".
func (k KeyInfo) Object() string {
	if k.Namespace != "" {
		return k.Namespace + "/" + k.Name
	}
	return k.Name
}

// ParseKey splits an etcd key into resource, namespace and name.
// prefix is the API server's etcd prefix (DefaultPrefix when empty).
func ParseKey(prefix, key string) KeyInfo {
	info := KeyInfo{Key: key}
	rest, ok := strings.CutPrefix(key, strings.TrimSuffix(orDefault(prefix), "/")+"/")
	if !ok || rest == "" {
		return info
	}
	segs := strings.Split(rest, "/")
	// Known directories first, two-segment ones (services/specs) before
	// one-segment ones.
	for n := 2; n >= 1; n-- {
		if len(segs) <= n {
			continue
		}
		r, ok := byDir[strings.Join(segs[:n], "/")]
		if !ok {
			continue
		}
		info.Resource, info.Group = r.Name, r.Group
		fillObject(&info, segs[n:], r.Namespaced)
		return info
	}
	if strings.Contains(segs[0], ".") && len(segs) >= 3 {
		// custom resource: <group>/<resource>/[<ns>/]<name>
		info.Group, info.Resource = segs[0], segs[1]
		fillObject(&info, segs[2:], len(segs) == 4)
		return info
	}
	info.Resource = segs[0]
	fillObject(&info, segs[1:], len(segs) == 3)
	return info
}

func fillObject(info *KeyInfo, segs []string, namespaced bool) {
	switch {
	case namespaced && len(segs) >= 2:
		info.Namespace = segs[0]
		info.Name = strings.Join(segs[1:], "/")
	case len(segs) >= 1:
		info.Name = strings.Join(segs, "/")
	}
}

func orDefault(prefix string) string {
	if prefix == "" {
		return DefaultPrefix
	}
	return prefix
}

// Target is what a user named on the command line: an exact key, or a
// key prefix.
type Target struct {
	// Key is the exact key (for get) or the key prefix (for ls, watch, diff).
	Key string
	// Exact is true when Key names one object.
	Exact bool
	// Resource is set when the user named a resource.
	Resource *Resource
	// Namespace is the namespace named, if any.
	Namespace string
}

// ResolveObject turns `get`'s argument into a key: a raw key (starting
// with /), RESOURCE/NAME (namespace "default" for namespaced resources) or
// RESOURCE/NAMESPACE/NAME. namespace, when set, is the -n flag.
func ResolveObject(prefix, arg, namespace string) (Target, error) {
	if err := checkNamespace(namespace); err != nil {
		return Target{}, err
	}
	if strings.HasPrefix(arg, "/") {
		return Target{Key: arg, Exact: true}, nil
	}
	parts := strings.Split(arg, "/")
	if len(parts) < 2 || len(parts) > 3 || slicesContainEmpty(parts) {
		return Target{}, fmt.Errorf("%q: name an object as RESOURCE/NAME, RESOURCE/NAMESPACE/NAME or a raw key such as %s/pods/default/web", arg, orDefault(prefix))
	}
	r, err := LookupResource(parts[0])
	if err != nil {
		return Target{}, err
	}
	base := strings.TrimSuffix(orDefault(prefix), "/") + "/" + r.Dir + "/"
	switch {
	case len(parts) == 3 && !r.Namespaced:
		return Target{}, fmt.Errorf("%s are not namespaced: name one as %s/NAME", r.Name, r.Name)
	case len(parts) == 3:
		if namespace != "" && namespace != parts[1] {
			return Target{}, fmt.Errorf("%q names namespace %q but -n says %q: drop one", arg, parts[1], namespace)
		}
		return Target{Key: base + parts[1] + "/" + parts[2], Exact: true, Resource: &r, Namespace: parts[1]}, nil
	case r.Namespaced:
		ns := namespace
		if ns == "" {
			ns = "default"
		}
		return Target{Key: base + ns + "/" + parts[1], Exact: true, Resource: &r, Namespace: ns}, nil
	default:
		return Target{Key: base + parts[1], Exact: true, Resource: &r}, nil
	}
}

// ResolvePrefix turns the optional argument of ls, watch and diff into a
// key prefix: "" (everything under the etcd prefix), a raw prefix
// (starting with /), RESOURCE or RESOURCE/NAMESPACE. namespace, when set,
// is the -n flag.
func ResolvePrefix(prefix, arg, namespace string) (Target, error) {
	if err := checkNamespace(namespace); err != nil {
		return Target{}, err
	}
	base := strings.TrimSuffix(orDefault(prefix), "/") + "/"
	switch {
	case strings.HasPrefix(arg, "/"):
		if namespace != "" {
			return Target{}, fmt.Errorf("-n %s with a raw key prefix %q: put the namespace in the prefix, or name a resource", namespace, arg)
		}
		return Target{Key: arg}, nil
	case arg == "" || arg == "all":
		// -n without a resource filters by namespace after the fact.
		return Target{Key: base, Namespace: namespace}, nil
	}
	parts := strings.Split(arg, "/")
	if len(parts) > 2 || slicesContainEmpty(parts) {
		return Target{}, fmt.Errorf("%q: name RESOURCE, RESOURCE/NAMESPACE or a raw key prefix such as %spods/", arg, base)
	}
	r, err := LookupResource(parts[0])
	if err != nil {
		return Target{}, err
	}
	ns := namespace
	if len(parts) == 2 {
		if namespace != "" && namespace != parts[1] {
			return Target{}, fmt.Errorf("%q names namespace %q but -n says %q: drop one", arg, parts[1], namespace)
		}
		ns = parts[1]
	}
	if ns != "" && !r.Namespaced {
		return Target{}, fmt.Errorf("%s are not namespaced: drop the namespace", r.Name)
	}
	key := base + r.Dir + "/"
	if ns != "" {
		key += ns + "/"
	}
	return Target{Key: key, Resource: &r, Namespace: ns}, nil
}

// checkNamespace refuses a -n value that cannot be a namespace: one with a
// slash would name another key (-n a/b for namespace a, name b/...).
func checkNamespace(ns string) error {
	if ns == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

func slicesContainEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}
