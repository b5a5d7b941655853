package etcdwatch

import (
	"fmt"
	"strings"
)

// FieldPath is a dotted path into a decoded object, such as
// metadata.managedFields. A path that meets a list applies to every
// element: spec.containers.image drops the image of each container.
type FieldPath []string

func (p FieldPath) String() string { return strings.Join(p, ".") }

// ParseFieldPaths parses --ignore values: dotted paths, comma separated
// or repeated. Empty entries are skipped.
func ParseFieldPaths(specs []string) ([]FieldPath, error) {
	var out []FieldPath
	for _, spec := range specs {
		for _, s := range strings.Split(spec, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			p := FieldPath(strings.Split(strings.TrimPrefix(s, "."), "."))
			for _, seg := range p {
				if seg == "" {
					return nil, fmt.Errorf("--ignore %q: a field path is names joined by dots, like metadata.managedFields", s)
				}
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// RemoveFields deletes the given paths from doc in place and returns it.
func RemoveFields(doc any, paths []FieldPath) any {
	for _, p := range paths {
		removePath(doc, p)
	}
	return doc
}

func removePath(doc any, p FieldPath) {
	if len(p) == 0 {
		return
	}
	switch t := doc.(type) {
	case map[string]any:
		if len(p) == 1 {
			delete(t, p[0])
			return
		}
		if child, ok := t[p[0]]; ok {
			removePath(child, p[1:])
		}
	case []any:
		for _, e := range t {
			removePath(e, p)
		}
	}
}
