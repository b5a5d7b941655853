package cli

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// ResultHelp documents a command's result for -o json|yaml in its help:
// the shape of v's type as its json tags name the fields, derived from
// the type itself, so the help cannot drift from what is printed.
// stream says the command prints one such document per event.
func ResultHelp(cmd *cobra.Command, v any, stream bool) {
	what := "one document"
	if stream {
		what = "one document per event (JSON: one per line; YAML: each after ---)"
	}
	text := "With -o json or -o yaml the result on stdout is " + what + ": " + shapeOf(reflect.TypeOf(v), 0)
	cmd.Long += "\n\n" + wrap(text, resultHelpWidth)
}

// resultHelpWidth is where the result's description wraps.
const resultHelpWidth = 78

// resultHelpDepth is how deep nested objects are spelled out; deeper ones
// show as {…}.
const resultHelpDepth = 3

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
	// shaper is a type that says its JSON shape itself (a Marshaler that
	// writes no string).
	shaper = reflect.TypeFor[interface{ JSONShape() string }]()
	// viewer is a type that marshals as another value (its JSONView),
	// whose shape is its own.
	viewer = reflect.TypeFor[interface{ JSONView() any }]()
)

// shapeOf describes type t as JSON: {field: type, …}, [elem], {KEY: value}.
func shapeOf(t reflect.Type, depth int) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return "time"
	case t == reflect.TypeFor[time.Duration]():
		return "nanoseconds"
	case t.Implements(shaper):
		return reflect.Zero(t).Interface().(interface{ JSONShape() string }).JSONShape()
	case t.Implements(viewer):
		return shapeOf(reflect.TypeOf(reflect.Zero(t).Interface().(interface{ JSONView() any }).JSONView()), depth)
	case t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler),
		t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		return "string"
	}
	switch t.Kind() {
	case reflect.Struct:
		if depth >= resultHelpDepth {
			return "{…}"
		}
		return "{" + strings.Join(fieldsOf(t, depth), ", ") + "}"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "base64"
		}
		return "[" + shapeOf(t.Elem(), depth) + "]"
	case reflect.Map:
		return "{" + strings.ToUpper(shapeOf(t.Key(), depth)) + ": " + shapeOf(t.Elem(), depth+1) + "}"
	case reflect.Bool:
		return "bool"
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "number"
	default:
		return "any"
	}
}

// fieldsOf lists a struct's JSON fields as name: shape, with embedded
// structs' fields in line, as encoding/json does.
func fieldsOf(t reflect.Type, depth int) []string {
	var out []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			out = append(out, fieldsOf(ft, depth)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name+": "+shapeOf(f.Type, depth+1))
	}
	return out
}

// wrap breaks text into lines of at most width runes at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for i, w := range strings.Fields(text) {
		n := len([]rune(w))
		if i > 0 && line+1+n > width {
			b.WriteString("\n")
			line = 0
		} else if i > 0 {
			b.WriteString(" ")
			line++
		}
		b.WriteString(w)
		line += n
	}
	return b.String()
}
