package etcdwatch

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/devk/devk/etcdwatch/etcdtest"
)

// FuzzDecode feeds the decoder arbitrary bytes, read from a key under the
// secrets resource or not, with arbitrary --ignore paths, seeded with real
// values of every kind it handles. Decode recovers from panics to keep the
// CLI up, so the fuzzer checks for the recovered marker instead of a
// crash. Properties: the value is summarised and renders as UTF-8 (and
// JSON when it has a document); decoding is a pure function of its input;
// ignored fields are gone; a Secret (by type or by key) shows no data, no
// last-applied copy and no raw bytes whatever is ignored; and redaction
// touches nothing else.
func FuzzDecode(f *testing.F) {
	applied := etcdtest.Secret("default", "applied", 1)
	applied.Annotations = map[string]string{lastAppliedAnnotation: `{"data":{"password":"aHVudGVyMQ=="}}`}
	secret := etcdtest.MustEncode(applied)
	for _, k := range etcdtest.Kinds {
		f.Add(etcdtest.MustEncode(k.Make("default", "seed", 7)), false, false, "")
	}
	f.Add(secret, false, false, "kind")
	f.Add(secret, false, true, "apiVersion,kind")
	f.Add(secret[:len(secret)-3], false, false, "")
	f.Add(secret, false, false, "metadata.annotations,data")
	f.Add([]byte(`{"apiVersion":"v1","kind":"Secret","data":{"a":"Yg=="},"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"x"}}}`), false, false, "kind")
	f.Add([]byte(`{"apiVersion":"v1","kind":"Secret","stringData":{"a":"b"}`), false, true, "")
	f.Add([]byte(`{"data":["aHVudGVyMQ=="]}`), false, true, "metadata")
	f.Add([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","spec":{"n":1e400}}`), true, false, "spec.n")
	f.Add([]byte("k8s:enc:aescbc:v1:key1:\x00\x01\x02"), false, true, "")
	f.Add([]byte("k8s:enc:kms:v2:plugin:"), false, false, "")
	f.Add([]byte("k8s\x00"), false, false, "")
	f.Add([]byte("k8s\x00\x0a\x02\x0a\x00\x12\x00"), false, true, "")
	f.Add([]byte{0xff, 0xfe, 0x00}, false, true, "")
	f.Add([]byte("[1,2,{\"a\":null}]"), false, false, "a")
	f.Add([]byte("hunter2"), false, true, "")
	f.Add([]byte(""), false, false, "")
	f.Add(unknownTypeValue(f, unknownTypeMessage(f)), false, false, "metadata.labels")
	f.Add(etcdtest.MustEncodeStored(etcdtest.CustomResourceDefinition("example.com", 1)), false, false, "spec.versions.schema")
	f.Add(etcdtest.MustEncodeStored(etcdtest.APIService("apps", "v1", 2)), false, false, "status")
	f.Add(etcdtest.MustEncode(etcdtest.CustomResourceDefinition("example.com", 1)), false, true, "")
	f.Add(etcdtest.MustEncode(etcdtest.APIService("apps", "v1", 2)), false, false, "spec.service")

	f.Fuzz(func(t *testing.T, data []byte, showSecrets, underSecrets bool, ignore string) {
		paths, err := ParseFieldPaths([]string{"metadata.managedFields", ignore})
		if err != nil {
			paths = nil
		}
		key := KeyInfo{Resource: "configmaps"}
		if underSecrets {
			key.Resource = "secrets"
		}
		o := DecodeOptions{ShowSecrets: showSecrets, Ignore: paths}
		v := DecodeKey(key, data, o)
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
		for _, p := range paths {
			if has(v.Doc, p) {
				t.Fatalf("--ignore %s, but the value still has it:\n%s", p, y)
			}
		}
		// decoding is a pure function of its input
		if again := DecodeKey(key, data, o); again.Render(YAML) != y || again.Summary != v.Summary {
			t.Fatalf("Decode(%q) is not deterministic", data)
		}

		secret := underSecrets || isSecretType(v.APIVersion, v.Kind)
		if secret && !showSecrets {
			checkRedacted(t, data, v)
		}
		if !secret {
			// only Secrets are redacted
			shown := DecodeKey(key, data, DecodeOptions{ShowSecrets: !showSecrets, Ignore: paths})
			if shown.Render(YAML) != y || shown.Redacted != 0 || v.Redacted != 0 {
				t.Fatalf("--show-secrets changed a value that is not a Secret (%s %s):\n%s\n%s", v.APIVersion, v.Kind, y, shown.Render(YAML))
			}
		}
	})
}

// checkRedacted fails unless v, a Secret decoded without --show-secrets,
// shows nothing it holds: data and stringData values are markers, so is
// the last-applied copy, and a value without a document is not quoted.
func checkRedacted(t *testing.T, data []byte, v Value) {
	t.Helper()
	if !v.HasDoc {
		if v.Encoding != Encrypted && v.Encoding != Empty && !strings.Contains(v.Summary, "not shown") {
			t.Fatalf("a Secret that does not decode is summarised as %q", v.Summary)
		}
		return
	}
	m, ok := v.Doc.(map[string]any)
	if !ok {
		t.Fatalf("a Secret shows a document that is not an object: %s", v.Render(YAML))
	}
	for _, field := range []string{"data", "stringData"} {
		switch d := m[field].(type) {
		case nil:
		case map[string]any:
			for k, val := range d {
				if s, _ := val.(string); !strings.HasPrefix(s, "<redacted") {
					t.Fatalf("%s.%s not redacted: %v (value %q)", field, k, val, data)
				}
			}
		default:
			if d != "<redacted>" {
				t.Fatalf("%s not redacted: %v (value %q)", field, d, data)
			}
		}
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		if ann, ok := md["annotations"].(map[string]any); ok {
			if s, ok := ann[lastAppliedAnnotation].(string); ok && !strings.HasPrefix(s, "<redacted") {
				t.Fatalf("last-applied copy not redacted: %q", s)
			}
		}
	}
}

// has reports whether doc has a field at p (in any element of a list on
// the way).
func has(doc any, p FieldPath) bool {
	if len(p) == 0 {
		return true
	}
	switch t := doc.(type) {
	case map[string]any:
		child, ok := t[p[0]]
		return ok && has(child, p[1:])
	case []any:
		for _, e := range t {
			if has(e, p) {
				return true
			}
		}
	}
	return false
}
