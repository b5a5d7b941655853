package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	gojson "encoding/json"

	yaml3 "go.yaml.in/yaml/v3"
	strictjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// Read reads and checks the config file at path: strict decoding (an
// unknown or repeated key is an error naming it and its line), then
// every value on its own and against the others (see validate).
func Read(path string) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the cluster config file: %w", err)
	}
	return Decode(data, path)
}

// Decode is Read of data read from file.
func Decode(data []byte, file string) (*Cluster, error) {
	var root yaml3.Node
	if err := yaml3.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", file, err)
	}
	j, err := sigsyaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	p := &problems{file: file, root: &root}
	var c Cluster
	strict, err := strictjson.UnmarshalStrict(j, &c)
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
	c.validate(p)
	if err := p.err(); err != nil {
		return nil, err
	}
	c.file, c.root = file, &root
	c.normalize()
	return &c, nil
}

// Error lists what is wrong with a config file, one problem a line:
// FILE:LINE: KEY: what is wrong.
type Error struct {
	File     string
	Problems []string
}

func (e *Error) Error() string {
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
	e := &Error{File: p.file}
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
	t := reflect.TypeFor[Cluster]()
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

// problemsAt starts a list of problems of the file c was read from.
func (c *Cluster) problemsAt() *problems { return &problems{file: c.file, root: c.root} }

// ErrorAt is a problem with the value at key path of the file c was
// read from, which its reader found (a nodeSubnet the machine has
// taken): FILE:LINE: KEY: what is wrong.
func (c *Cluster) ErrorAt(path []string, format string, args ...any) error {
	p := c.problemsAt()
	p.add(path, format, args...)
	return p.err()
}
