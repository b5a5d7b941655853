package etcdwatch

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/encoding/protowire"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1beta1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1beta1"
)

// Encoding says what an etcd value turned out to be.
type Encoding string

const (
	// Protobuf is a Kubernetes object: "k8s\x00" + runtime.Unknown.
	Protobuf Encoding = "protobuf"
	// JSON is a JSON document (custom resources and others).
	JSON Encoding = "json"
	// Encrypted is a value written through an encryption provider:
	// "k8s:enc:<provider>:...".
	Encrypted Encoding = "encrypted"
	// Text is printable UTF-8 that is not JSON.
	Text Encoding = "text"
	// Binary is anything else, including protobuf that does not decode.
	Binary Encoding = "binary"
	// Empty is a zero-length value.
	Empty Encoding = "empty"
)

var (
	protobufPrefix  = []byte("k8s\x00")
	encryptedPrefix = []byte("k8s:enc:")
	pbSerializer    = protobuf.NewSerializer(storageScheme, storageScheme)
)

// storageScheme knows every type kube-apiserver keeps in etcd: those of
// k8s.io/api (client-go's scheme), and those of the API servers it chains
// in front of its own: apiextensions-apiserver's CustomResourceDefinitions
// (stored as apiextensions.k8s.io/v1beta1) and kube-aggregator's
// APIServices. kube-apiserver stores these two as JSON, which needs no
// scheme; the scheme decodes them fully when they are protobuf, as any
// other client may write them.
var storageScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		scheme.AddToScheme,
		apiextensionsv1.AddToScheme, apiextensionsv1beta1.AddToScheme,
		apiregistrationv1.AddToScheme, apiregistrationv1beta1.AddToScheme,
	} {
		utilruntime.Must(add(s))
	}
	return s
}()

// Value is a decoded etcd value.
type Value struct {
	Encoding Encoding `json:"encoding"`
	Size     int      `json:"size"`
	// APIVersion and Kind name the object type, for Protobuf and for JSON
	// documents that carry them.
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	// Provider is the encryption provider (aescbc, aesgcm, secretbox,
	// kms) and KeyName the key or KMS plugin it names, for Encrypted.
	Provider string `json:"provider,omitempty"`
	KeyName  string `json:"keyName,omitempty"`
	// Doc is the decoded document (JSON types: map[string]any, []any,
	// string, float64, bool, nil) after redaction and ignored fields. It
	// is set for Protobuf values of known types and for JSON.
	Doc any `json:"object,omitempty"`
	// HasDoc tells a decoded JSON null from no document.
	HasDoc bool `json:"-"`
	// Redacted counts the Secret values hidden.
	Redacted int `json:"redacted,omitempty"`
	// Summary is one line describing the value; for values without a
	// document it is all devk can say.
	Summary string `json:"summary"`
	// Problem says why a value that looked decodable was not decoded.
	Problem string `json:"problem,omitempty"`
}

// DecodeOptions control Decode.
type DecodeOptions struct {
	// ShowSecrets leaves Secret data and stringData in the clear.
	ShowSecrets bool
	// Ignore lists field paths to drop before printing or diffing
	// (metadata.managedFields, status.conditions, ...); see ParseFieldPaths.
	Ignore []FieldPath
}

// Decode turns a value read from etcd into something a person can read.
// It never panics: a value it cannot decode is summarised, with the
// reason in Problem. Without the key, only the value's own type says
// whether it is a Secret; DecodeKey knows more.
func Decode(value []byte, o DecodeOptions) Value {
	return DecodeKey(KeyInfo{}, value, o)
}

// DecodeKey is Decode for the value of key k: a value stored under the
// secrets resource is treated as a Secret whatever it decodes to, and one
// that does not decode is not shown at all.
func DecodeKey(k KeyInfo, value []byte, o DecodeOptions) (v Value) {
	secretKey := k.Group == "" && k.Resource == "secrets"
	defer func() {
		if r := recover(); r != nil {
			v = binaryValue(value)
			v.Problem = fmt.Sprintf("decoder panicked: %v", r)
			if bytes.HasPrefix(value, protobufPrefix) {
				v.APIVersion, v.Kind = envelopeType(value)
				v.APIVersion, v.Kind = cleanName(v.APIVersion), cleanName(v.Kind)
			}
			if !o.ShowSecrets && (secretKey || isSecretType(v.APIVersion, v.Kind)) {
				v.hideRaw()
			}
		}
	}()
	switch {
	case len(value) == 0:
		return Value{Encoding: Empty, Summary: "empty value"}
	case bytes.HasPrefix(value, protobufPrefix):
		v = decodeProtobuf(value)
	case bytes.HasPrefix(value, encryptedPrefix):
		// the envelope names the provider and key, never the data
		return decodeEncrypted(value)
	case looksLikeJSON(value):
		v = decodeJSON(value)
	default:
		v = binaryValue(value)
	}
	// Redact first, judging by the type the decoder found (or the key),
	// then drop ignored fields: --ignore kind must not unmask a Secret.
	if !o.ShowSecrets && (secretKey || isSecretType(v.APIVersion, v.Kind)) {
		v.redactSecret()
	}
	if v.HasDoc {
		v.Doc = RemoveFields(v.Doc, o.Ignore)
	}
	return v
}

