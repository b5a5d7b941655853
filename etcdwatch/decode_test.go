package etcdwatch

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/devk/devk/etcdwatch/etcdtest"
)

func mustPaths(t testing.TB, specs ...string) []FieldPath {
	t.Helper()
	p, err := ParseFieldPaths(specs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// unknownTypeValue is protobuf for a type devk's scheme lacks (one of a
// newer Kubernetes, say), as the API server stores its types: raw is the
// object's message.
func unknownTypeValue(t testing.TB, raw []byte) []byte {
	t.Helper()
	return unknownKindValue(t, "gadgets.k8s.io/v1", "Gadget", raw)
}

func unknownKindValue(t testing.TB, apiVersion, kind string, raw []byte) []byte {
	t.Helper()
	unk := runtime.Unknown{
		TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind},
		Raw:      raw,
	}
	b, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("k8s\x00"), b...)
}

// unknownTypeMessage is an object's message: metadata (field 1), and spec
// and status (fields 2, 3) of types devk lacks.
func unknownTypeMessage(t testing.TB) []byte {
	t.Helper()
	meta := metav1.ObjectMeta{Name: "g1", Labels: map[string]string{"gadgets.k8s.io/managed": "onstart"}}
	mb, err := meta.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, mb)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("\x0a\x04apps\x12\x02v1"))
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, []byte("\x0a\x00"))
}

