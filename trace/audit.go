package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/devk/devk/etcdwatch"
)

// Request is one API request from the audit log.
type Request struct {
	// Time is when the API server received it.
	Time time.Time `json:"time"`
	// AuditID names it in the audit log (and the Audit-Id response header).
	AuditID string `json:"auditID"`
	// User is the authenticated user, UserAgent the client's header and
	// Client that header shortened (kubectl,
	// kube-controller-manager/endpointslice-controller, kubelet).
	User      string `json:"user"`
	UserAgent string `json:"userAgent"`
	Client    string `json:"client"`
	Verb      string `json:"verb"`
	// Resource is group/version/resource[/subresource] (v1/pods/binding,
	// apps/v1/deployments); empty for a non-resource URL (URI).
	Resource  string `json:"resource,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	URI       string `json:"uri,omitempty"`
	Code      int32  `json:"code"`
	// LatencyMS is from its receipt to its response's completion.
	LatencyMS float64 `json:"latencyMs"`
	// ResourceVersion is the written object's, from the response: the
	// revision of the etcd write it made.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Body is a write's request object, decoded and redacted as
	// `devk etcd` shows values (a Secret's data never shows); none when
	// the audit policy logs the request at Metadata.
	Body any `json:"body,omitempty"`
	// FromCommand marks the requests of the traced command: received
	// while it ran, from this machine rather than a node.
	FromCommand bool `json:"fromCommand,omitempty"`
	// Etcd are the revisions of the etcd writes this request made.
	Etcd []int64 `json:"etcd,omitempty"`

	group, resource, subresource string
	sourceIP                     string
}

// readVerbs are the verbs that change nothing; trace counts them and
// lists them only with --reads.
var readVerbs = map[string]bool{"get": true, "list": true, "watch": true}

// Read says whether r changes nothing.
func (r Request) Read() bool { return readVerbs[r.Verb] }

// ParseAuditLine reads one line of an API server's JSON audit log (an
// audit.k8s.io/v1 Event). ok is false for an event trace does not show
// as a request: one of a stage before the response. A watch counts
// once, when its response starts (all a long watch logs for a while),
// unless it failed before that.
func ParseAuditLine(line []byte) (r Request, ok bool, err error) {
	var ev auditv1.Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return Request{}, false, fmt.Errorf("not an audit event: %w", err)
	}
	if ev.Kind != "" && ev.Kind != "Event" {
		return Request{}, false, fmt.Errorf("not an audit event: kind %q", ev.Kind)
	}
	switch ev.Stage {
	case auditv1.StageResponseComplete:
		if ev.Verb == "watch" && ev.ResponseStatus != nil && ev.ResponseStatus.Code == 200 {
			return Request{}, false, nil // counted when it started
		}
	case auditv1.StagePanic:
	case auditv1.StageResponseStarted:
		if ev.Verb != "watch" {
			return Request{}, false, nil
		}
	default:
		return Request{}, false, nil
	}
	r = Request{
		Time:      ev.RequestReceivedTimestamp.Time,
		AuditID:   string(ev.AuditID),
		User:      ev.User.Username,
		UserAgent: ev.UserAgent,
		Client:    ShortAgent(ev.UserAgent),
		Verb:      ev.Verb,
		URI:       ev.RequestURI,
	}
	if !ev.StageTimestamp.IsZero() && !ev.RequestReceivedTimestamp.IsZero() {
		r.LatencyMS = float64(ev.StageTimestamp.Sub(ev.RequestReceivedTimestamp.Time).Microseconds()) / 1000
	}
	if len(ev.SourceIPs) > 0 {
		r.sourceIP = ev.SourceIPs[0]
	}
	if ev.ResponseStatus != nil {
		r.Code = ev.ResponseStatus.Code
	}
	if o := ev.ObjectRef; o != nil && o.Resource != "" {
		r.group, r.resource, r.subresource = o.APIGroup, o.Resource, o.Subresource
		r.Namespace, r.Name = o.Namespace, o.Name
		gv := o.APIVersion
		if o.APIGroup != "" {
			gv = o.APIGroup + "/" + o.APIVersion
		}
		r.Resource = strings.Join(nonEmpty(gv, o.Resource, o.Subresource), "/")
		r.URI = ""
	}
	if ev.ResponseObject != nil && !r.Read() {
		var m struct {
			Metadata struct {
				Name, Namespace, ResourceVersion string
			} `json:"metadata"`
		}
		if json.Unmarshal(ev.ResponseObject.Raw, &m) == nil {
			r.ResourceVersion = m.Metadata.ResourceVersion
			// a create by generateName names the object only in the response
			if r.Name == "" && r.subresource == "" {
				r.Name = m.Metadata.Name
			}
		}
	}
	if ev.RequestObject != nil && !r.Read() {
		r.Body = redactedBody(r.group, r.resource, ev.RequestObject.Raw)
	}
	return r, true, nil
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// bodyIgnore are the fields left out of request bodies, as `devk etcd`
// leaves them out of values.
var bodyIgnore, _ = etcdwatch.ParseFieldPaths(etcdwatch.DefaultIgnore)

// redactedBody decodes a request object as `devk etcd` decodes a value
// of the resource: a Secret's data and stringData are redacted (also in
// a request to another resource that carries a Secret's kind).
func redactedBody(group, resource string, raw []byte) any {
	v := etcdwatch.DecodeKey(etcdwatch.KeyInfo{Group: group, Resource: resource}, raw, etcdwatch.DecodeOptions{Ignore: bodyIgnore})
	if !v.HasDoc {
		return v.Summary
	}
	return v.Doc
}

// ShortAgent shortens a client's User-Agent: its program and, for a
// controller, the controller's name (client-go's default agent is
// "<program>/<version> (<os>/<arch>) kubernetes/<commit>", and the
// controller-manager appends "/<controller>").
func ShortAgent(ua string) string {
	if ua == "" {
		return ""
	}
	prog, rest, _ := strings.Cut(ua, "/")
	if i := strings.Index(rest, " kubernetes/"); i >= 0 {
		parts := strings.SplitN(rest[i+len(" kubernetes/"):], "/", 2)
		if len(parts) == 2 && parts[1] != "" {
			return prog + "/" + parts[1]
		}
	}
	if strings.ContainsAny(prog, " (") {
		prog, _, _ = strings.Cut(prog, " ")
	}
	return prog
}

// Tail follows an audit log file as the API server writes and rotates
// it: each Lines call returns the complete lines written since the last,
// across a rotation (the API server renames the full file to
// audit-<time>.log and starts a new one at the same path: the rest of the
// old file is read before the new one).
type Tail struct {
	path    string
	f       *os.File
	ino     uint64
	partial []byte
}

// OpenTail starts at the end of the log at path (only what is written
// from now on), or at its start when fromStart.
func OpenTail(path string, fromStart bool) (*Tail, error) {
	t := &Tail{path: path}
	if err := t.open(); err != nil {
		return nil, err
	}
	if !fromStart {
		if _, err := t.f.Seek(0, io.SeekEnd); err != nil {
			t.f.Close()
			return nil, err
		}
	}
	return t, nil
}

func (t *Tail) open() error {
	f, err := os.Open(t.path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	t.f, t.ino = f, inode(fi)
	return nil
}

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// Lines returns the complete lines written since the last call.
func (t *Tail) Lines() ([][]byte, error) {
	lines, err := t.readAll()
	if err != nil {
		return lines, err
	}
	fi, err := os.Stat(t.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return lines, nil // between the rename and the new file
	case err != nil:
		return lines, err
	case inode(fi) == t.ino:
		return lines, nil
	}
	// Rotated: the old file is complete once the new one exists.
	more, err := t.readAll()
	lines = append(lines, more...)
	if err != nil {
		return lines, err
	}
	t.f.Close()
	t.partial = nil
	if err := t.open(); err != nil {
		return lines, err
	}
	more, err = t.readAll()
	return append(lines, more...), err
}

// readAll reads t.f to its end, keeping a last line without its newline
// for the next call.
func (t *Tail) readAll() ([][]byte, error) {
	data, err := io.ReadAll(t.f)
	if err != nil {
		return nil, fmt.Errorf("read audit log %s: %w", t.path, err)
	}
	data = append(t.partial, data...)
	end := bytes.LastIndexByte(data, '\n') + 1
	var lines [][]byte
	for _, line := range bytes.Split(data[:end], []byte("\n")) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			lines = append(lines, line)
		}
	}
	t.partial = bytes.Clone(data[end:])
	return lines, nil
}

// Close closes the file.
func (t *Tail) Close() error { return t.f.Close() }