func decodeProtobuf(value []byte) Value {
	obj, gvk, err := pbSerializer.Decode(value, nil, nil)
	if err != nil {
		v := binaryValue(value)
		v.Encoding = Protobuf
		apiVersion, kind := "", ""
		if gvk != nil {
			apiVersion, kind = gvk.GroupVersion().String(), gvk.Kind
		}
		if kind == "" {
			apiVersion, kind = envelopeType(value)
		}
		if kind != "" {
			v.APIVersion, v.Kind = cleanName(apiVersion), cleanName(kind)
			if runtime.IsNotRegisteredError(err) {
				v.Summary = fmt.Sprintf("Kubernetes protobuf %s %s, %d bytes (a type devk's scheme does not know)", v.APIVersion, v.Kind, len(value))
				v.Problem = "type not in devk's scheme (k8s.io/api, apiextensions.k8s.io, apiregistration.k8s.io)"
				if doc, ok := decodeMetadataOnly(value, apiVersion, kind); ok {
					v.Doc, v.HasDoc = doc, true
					v.Summary = fmt.Sprintf("Kubernetes protobuf %s %s, %d bytes (metadata decoded; the rest is a type devk's scheme does not know)", v.APIVersion, v.Kind, len(value))
				}
				return v
			}
		}
		what := "Kubernetes protobuf"
		if v.Kind != "" {
			what += " " + v.APIVersion + " " + v.Kind
		}
		v.Summary = fmt.Sprintf("%s that does not decode, %d bytes: %s", what, len(value), hexPreview(value))
		v.Problem = err.Error()
		return v
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	raw, err := json.Marshal(obj)
	if err != nil {
		v := binaryValue(value)
		v.Encoding = Protobuf
		v.Problem = fmt.Sprintf("decoded %s but could not render it: %v", gvk.Kind, err)
		return v
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		v := binaryValue(value)
		v.Encoding = Protobuf
		v.Problem = err.Error()
		return v
	}
	return Value{
		Encoding:   Protobuf,
		Size:       len(value),
		APIVersion: gvk.GroupVersion().String(),
		Kind:       gvk.Kind,
		Doc:        doc,
		HasDoc:     true,
		Summary:    fmt.Sprintf("Kubernetes protobuf %s %s, %d bytes", gvk.GroupVersion().String(), gvk.Kind, len(value)),
	}
}

// envelopeType reads apiVersion and kind from the runtime.Unknown envelope
// of a protobuf value that does not decode (a truncated one, say): the
// envelope's field 1 is a TypeMeta, whose fields 1 and 2 are apiVersion
// and kind.
func envelopeType(value []byte) (apiVersion, kind string) {
	b := value[len(protobufPrefix):]
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return "", ""
	}
	tm, n := protowire.ConsumeBytes(b[n:])
	for n >= 0 && len(tm) > 0 {
		var num protowire.Number
		num, typ, n = protowire.ConsumeTag(tm)
		if n < 0 || typ != protowire.BytesType {
			break
		}
		tm = tm[n:]
		var field []byte
		field, n = protowire.ConsumeBytes(tm)
		if n < 0 {
			break
		}
		tm = tm[n:]
		switch num {
		case 1:
			apiVersion = string(field)
		case 2:
			kind = string(field)
		}
	}
	return apiVersion, kind
}

