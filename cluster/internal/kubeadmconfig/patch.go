package kubeadmconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/internal/layout"
)

// The config file's keys of the patches, which errors name.
const (
	keyMergePatches    = "kubeadmConfigPatches"
	keyJSON6902Patches = "kubeadmConfigPatchesJSON6902"
)

// Kinds are the documents devk writes for kubeadm, which a patch
// selects among: Init's and Join's together, so that one patch list
// serves both (a patch of ClusterConfiguration leaves a JoinConfiguration
// alone); a patch that selects none of them is an error.
var Kinds = []schema.GroupVersionKind{
	{Group: Group, Version: Version, Kind: InitConfigurationKind},
	{Group: Group, Version: Version, Kind: ClusterConfigurationKind},
	{Group: Group, Version: Version, Kind: JoinConfigurationKind},
	schema.FromAPIVersionAndKind(kubeletconfig.APIVersion, kubeletconfig.Kind),
	kubeproxyconfig.SchemeGroupVersion.WithKind("KubeProxyConfiguration"),
}

// ErrNoMatch is a patch that selects none of Kinds.
var ErrNoMatch = errors.New("matches no document")

// PatchError is a patch of the config file that is wrong: it selects
// no document (ErrNoMatch), is not a patch, or does not apply.
type PatchError struct {
	// Key is kubeadmConfigPatches or kubeadmConfigPatchesJSON6902;
	// Index the patch's in it.
	Key   string
	Index int
	Err   error
}

func (e *PatchError) Error() string {
	return fmt.Sprintf("%s[%d]: %v: fix or remove it in the config file", e.Key, e.Index, e.Err)
}

func (e *PatchError) Unwrap() error { return e.Err }

// document is one document of the config, as JSON, and what it is.
type document struct {
	gvk  schema.GroupVersionKind
	json []byte
}

// newDocument reads a document's apiVersion and kind.
func newDocument(j []byte) (document, error) {
	var tm struct{ APIVersion, Kind string }
	if err := json.Unmarshal(j, &tm); err != nil {
		return document{}, fmt.Errorf("read a kubeadm config document: %w", err)
	}
	return document{gvk: schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind), json: j}, nil
}

// selector is what a patch selects documents by; an empty group or
// version selects any.
type selector struct{ group, version, kind string }

// selectorOf is a merge patch's: its apiVersion a group/version, or a
// group alone (any of its versions, as kind has it).
func selectorOf(p config.MergePatch) selector {
	group, version, found := strings.Cut(p.APIVersion, "/")
	if !found {
		version = ""
	}
	return selector{group, version, p.Kind}
}

func (s selector) matches(gvk schema.GroupVersionKind) bool {
	return s.kind == gvk.Kind && (s.group == "" || s.group == gvk.Group) && (s.version == "" || s.version == gvk.Version)
}

// noMatch says which documents a patch could select.
func (s selector) noMatch() error {
	var kinds []string
	for _, k := range Kinds {
		kinds = append(kinds, k.GroupVersion().String()+" "+k.Kind)
	}
	what := "kind " + s.kind
	if s.group != "" || s.version != "" {
		what = fmt.Sprintf("group %q, version %q, kind %s", s.group, s.version, s.kind)
	}
	return fmt.Errorf("%w: it selects %s, and devk writes %s", ErrNoMatch, what, strings.Join(kinds, ", "))
}

// applyPatches applies spec's merge patches to the documents they
// select, in the file's order, then its JSON 6902 patches.
func applyPatches(spec layout.Spec, docs []document) error {
	for i, raw := range spec.KubeadmConfigPatches {
		p, err := config.ParseMergePatch(raw)
		if err != nil {
			return &PatchError{Key: keyMergePatches, Index: i, Err: err}
		}
		patch, err := json.Marshal(p.Fields)
		if err != nil {
			return &PatchError{Key: keyMergePatches, Index: i, Err: err}
		}
		if err := apply(selectorOf(p), docs, func(d document) ([]byte, error) { return mergePatch(d, patch) }); err != nil {
			return &PatchError{Key: keyMergePatches, Index: i, Err: err}
		}
	}
	for i, p := range spec.KubeadmConfigPatchesJSON6902 {
		ops, err := config.ParseJSON6902(p)
		if err != nil {
			return &PatchError{Key: keyJSON6902Patches, Index: i, Err: err}
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			return &PatchError{Key: keyJSON6902Patches, Index: i, Err: err}
		}
		if err := apply(selector{p.Group, p.Version, p.Kind}, docs, func(d document) ([]byte, error) { return patch.Apply(d.json) }); err != nil {
			return &PatchError{Key: keyJSON6902Patches, Index: i, Err: err}
		}
	}
	return nil
}

// apply patches the documents s selects with patch; an error when s
// selects none of Kinds, or the patch does not apply or changes what a
// document is.
func apply(s selector, docs []document, patch func(document) ([]byte, error)) error {
	if !slices.ContainsFunc(Kinds, s.matches) {
		return s.noMatch()
	}
	for i, d := range docs {
		if !s.matches(d.gvk) {
			continue
		}
		out, err := patch(d)
		if err != nil {
			return fmt.Errorf("does not apply to %s: %w", d.gvk.Kind, err)
		}
		patched, err := newDocument(out)
		switch {
		case err != nil:
			return fmt.Errorf("does not apply to %s: it leaves no object: %w", d.gvk.Kind, err)
		case patched.gvk != d.gvk:
			return fmt.Errorf("does not apply to %s: it changes the document's apiVersion or kind to %q, %q", d.gvk.Kind, patched.gvk.GroupVersion(), patched.gvk.Kind)
		}
		docs[i] = patched
	}
	return nil
}

