package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fixtureLines(t testing.TB) [][]byte {
	t.Helper()
	data, err := os.ReadFile("testdata/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSpace(data), []byte("\n"))
}

func TestParseAuditLine(t *testing.T) {
	lines := fixtureLines(t)
	var got []Request
	for i, l := range lines {
		r, ok, err := ParseAuditLine(l)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if ok {
			got = append(got, r)
		}
	}
	if len(got) != 7 {
		t.Fatalf("%d requests, want 7 (the RequestReceived stage and a watch's end left out)", len(got))
	}
	svc, node, slice, bind, watch, secret, secretBody := got[0], got[1], got[2], got[3], got[4], got[5], got[6]
	if svc.Client != "kubectl" || svc.Verb != "create" || svc.Resource != "v1/services" || svc.Namespace != "default" || svc.Name != "web" ||
		svc.Code != 201 || svc.ResourceVersion != "1234" || svc.User != "kubernetes-admin" || svc.LatencyMS != 12.5 {
		t.Errorf("the Service's create: %+v", svc)
	}
	if svc.Time.UTC().Format("15:04:05.000") != "14:00:00.100" {
		t.Errorf("time %s", svc.Time)
	}
	body, _ := json.Marshal(svc.Body)
	if !strings.Contains(string(body), `"nodePort":30080`) {
		t.Errorf("the Service's body: %s", body)
	}
	if !node.Read() || node.Body != nil || node.sourceIP != "10.250.0.3" {
		t.Errorf("the kubelet's get: %+v", node)
	}
	if slice.Name != "web-x7k2p" || slice.Resource != "discovery.k8s.io/v1/endpointslices" || slice.ResourceVersion != "1236" ||
		slice.Client != "kube-controller-manager/system:serviceaccount:kube-system:endpointslice-controller" {
		t.Errorf("a generateName create is named by its response: %+v", slice)
	}
	if bind.Resource != "v1/pods/binding" || bind.Name != "web-5d8f-abcde" || bind.ResourceVersion != "" || bind.Client != "kube-scheduler/scheduler" {
		t.Errorf("the binding: %+v", bind)
	}
	if watch.Verb != "watch" || !watch.Read() {
		t.Errorf("a watch's ResponseStarted counts: %+v", watch)
	}
	if secret.Body != nil {
		t.Errorf("a Secret at Metadata has a body: %v", secret.Body)
	}
	sb, _ := json.Marshal(secretBody.Body)
	if strings.Contains(string(sb), "aHVudGVyMg") || strings.Contains(string(sb), "s3cr3t") || !strings.Contains(string(sb), "redacted") {
		t.Errorf("a Secret's body is not redacted: %s", sb)
	}
}

func TestParseAuditLineBad(t *testing.T) {
	for _, l := range []string{`not json`, `{"kind":"Policy","apiVersion":"audit.k8s.io/v1"}`, `[1,2]`} {
		if _, _, err := ParseAuditLine([]byte(l)); err == nil {
			t.Errorf("%q parsed", l)
		}
	}
}

func TestShortAgent(t *testing.T) {
	tests := []struct{ ua, want string }{
		{"kubectl/v1.34.4 (linux/amd64) kubernetes/d6e5f7a", "kubectl"},
		{"kube-controller-manager/v1.34.4 (linux/amd64) kubernetes/d6e5f7a/system:serviceaccount:kube-system:replicaset-controller", "kube-controller-manager/system:serviceaccount:kube-system:replicaset-controller"},
		{"kube-scheduler/v1.34.4 (linux/amd64) kubernetes/d6e5f7a/scheduler", "kube-scheduler/scheduler"},
		{"kubelet/v1.34.4 (linux/amd64) kubernetes/d6e5f7a", "kubelet"},
		{"Go-http-client/2.0", "Go-http-client"},
		{"curl", "curl"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := ShortAgent(tt.ua); got != tt.want {
			t.Errorf("ShortAgent(%q) = %q, want %q", tt.ua, got, tt.want)
		}
	}
}

// TestTail follows a log as the API server's lumberjack writes and
// rotates it: lines appended, a line written in two parts, the file
// renamed to audit-<time>.log with lines still written to it before the
// new file appears, and the new file.
func TestTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	write := func(f *os.File, s string) {
		t.Helper()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(f, "before-1\nbefore-2\n")
	tail, err := OpenTail(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	read := func(want ...string) {
		t.Helper()
		lines, err := tail.Lines()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range lines {
			got = append(got, string(l))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("lines %q, want %q", got, want)
		}
	}
	read()
	write(f, "a\nb")
	read("a")
	write(f, "c\n")
	read("bc")
	write(f, "d\n")
	// rotation: rename, a last line into the old file, then the new file
	if err := os.Rename(path, filepath.Join(dir, "audit-2026-12-02T14-00-00.000.log")); err != nil {
		t.Fatal(err)
	}
	write(f, "e\n")
	read("d", "e")
	write(f, "f\n")
	f.Close()
	nf, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer nf.Close()
	write(nf, "new-1\n")
	read("f", "new-1")
	write(nf, "new-2\n")
	read("new-2")

	from, err := OpenTail(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	if lines, _ := from.Lines(); len(lines) != 2 {
		t.Errorf("from the start: %q", lines)
	}
	if _, err := OpenTail(filepath.Join(dir, "none.log"), false); err == nil {
		t.Error("a missing log opened")
	}
}