// decodeMetadataOnly reads what every Kubernetes object shares from a
// type devk's scheme lacks (one of a newer Kubernetes, or of an
// aggregated API server that writes to the same etcd): by convention field 1 of the object's
// message is its ObjectMeta, which apimachinery can decode, and fields 2
// and 3 are spec and status, of which only the size is shown.
func decodeMetadataOnly(value []byte, apiVersion, kind string) (map[string]any, bool) {
	var unk runtime.Unknown
	if _, _, err := pbSerializer.Decode(value, nil, &unk); err != nil {
		return nil, false
	}
	// the names as they are (YAML quotes them where it must), not as
	// cleanName shows them on one line
	doc := map[string]any{"apiVersion": strings.ToValidUTF8(apiVersion, "\uFFFD"), "kind": strings.ToValidUTF8(kind, "\uFFFD")}
	names := map[protowire.Number]string{2: "spec", 3: "status"}
	b := unk.Raw
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			continue
		}
		field, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch num {
		case 1:
			var meta metav1.ObjectMeta
			if err := meta.Unmarshal(field); err != nil {
				return nil, false
			}
			raw, err := json.Marshal(meta)
			if err != nil {
				return nil, false
			}
			var m any
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, false
			}
			doc["metadata"] = m
		default:
			name := names[num]
			if name == "" {
				name = fmt.Sprintf("field%d", num)
			}
			doc[name] = fmt.Sprintf("<%d bytes of protobuf, not decoded>", len(field))
		}
	}
	if _, ok := doc["metadata"]; !ok {
		return nil, false
	}
	return doc, true
}

func looksLikeJSON(value []byte) bool {
	t := bytes.TrimLeft(value, " \t\r\n")
	if len(t) == 0 {
		return false
	}
	switch c := t[0]; {
	case c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9'):
	case bytes.HasPrefix(t, []byte("true")) || bytes.HasPrefix(t, []byte("false")) || bytes.HasPrefix(t, []byte("null")):
	default:
		return false
	}
	return json.Valid(value)
}

func decodeJSON(value []byte) Value {
	var doc any
	d := json.NewDecoder(bytes.NewReader(value))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return binaryValue(value)
	}
	doc = normaliseNumbers(doc)
	v := Value{Encoding: JSON, Size: len(value), Doc: doc, HasDoc: true}
	if m, ok := doc.(map[string]any); ok {
		api, _ := m["apiVersion"].(string)
		kind, _ := m["kind"].(string)
		v.APIVersion, v.Kind = cleanName(api), cleanName(kind)
	}
	if v.Kind != "" {
		v.Summary = fmt.Sprintf("JSON %s %s, %d bytes", v.APIVersion, v.Kind, len(value))
	} else {
		v.Summary = fmt.Sprintf("JSON, %d bytes", len(value))
	}
	return v
}

// normaliseNumbers turns json.Number into int64 when exact, else float64,
// so that large integers (generation, resourceVersion-like counters) print
// as written rather than in exponent form.
func normaliseNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normaliseNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = normaliseNumbers(e)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if f, err := t.Float64(); err == nil {
			return f
		}
		return t.String()
	}
	return v
}

// decodeEncrypted reads the envelope of a value written through an
// encryption provider: k8s:enc:<provider>:v<N>:<key or plugin name>:<data>.
func decodeEncrypted(value []byte) Value {
	v := Value{Encoding: Encrypted, Size: len(value)}
	rest := value[len(encryptedPrefix):]
	provider, rest, ok := bytes.Cut(rest, []byte(":"))
	if !ok || !printableToken(provider) {
		v.Summary = fmt.Sprintf("encrypted (unreadable provider), %d bytes", len(value))
		return v
	}
	v.Provider = string(provider)
	if version, rest2, ok := bytes.Cut(rest, []byte(":")); ok && printableToken(version) {
		if name, _, ok := bytes.Cut(rest2, []byte(":")); ok && printableToken(name) {
			v.KeyName = string(version) + ":" + string(name)
		}
	}
	key := ""
	if v.KeyName != "" {
		key = fmt.Sprintf(" (key %s)", v.KeyName)
	}
	v.Summary = fmt.Sprintf("encrypted with the %s provider%s, %d bytes: devk cannot decrypt it; read it through the API server (kubectl get)", v.Provider, key, len(value))
	return v
}

// cleanName keeps a type name from a value fit for a one-line summary:
// names that are not short printable tokens are quoted as Go quotes them,
// so that control bytes show. Documents keep the names as they are.
func cleanName(s string) string {
	clean := len(s) <= 253
	for i := 0; i < len(s) && clean; i++ {
		clean = s[i] > ' ' && s[i] < 0x7f
	}
	if clean {
		return s
	}
	if len(s) > 64 {
		s = truncateUTF8(s, 64)
	}
	return strconv.Quote(s)
}