// mergePatch is d merged with patch as kind merges: an RFC 7386 merge
// patch, but in kubeadm's documents the lists whose items have a key
// merge by it: extraArgs and kubeletExtraArgs by name (an item with a
// null value removes the flag; a mapping of flag: value says the same
// as the list), certSANs as a set.
func mergePatch(d document, patch []byte) ([]byte, error) {
	if d.gvk.Group != Group {
		return jsonpatch.MergePatch(d.json, patch)
	}
	var doc, p map[string]any
	if err := json.Unmarshal(d.json, &doc); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	if err := mergeLists(doc, p, nil); err != nil {
		return nil, err
	}
	docJSON, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	rest, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return jsonpatch.MergePatch(docJSON, rest)
}

// Lists merged by key rather than replaced.
const (
	keyExtraArgs        = "extraArgs"
	keyKubeletExtraArgs = "kubeletExtraArgs"
	keyCertSANs         = "certSANs"
)

// mergeLists merges into doc the lists of patch that merge by key, and
// takes them out of patch, at every depth; path is where doc is.
func mergeLists(doc, patch map[string]any, path []string) error {
	for _, k := range slices.Sorted(maps.Keys(patch)) {
		at := append(slices.Clone(path), k)
		var err error
		switch v := patch[k]; {
		case v == nil:
			// null deletes, the list as anything else: the merge patch's.
		case k == keyExtraArgs || k == keyKubeletExtraArgs:
			doc[k], err = mergeArgs(doc[k], v, at)
			delete(patch, k)
		case k == keyCertSANs:
			doc[k], err = mergeSet(doc[k], v, at)
			delete(patch, k)
		default:
			sub, ok := v.(map[string]any)
			if !ok {
				break
			}
			if _, given := doc[k]; !given {
				doc[k] = map[string]any{}
			}
			if docSub, ok := doc[k].(map[string]any); ok {
				err = mergeLists(docSub, sub, at)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mergeArgs merges patch's flags into has, a list of {name, value}: a
// flag's value replaced where it first is (a repeated one kept once),
// added at the end, or removed by a null value.
func mergeArgs(has, patch any, path []string) ([]any, error) {
	list, _ := has.([]any)
	for _, a := range patchArgs(patch) {
		if a.err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(path, "."), a.err)
		}
		out := []any{}
		set := a.value == nil
		for _, item := range list {
			switch {
			case argName(item) != a.name:
				out = append(out, item)
			case !set:
				out = append(out, map[string]any{"name": a.name, "value": *a.value})
				set = true
			}
		}
		if !set {
			out = append(out, map[string]any{"name": a.name, "value": *a.value})
		}
		list = out
	}
	if list == nil {
		list = []any{}
	}
	return list, nil
}

// patchArg is one flag of a patch's extraArgs; value nil removes it.
type patchArg struct {
	name  string
	value *string
	err   error
}

// patchArgs reads a patch's extraArgs: a list of {name, value} (v1beta4)
// or a mapping of name: value (v1beta3's shape), the latter in name
// order.
func patchArgs(v any) []patchArg {
	const want = "want a list of {name, value} (kubeadm.k8s.io/v1beta4), e.g. [{name: v, value: \"4\"}], or a mapping of flag: value"
	one := func(name string, value any) patchArg {
		switch v := value.(type) {
		case nil:
			return patchArg{name: name}
		case string:
			return patchArg{name: name, value: &v}
		}
		return patchArg{err: fmt.Errorf("%s's value is %v: a flag's value is a string (quote it) or null (remove the flag)", name, value)}
	}
	switch v := v.(type) {
	case []any:
		var out []patchArg
		for _, item := range v {
			m, ok := item.(map[string]any)
			name, _ := m["name"].(string)
			if !ok || name == "" {
				return []patchArg{{err: fmt.Errorf("item %v has no name: %s", item, want)}}
			}
			out = append(out, one(name, m["value"]))
		}
		return out
	case map[string]any:
		var out []patchArg
		for _, name := range slices.Sorted(maps.Keys(v)) {
			out = append(out, one(name, v[name]))
		}
		return out
	}
	return []patchArg{{err: fmt.Errorf("is %v: %s", v, want)}}
}

func argName(item any) string {
	m, _ := item.(map[string]any)
	name, _ := m["name"].(string)
	return name
}

// mergeSet adds patch's strings to the list has, each once.
func mergeSet(has, patch any, path []string) ([]any, error) {
	add, ok := patch.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is %v: want a list of names and addresses", strings.Join(path, "."), patch)
	}
	list, _ := has.([]any)
	for _, s := range add {
		if _, ok := s.(string); !ok {
			return nil, fmt.Errorf("%s: %v is not a name or address (a string)", strings.Join(path, "."), s)
		}
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list, nil
}
