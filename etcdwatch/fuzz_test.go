package etcdwatch

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/devk/devk/etcdwatch/etcdtest"
)

// FuzzDecode feeds the decoder arbitrary bytes, seeded with real values of
// every kind it handles. Decode recovers from panics to keep the CLI up,
// so the fuzzer checks for the recovered marker instead of a crash.
func FuzzDecode(f *testing.F) {
	for _, k := range etcdtest.Kinds {
		f.Add(etcdtest.MustEncode(k.Make("default", "seed", 7)), false)
	}
	f.Add([]byte(`{"apiVersion":"v1","kind":"Secret","data":{"a":"Yg=="},"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"x"}}}`), false)
	f.Add([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","spec":{"n":1e400}}`), true)
	f.Add([]byte("k8s:enc:aescbc:v1:key1:\x00\x01\x02"), false)
	f.Add([]byte("k8s:enc:kms:v2:plugin:"), false)
	f.Add([]byte("k8s\x00"), false)
	f.Add([]byte("k8s\x00\x0a\x02\x0a\x00\x12\x00"), false)
	f.Add([]byte{0xff, 0xfe, 0x00}, false)
	f.Add([]byte("[1,2,{\"a\":null}]"), false)
	f.Add([]byte(""), false)
	f.Add(unknownTypeValue(f, apiServiceMessage(f)), false)

	ignore := mustPaths(f, "metadata.managedFields", "spec.containers.image")
	f.Fuzz(func(t *testing.T, data []byte, showSecrets bool) {
		o := DecodeOptions{ShowSecrets: showSecrets, Ignore: ignore}
		v := Decode(data, o)
		if strings.HasPrefix(v.Problem, "decoder panicked") {
			t.Fatalf("Decode(%q) %s", data, v.Problem)
		}
		if v.Summary == "" {
			t.Fatalf("Decode(%q) has no summary", data)
		}
		if v.Size != len(data) && v.Encoding != Empty {
			t.Fatalf("size %d, want %d", v.Size, len(data))
		}
		y, j := v.Render(YAML), v.Render(JSONFormat)
		if !utf8.ValidString(y) || !utf8.ValidString(j) || !strings.HasSuffix(y, "\n") {
			t.Fatalf("rendering of %q is not newline-terminated UTF-8: %q", data, y)
		}
		if v.HasDoc && !json.Valid([]byte(j)) {
			t.Fatalf("JSON rendering of %q is not JSON: %s", data, j)
		}
		if m, ok := v.Doc.(map[string]any); ok && !showSecrets && m["kind"] == "Secret" && m["apiVersion"] == "v1" {
			if d, ok := m["data"].(map[string]any); ok {
				for k, val := range d {
					if s, _ := val.(string); !strings.HasPrefix(s, "<redacted") {
						t.Fatalf("secret value %q not redacted: %v", k, val)
					}
				}
			}
		}
		// decoding is a pure function of its input
		if again := Decode(data, o); again.Render(YAML) != y || again.Summary != v.Summary {
			t.Fatalf("Decode(%q) is not deterministic", data)
		}
	})
}