func TestDecode(t *testing.T) {
	secretApplied := etcdtest.Secret("default", "applied", 1)
	secretApplied.Annotations = map[string]string{lastAppliedAnnotation: `{"data":{"password":"aHVudGVyMQ=="}}`}

	tests := []struct {
		name         string
		key          string // "" for Decode without a key
		value        []byte
		opts         DecodeOptions
		wantEncoding Encoding
		wantKind     string
		wantAPI      string
		contains     []string
		absent       []string
		wantProblem  bool
	}{
		{
			name: "pod protobuf", value: etcdtest.MustEncode(etcdtest.Pod("default", "web-1", 1)),
			wantEncoding: Protobuf, wantKind: "Pod", wantAPI: "v1",
			contains: []string{"kind: Pod", "image: registry.k8s.io/nginx-slim:0.27", "name: web-1", "namespace: default", "podIP: 10.244.0.2", "managedFields:"},
		},
		{
			name: "service protobuf", value: etcdtest.MustEncode(etcdtest.Service("default", "web", 2)),
			wantEncoding: Protobuf, wantKind: "Service", wantAPI: "v1",
			contains: []string{"clusterIP: 10.96.0.3", "port: 80", "targetPort: 8080"},
		},
		{
			name: "configmap protobuf", value: etcdtest.MustEncode(etcdtest.ConfigMap("kube-system", "cfg", 3)),
			wantEncoding: Protobuf, wantKind: "ConfigMap", wantAPI: "v1",
			contains: []string{"index: \"3\"", "settings.yaml: |"},
		},
		{
			name: "endpointslice protobuf", value: etcdtest.MustEncode(etcdtest.EndpointSlice("default", "web-abc", 4)),
			wantEncoding: Protobuf, wantKind: "EndpointSlice", wantAPI: "discovery.k8s.io/v1",
			contains: []string{"addressType: IPv4", "- 10.244.0.5", "kubernetes.io/service-name: web"},
		},
		{
			name: "lease protobuf", value: etcdtest.MustEncode(etcdtest.Lease("kube-system", "kube-scheduler", 5)),
			wantEncoding: Protobuf, wantKind: "Lease", wantAPI: "coordination.k8s.io/v1",
			contains: []string{"holderIdentity: holder-5", "leaseDurationSeconds: 15"},
		},
		{
			name: "secret redacted by default", value: etcdtest.MustEncode(etcdtest.Secret("default", "db", 1)),
			wantEncoding: Protobuf, wantKind: "Secret", wantAPI: "v1",
			contains: []string{"password: <redacted, 7 bytes>", "user: <redacted, 5 bytes>"},
			absent:   []string{"aHVudGVyMQ==", "hunter1", "YWRtaW4="},
		},
		{
			name: "secret shown with ShowSecrets", value: etcdtest.MustEncode(etcdtest.Secret("default", "db", 1)),
			opts:         DecodeOptions{ShowSecrets: true},
			wantEncoding: Protobuf, wantKind: "Secret", wantAPI: "v1",
			contains: []string{"password: aHVudGVyMQ==", "user: YWRtaW4="},
			absent:   []string{"redacted"},
		},
		{
			name: "secret last-applied annotation redacted", value: etcdtest.MustEncode(secretApplied),
			wantEncoding: Protobuf, wantKind: "Secret", wantAPI: "v1",
			contains: []string{"last-applied-configuration: <redacted, a copy of the secret>"},
			absent:   []string{"aHVudGVyMQ=="},
		},
		{
			name: "ignored fields dropped", value: etcdtest.MustEncode(etcdtest.Pod("default", "web-1", 1)),
			opts:         DecodeOptions{Ignore: mustPaths(t, "metadata.managedFields,status", "spec.containers.image")},
			wantEncoding: Protobuf, wantKind: "Pod", wantAPI: "v1",
			contains: []string{"name: web-1", "imagePullPolicy: IfNotPresent"},
			absent:   []string{"managedFields", "podIP", "image: registry"},
		},
		{
			name: "secret redacted whatever is ignored", value: etcdtest.MustEncode(secretApplied),
			opts:         DecodeOptions{Ignore: mustPaths(t, "kind,apiVersion,metadata.name")},
			wantEncoding: Protobuf, wantKind: "Secret", wantAPI: "v1",
			contains: []string{"password: <redacted, 7 bytes>", "last-applied-configuration: <redacted, a copy of the secret>"},
			absent:   []string{"aHVudGVyMQ==", "kind: Secret", "name: applied"},
		},
		{
			name:  "JSON secret redacted with its kind ignored",
			value: []byte(`{"apiVersion":"v1","kind":"Secret","data":{"token":"aHVudGVyMQ=="}}`),
			opts:  DecodeOptions{Ignore: mustPaths(t, "kind")}, wantEncoding: JSON, wantKind: "Secret", wantAPI: "v1",
			contains: []string{"token: <redacted, 7 bytes>"}, absent: []string{"aHVudGVyMQ=="},
		},
		{
			name: "data that is not an object, under the secrets key",
			key:  "/registry/secrets/default/odd", value: []byte(`{"data":["aHVudGVyMQ=="],"stringData":"hunter1"}`),
			wantEncoding: JSON, contains: []string{"data: <redacted>", "stringData: <redacted>"}, absent: []string{"aHVudGVyMQ==", "hunter1"},
		},
		{
			name: "undecodable value under the secrets key not shown",
			key:  "/registry/secrets/default/broken", value: []byte(`{"apiVersion":"v1","kind":"Secret","data":{"password":"aHVudGVyMQ=="}`),
			wantEncoding: Text, contains: []string{"text, 69 bytes, not shown: it may hold Secret data"}, absent: []string{"aHVudGVyMQ==", "password"},
		},
		{
			name: "binary value under the secrets key not shown",
			key:  "/registry/secrets/default/bin", value: append([]byte{0xff}, "hunter1"...),
			wantEncoding: Binary, contains: []string{"binary, 8 bytes, not shown"}, absent: []string{"68756e74657231", "hunter1"},
		},
		{
			name: "JSON scalar under the secrets key not shown",
			key:  "/registry/secrets/default/scalar", value: []byte(`"hunter1"`),
			wantEncoding: JSON, contains: []string{"json, 9 bytes, not shown"}, absent: []string{"hunter1"},
		},
		{
			name: "truncated protobuf Secret not shown", value: etcdtest.MustEncode(etcdtest.Secret("default", "db", 1))[:60],
			wantEncoding: Protobuf, wantKind: "Secret", wantAPI: "v1", wantProblem: true,
			contains: []string{"protobuf v1 Secret, 60 bytes, not shown"},
		},
		{
			name: "secrets of a custom resource group are not core Secrets",
			key:  "/registry/example.com/secrets/default/w", value: []byte(`{"apiVersion":"example.com/v1","kind":"Secret","data":{"a":"b"}}`),
			wantEncoding: JSON, wantKind: "Secret", wantAPI: "example.com/v1", contains: []string{"a: b"},
		},
		{
			name:         "custom resource JSON",
			value:        []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default"},"spec":{"size":3,"big":9007199254740993}}`),
			wantEncoding: JSON, wantKind: "Widget", wantAPI: "example.com/v1",
			contains: []string{"size: 3", "big: 9007199254740993", "name: w1"},
		},
		{
			name:         "JSON secret-like document redacted",
			value:        []byte(`{"apiVersion":"v1","kind":"Secret","stringData":{"token":"abc"}}`),
			wantEncoding: JSON, wantKind: "Secret", wantAPI: "v1",
			contains: []string{"token: <redacted, 3 bytes>"},
			absent:   []string{"abc"},
		},
		{
			name: "JSON number (compact_rev_key)", value: []byte("1234"),
			wantEncoding: JSON, contains: []string{"1234"},
		},
		{
			name:         "aescbc encrypted",
			value:        append([]byte("k8s:enc:aescbc:v1:key1:"), 0x8f, 0x01, 0xfe, 0x00, 0x42),
			wantEncoding: Encrypted,
			contains:     []string{"encrypted with the aescbc provider (key v1:key1), 28 bytes", "kubectl get"},
		},
		{
			name:         "kms v2 encrypted",
			value:        append([]byte("k8s:enc:kms:v2:vault-kms:"), 0x0a, 0x10, 0xff),
			wantEncoding: Encrypted,
			contains:     []string{"kms provider (key v2:vault-kms)"},
		},
		{
			name:         "encrypted with unreadable provider",
			value:        []byte("k8s:enc:\x00\x01"),
			wantEncoding: Encrypted,
			contains:     []string{"unreadable provider"},
		},
		{
			name:         "garbage",
			value:        []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x02},
			wantEncoding: Binary,
			contains:     []string{"binary, 7 bytes: deadbeef000102"},
		},
		{
			name:         "long garbage is cut short",
			value:        []byte(strings.Repeat("\x01\x02", 100)),
			wantEncoding: Binary,
			contains:     []string{"binary, 200 bytes: 010201020102010201020102010201020102010201020102…"},
		},
		{
			name: "printable text", value: []byte("hello etcd"),
			wantEncoding: Text, contains: []string{`text, 10 bytes: "hello etcd"`},
		},
		{
			name: "empty", value: nil, wantEncoding: Empty, contains: []string{"empty value"},
		},
		{
			name: "protobuf prefix then garbage", value: []byte("k8s\x00\xff\xff\xff\xff"),
			wantEncoding: Protobuf, wantProblem: true,
			contains: []string{"Kubernetes protobuf that does not decode, 8 bytes: 6b387300ffffffff"},
		},
		{
			name: "protobuf of a type devk does not know: metadata decoded", value: unknownTypeValue(t, unknownTypeMessage(t)),
			wantEncoding: Protobuf, wantKind: "Gadget", wantAPI: "gadgets.k8s.io/v1", wantProblem: true,
			contains: []string{"metadata decoded; the rest is a type devk's scheme does not know", "kind: Gadget", "name: g1",
				"gadgets.k8s.io/managed: onstart", "spec: <10 bytes of protobuf, not decoded>", "status: <2 bytes of protobuf, not decoded>"},
		},
		{
			name: "protobuf of a type devk does not know, unreadable", value: unknownTypeValue(t, []byte{0x0a, 0x02, 0xff, 0xff}),
			wantEncoding: Protobuf, wantKind: "Gadget", wantAPI: "gadgets.k8s.io/v1", wantProblem: true,
			contains: []string{"Kubernetes protobuf gadgets.k8s.io/v1 Gadget", "(a type devk's scheme does not know)"},
			absent:   []string{"metadata"},
		},
		{
			name: "a type name that is not a token: Go-quoted in the summary, YAML-quoted in the document", value: unknownKindValue(t, "gadgets.k8s.io/v1", "Gad\"get: x\n", unknownTypeMessage(t)),
			wantEncoding: Protobuf, wantKind: `"Gad\"get: x\n"`, wantAPI: "gadgets.k8s.io/v1", wantProblem: true,
			contains: []string{`Kubernetes protobuf gadgets.k8s.io/v1 "Gad\"get: x\n"`, "kind: |\n  Gad\"get: x\n"},
			absent:   []string{`kind: '"Gad`, `kind: "\"Gad`},
		},
		{
			name: "CustomResourceDefinition as kube-apiserver stores it (JSON, v1beta1)", value: etcdtest.MustEncodeStored(etcdtest.CustomResourceDefinition("example.com", 1)),
			wantEncoding: JSON, wantKind: "CustomResourceDefinition", wantAPI: "apiextensions.k8s.io/v1beta1",
			contains: []string{"name: widgets.example.com", "group: example.com", "plural: widgets", "scope: Namespaced", "openAPIV3Schema:",
				"minimum: 1", "storedVersions:", "type: Established", "status: \"True\""},
		},
		{
			name: "APIService as kube-apiserver stores it (JSON, v1)", value: etcdtest.MustEncodeStored(etcdtest.APIService("apps", "v1", 2)),
			wantEncoding: JSON, wantKind: "APIService", wantAPI: "apiregistration.k8s.io/v1",
			contains: []string{"name: v1.apps", "group: apps", "groupPriorityMinimum: 17800", "versionPriority: 15",
				"kube-aggregator.kubernetes.io/automanaged: onstart", "reason: Local", "type: Available"},
		},
		{
			name: "CustomResourceDefinition protobuf decodes fully", value: etcdtest.MustEncode(etcdtest.CustomResourceDefinition("example.com", 1)),
			wantEncoding: Protobuf, wantKind: "CustomResourceDefinition", wantAPI: "apiextensions.k8s.io/v1",
			contains: []string{"Kubernetes protobuf apiextensions.k8s.io/v1 CustomResourceDefinition", "plural: widgets", "openAPIV3Schema:", "minimum: 1", "storage: true"},
			absent:   []string{"not decoded"},
		},
		{
			name: "APIService protobuf decodes fully", value: etcdtest.MustEncode(etcdtest.APIService("apps", "v1", 2)),
			wantEncoding: Protobuf, wantKind: "APIService", wantAPI: "apiregistration.k8s.io/v1",
			contains: []string{"Kubernetes protobuf apiregistration.k8s.io/v1 APIService", "group: apps", "groupPriorityMinimum: 17800", "reason: Local"},
			absent:   []string{"not decoded"},
		},
		{
			name: "a custom resource of that definition", key: "/registry/example.com/widgets/default/w1",
			value:        []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default","uid":"7"},"spec":{"size":3}}`),
			wantEncoding: JSON, wantKind: "Widget", wantAPI: "example.com/v1", contains: []string{"kind: Widget", "size: 3"},
		},
		{
			name: "broken JSON is not JSON", value: []byte(`{"a":`),
			wantEncoding: Text, contains: []string{`text, 5 bytes: "{\"a\":"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Decode(tc.value, tc.opts)
			if tc.key != "" {
				v = DecodeKey(ParseKey("", tc.key), tc.value, tc.opts)
			}
			if v.Encoding != tc.wantEncoding {
				t.Errorf("encoding = %q, want %q (summary %q, problem %q)", v.Encoding, tc.wantEncoding, v.Summary, v.Problem)
			}
			if v.Kind != tc.wantKind || v.APIVersion != tc.wantAPI {
				t.Errorf("type = %q %q, want %q %q", v.APIVersion, v.Kind, tc.wantAPI, tc.wantKind)
			}
			if (v.Problem != "") != tc.wantProblem {
				t.Errorf("problem = %q, want one: %v", v.Problem, tc.wantProblem)
			}
			if v.Size != len(tc.value) {
				t.Errorf("size = %d, want %d", v.Size, len(tc.value))
			}
			out := v.Render(YAML) + v.Summary
			for _, want := range tc.contains {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			for _, bad := range tc.absent {
				if strings.Contains(out, bad) {
					t.Errorf("output has %q:\n%s", bad, out)
				}
			}
			if v.HasDoc {
				if !json.Valid([]byte(v.Render(JSONFormat))) {
					t.Errorf("JSON rendering is not JSON:\n%s", v.Render(JSONFormat))
				}
			}
		})
	}
}

func TestRenderJSONIsIndentedAndComplete(t *testing.T) {
	v := Decode(etcdtest.MustEncode(etcdtest.ConfigMap("default", "cfg", 1)), DecodeOptions{})
	out := v.Render(JSONFormat)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if m["kind"] != "ConfigMap" || m["apiVersion"] != "v1" || !strings.Contains(out, "\n  \"data\": {") {
		t.Errorf("unexpected JSON rendering:\n%s", out)
	}
}

// TestRenderMatchesKubectlYAML: Render uses go-yaml directly on the JSON
// document; it must print what sigs.k8s.io/yaml (kubectl's -o yaml) prints.
func TestRenderMatchesKubectlYAML(t *testing.T) {
	for _, k := range etcdtest.Kinds {
		obj := k.Make("default", "x", 3)
		v := Decode(etcdtest.MustEncode(obj), DecodeOptions{ShowSecrets: true})
		want, err := sigsyaml.Marshal(v.Doc)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.Render(YAML); got != string(want) {
			t.Errorf("%s: Render:\n%s\nsigs.k8s.io/yaml:\n%s", k.Dir, got, want)
		}
	}
}

func TestParseFieldPaths(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    []string
		wantErr bool
	}{
		{"comma separated", []string{"metadata.managedFields,metadata.resourceVersion"}, []string{"metadata.managedFields", "metadata.resourceVersion"}, false},
		{"repeated and spaced", []string{" status ", "spec.replicas"}, []string{"status", "spec.replicas"}, false},
		{"empty entries skipped", []string{"", ",,"}, nil, false},
		{"leading dot allowed", []string{".metadata.uid"}, []string{"metadata.uid"}, false},
		{"double dot rejected", []string{"metadata..uid"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFieldPaths(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if strings.Join(s, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got %q, want %q", s, tc.want)
			}
		})
	}
}
