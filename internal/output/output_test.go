package output

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type result struct {
	Name    string   `json:"name"`
	Seconds float64  `json:"seconds"`
	Keys    []string `json:"keys,omitempty"`
}

func TestWriteJSONAndYAMLHaveTheSameFields(t *testing.T) {
	in := result{Name: "devk", Seconds: 1.5, Keys: []string{"a", "b"}}
	var j, y bytes.Buffer
	if err := Write(&j, JSON, in); err != nil {
		t.Fatal(err)
	}
	if err := Write(&y, YAML, in); err != nil {
		t.Fatal(err)
	}
	if got, want := j.String(), `{"name":"devk","seconds":1.5,"keys":["a","b"]}`+"\n"; got != want {
		t.Errorf("json: got %q, want %q", got, want)
	}
	if !strings.HasPrefix(y.String(), "---\n") {
		t.Errorf("yaml document does not start with ---: %q", y.String())
	}
	// sigs.k8s.io/yaml reads both (JSON is YAML): the same result back.
	for name, b := range map[string][]byte{"json": j.Bytes(), "yaml": y.Bytes()} {
		var out result
		if err := yaml.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if out.Name != in.Name || out.Seconds != in.Seconds || len(out.Keys) != 2 {
			t.Errorf("%s round trip: got %+v, want %+v", name, out, in)
		}
	}
}

func TestParse(t *testing.T) {
	for _, s := range Formats {
		if f, err := Parse(s); err != nil || string(f) != s {
			t.Errorf("Parse(%q) = %q, %v", s, f, err)
		}
	}
	if _, err := Parse("wide"); err == nil || !strings.Contains(err.Error(), "text, json, yaml") {
		t.Errorf("Parse(wide) = %v, want an error naming the formats", err)
	}
	if err := Write(&bytes.Buffer{}, Text, 1); err == nil {
		t.Error("Write(Text) succeeded; text is each command's own")
	}
}
