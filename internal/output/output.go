// Package output writes a command's result in the format -o asks for:
// devk's own text (each command prints that itself), or one JSON or YAML
// document of the command's documented result type.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// Format is a result format.
type Format string

const (
	// Text is each command's own human-readable output.
	Text Format = "text"
	// JSON is one JSON object per result, on one line (a stream of them
	// for commands that print results as they happen, like etcd watch).
	JSON Format = "json"
	// YAML is one YAML document per result, each starting with "---".
	YAML Format = "yaml"
)

// Formats lists the formats -o accepts, for help and completion.
var Formats = []string{string(Text), string(JSON), string(YAML)}

// Parse reads an -o value.
func Parse(s string) (Format, error) {
	for _, f := range Formats {
		if s == f {
			return Format(s), nil
		}
	}
	return "", fmt.Errorf("-o %q: use one of %s", s, strings.Join(Formats, ", "))
}

// Structured reports whether results are a data format (json or yaml)
// rather than text.
func (f Format) Structured() bool { return f == JSON || f == YAML }

// Write writes v as one document in format f (JSON or YAML; the field
// names are v's json tags either way), in a single Write so a reader of a
// stream sees whole documents.
func Write(w io.Writer, f Format, v any) error {
	var b []byte
	var err error
	switch f {
	case JSON:
		if b, err = json.Marshal(v); err == nil {
			b = append(b, '\n')
		}
	case YAML:
		if b, err = yaml.Marshal(v); err == nil {
			b = append([]byte("---\n"), b...)
		}
	default:
		return fmt.Errorf("output: %q is not a data format", f)
	}
	if err != nil {
		return fmt.Errorf("encode result as %s: %w", f, err)
	}
	_, err = w.Write(b)
	return err
}