func printableToken(b []byte) bool {
	if len(b) == 0 || len(b) > 64 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// binaryValue summarises a value devk cannot decode: printable text is
// quoted (truncated), anything else shown as a short hex prefix.
func binaryValue(value []byte) Value {
	if len(value) == 0 {
		return Value{Encoding: Empty, Summary: "empty value"}
	}
	if utf8.Valid(value) && isPrintable(string(value)) {
		s := string(value)
		if len(s) > 120 {
			s = truncateUTF8(s, 120) + "…"
		}
		return Value{Encoding: Text, Size: len(value), Summary: fmt.Sprintf("text, %d bytes: %q", len(value), s)}
	}
	return Value{Encoding: Binary, Size: len(value), Summary: fmt.Sprintf("binary, %d bytes: %s", len(value), hexPreview(value))}
}

func hexPreview(b []byte) string {
	const n = 24
	if len(b) <= n {
		return hex.EncodeToString(b)
	}
	return hex.EncodeToString(b[:n]) + "…"
}

func isPrintable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

func truncateUTF8(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// lastAppliedAnnotation holds a copy of the whole object `kubectl apply`
// was given, data included.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// isSecretType reports whether a decoded type is a Secret of the core
// group, whatever its version.
func isSecretType(apiVersion, kind string) bool {
	return kind == "Secret" && !strings.Contains(apiVersion, "/")
}

// redactSecret hides what a Secret holds: the values of data and
// stringData (keeping their sizes, so that a change of length still
// shows) and the copy of the whole object kubectl apply keeps in an
// annotation. A value with no document to redact in, or whose document is
// not an object, is hidden whole.
func (v *Value) redactSecret() {
	m, ok := v.Doc.(map[string]any)
	if !v.HasDoc || !ok {
		v.Doc, v.HasDoc = nil, false
		v.hideRaw()
		return
	}
	for _, field := range []string{"data", "stringData"} {
		switch data := m[field].(type) {
		case nil:
		case map[string]any:
			for k, val := range data {
				data[k] = redactedSize(val, field == "data")
				v.Redacted++
			}
		default:
			m[field] = "<redacted>"
			v.Redacted++
		}
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		if ann, ok := md["annotations"].(map[string]any); ok {
			if _, ok := ann[lastAppliedAnnotation]; ok {
				ann[lastAppliedAnnotation] = "<redacted, a copy of the secret>"
				v.Redacted++
			}
		}
	}
}

// redactedSize stands in for a Secret value: its size, decoded from
// base64 for data.
func redactedSize(val any, base64Data bool) string {
	s, ok := val.(string)
	if !ok {
		return "<redacted>"
	}
	size := len(s)
	if raw, err := base64.StdEncoding.DecodeString(s); base64Data && err == nil {
		size = len(raw)
	}
	return fmt.Sprintf("<redacted, %d bytes>", size)
}

// hideRaw replaces a summary that quotes the value (text, a hex preview)
// with one that does not.
func (v *Value) hideRaw() {
	if v.Encoding == Encrypted || v.Encoding == Empty {
		return
	}
	what := string(v.Encoding)
	if v.Kind != "" {
		what += " " + v.APIVersion + " " + v.Kind
	}
	v.Summary = fmt.Sprintf("%s, %d bytes, not shown: it may hold Secret data (--show-secrets shows it)", what, v.Size)
	v.Redacted++
}

// Format is how decoded values are printed.
type Format string

const (
	// YAML is the default, for people (and for line diffs).
	YAML Format = "yaml"
	// JSONFormat prints indented JSON.
	JSONFormat Format = "json"
)

// Render prints the value: the document as YAML or JSON when there is
// one, else the one-line summary. The result ends in a newline.
func (v Value) Render(f Format) string {
	if !v.HasDoc {
		return v.Summary + "\n"
	}
	switch f {
	case JSONFormat:
		b, err := json.MarshalIndent(v.Doc, "", "  ")
		if err != nil {
			return v.Summary + "\n"
		}
		return string(b) + "\n"
	default:
		// Doc holds JSON types only, so go-yaml renders it exactly as
		// sigs.k8s.io/yaml would (sorted keys, strings quoted where they
		// would read as another type), without its JSON round trip.
		b, err := yaml.Marshal(v.Doc)
		if err != nil {
			return v.Summary + "\n"
		}
		s := string(b)
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		return s
	}
}
