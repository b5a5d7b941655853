package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
)

// MergePatch is one of kubeadmConfigPatches, parsed: the documents it
// selects (Kind, and APIVersion when it gives one) and what it merges
// into them (the patch less apiVersion and kind, which select).
type MergePatch struct {
	APIVersion, Kind string
	Fields           map[string]any
}

// ParseMergePatch parses one of kubeadmConfigPatches: a YAML document,
// a mapping with the kind of the documents it patches.
func ParseMergePatch(s string) (MergePatch, error) {
	var v any
	if err := decodeOneYAML(s, &v); err != nil {
		return MergePatch{}, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return MergePatch{}, fmt.Errorf("is %s, not a mapping: a merge patch is a YAML mapping with the kind of the documents it patches, e.g. kind: ClusterConfiguration", jsonKind(v))
	}
	if _, given := m["kind"]; !given {
		return MergePatch{}, errors.New("has no kind: give the kind of the documents it patches, e.g. kind: ClusterConfiguration")
	}
	p := MergePatch{Fields: m}
	for _, f := range []struct {
		key, example string
		to           *string
	}{{"kind", "ClusterConfiguration", &p.Kind}, {"apiVersion", "kubeadm.k8s.io/v1beta4", &p.APIVersion}} {
		raw, given := m[f.key]
		if !given {
			continue
		}
		s, _ := raw.(string)
		if s == "" {
			return MergePatch{}, fmt.Errorf("%s is %s: want the %s of the documents it patches, e.g. %s", f.key, jsonKind(raw), f.key, f.example)
		}
		*f.to = s
		delete(m, f.key)
	}
	return p, nil
}

// jsonOps are the operations of RFC 6902.
var jsonOps = []string{"add", "remove", "replace", "move", "copy", "test"}

// jsonOpNeeds is the member an operation needs besides op and path
// (RFC 6902 section 4): value or from.
var jsonOpNeeds = map[string]string{"add": "value", "replace": "value", "test": "value", "move": "from", "copy": "from"}

// ParseJSON6902 parses the patch of one of kubeadmConfigPatchesJSON6902
// (a YAML or JSON list of RFC 6902 operations) into JSON, checking each
// operation's op and path; whether it applies is the documents' to say.
func ParseJSON6902(p layout.PatchJSON6902) ([]byte, error) {
	var v any
	if err := decodeOneYAML(p.Patch, &v); err != nil {
		return nil, err
	}
	ops, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("is %s, not a list of operations: e.g. [{op: replace, path: /networking/dnsDomain, value: example.local}]", jsonKind(v))
	}
	for i, o := range ops {
		op, ok := o.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("operation %d is %s, not a mapping with op and path", i, jsonKind(o))
		}
		name, _ := op["op"].(string)
		if !slices.Contains(jsonOps, name) {
			return nil, fmt.Errorf("operation %d: op is %v: want one of %s", i, op["op"], strings.Join(jsonOps, ", "))
		}
		if !isPointer(op["path"]) {
			return nil, fmt.Errorf("operation %d: path is %v: want a JSON pointer such as /networking/dnsDomain", i, op["path"])
		}
		// A value may be null, but must be there: the patch library
		// panics on a test without one.
		member := jsonOpNeeds[name]
		if _, ok := op[member]; member != "" && !ok {
			return nil, fmt.Errorf("operation %d: %s needs a %s, e.g. {op: %s, %s}", i, name, member, name, jsonOpExample[member])
		}
		if member == "from" && !isPointer(op["from"]) {
			return nil, fmt.Errorf("operation %d: from is %v: want a JSON pointer such as /networking/dnsDomain", i, op["from"])
		}
	}
	return json.Marshal(ops)
}

// jsonOpExample shows each member jsonOps names, for errors.
var jsonOpExample = map[string]string{
	"value": "path: /networking/dnsDomain, value: example.local",
	"from":  "from: /networking/dnsDomain, path: /networking/serviceSubnet",
}

// isPointer says whether v is a JSON pointer (RFC 6901): empty, or
// starting with a slash.
func isPointer(v any) bool {
	s, ok := v.(string)
	return ok && (s == "" || strings.HasPrefix(s, "/"))
}

// decodeOneYAML decodes s, one YAML document, into v as JSON would
// (maps with string keys), refusing a repeated key and a second
// document.
func decodeOneYAML(s string, v any) error {
	dec := yaml3.NewDecoder(strings.NewReader(s))
	var first, second yaml3.Node
	if err := dec.Decode(&first); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("is empty")
		}
		return fmt.Errorf("is not YAML: %w", err)
	}
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		return errors.New("holds more than one YAML document: give each its own entry")
	}
	j, err := sigsyaml.YAMLToJSONStrict([]byte(s))
	if err != nil {
		return fmt.Errorf("is not YAML: %w", err)
	}
	return json.Unmarshal(j, v)
}

// jsonKind names the JSON type of v.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		if v == "" {
			return "an empty string"
		}
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}
