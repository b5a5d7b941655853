package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Each test runs the load for a fraction of a second at a high rate, to
// keep the package's tests within a few seconds.
const (
	testRate     = 200
	testDuration = 500 * time.Millisecond
	testTimeout  = 2 * time.Second
)

// apiServer is an httptest TLS server speaking HTTP/2 that answers
// targetPath as the API server would; every reject-th request (0: none)
// gets a 429 with Retry-After: 0, which client-go retries at once.
type apiServer struct {
	*httptest.Server
	requests atomic.Int64
	reject   int64

	mu      sync.Mutex
	clients map[string]bool // the remote address of each connection a request came on
	patches []string        // the bodies of -write's patches
}

// connections is how many connections the requests came on.
func (s *apiServer) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

func newAPIServer(t *testing.T, reject int64) *apiServer {
	s := &apiServer{reject: reject, clients: map[string]bool{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.requests.Add(1)
		s.mu.Lock()
		s.clients[r.RemoteAddr] = true
		s.mu.Unlock()
		if r.Method == http.MethodPatch && r.URL.Path == writePath && r.Header.Get("Content-Type") == "application/merge-patch+json" {
			body, _ := io.ReadAll(r.Body)
			s.mu.Lock()
			s.patches = append(s.patches, string(body))
			s.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"kind":"PodTemplate","apiVersion":"v1","metadata":{"name":%q,"namespace":%q}}`, writeName, writeNamespace)
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != targetPath {
			http.Error(w, "not served by this test: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		if s.reject > 0 && n%s.reject == 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}`, http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":%q},"data":{"ca.crt":"test"}}`, targetName, targetNamespace)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// kubeconfig writes a kubeconfig for the server, trusting its
// certificate, with a token user.
func (s *apiServer) kubeconfig(t *testing.T) string {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	path := filepath.Join(t.TempDir(), "admin.conf")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: test
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, s.URL, base64.StdEncoding.EncodeToString(ca))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func testOptions(t *testing.T, s *apiServer, mode string) options {
	dir := t.TempDir()
	return options{
		kubeconfig: s.kubeconfig(t),
		rate:       testRate,
		duration:   testDuration,
		timeout:    testTimeout,
		mode:       mode,
		ready:      filepath.Join(dir, "ready"),
		out:        filepath.Join(dir, "summary.json"),
		log:        t.Output(),
	}
}

// checkCounts checks what holds for every run: each request sent either
// succeeded or failed, and the per-second counts add up.
func checkCounts(t *testing.T, s *summary) {
	t.Helper()
	if s.Succeeded+s.Failed != s.Sent {
		t.Errorf("sent %d, but succeeded %d + failed %d", s.Sent, s.Succeeded, s.Failed)
	}
	var sent, ok, failed int
	for _, sec := range s.PerSecond {
		sent, ok, failed = sent+sec.Sent, ok+sec.Succeeded, failed+sec.Failed
	}
	if sent != s.Sent || ok != s.Succeeded || failed != s.Failed {
		t.Errorf("per second: %d sent, %d succeeded, %d failed; the totals: %d, %d, %d", sent, ok, failed, s.Sent, s.Succeeded, s.Failed)
	}
}

// TestWrite: -write sends merge patches of the PodTemplate, each a new
// value of the annotation.
func TestWrite(t *testing.T) {
	srv := newAPIServer(t, 0)
	o := testOptions(t, srv, modeShared)
	o.write = true
	s, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if s.Failed != 0 || s.Sent == 0 || len(srv.patches) != s.Sent || s.Request != "PATCH "+writePath {
		t.Fatalf("%d sent (%s), %d failed, the server got %d patches", s.Sent, s.Request, s.Failed, len(srv.patches))
	}
	seen := map[string]bool{}
	for _, p := range srv.patches {
		if seen[p] || !strings.Contains(p, `"apiload/seq"`) {
			t.Errorf("patch %s repeated or without the annotation", p)
		}
		seen[p] = true
	}
}

// TestSteady: a server that answers every request sees the rate, and
// nothing fails; shared mode keeps one HTTP/2 connection, fresh mode
// makes one per request. The client's dial count may be higher than the
// server's connections (once seen: 102 dials for 101 requests), so the
// server's count is what is checked.
func TestSteady(t *testing.T) {
	for _, mode := range []string{modeShared, modeFresh} {
		t.Run(mode, func(t *testing.T) {
			srv := newAPIServer(t, 0)
			o := testOptions(t, srv, mode)
			if mode == modeFresh {
				o.rate /= 2 // a TLS handshake per request: half the CPU
			}
			s, err := run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, s)
			// Every tick of the schedule is sent or reported missed (a
			// loaded machine misses ticks; the count says so, never hides it).
			want := int(float64(o.rate) * o.duration.Seconds())
			if got := s.Sent + s.MissedTicks; s.Sent == 0 || got < want*8/10 || got > want*11/10+2 {
				t.Errorf("sent %d requests in %s at %d/s (%d ticks missed, %d skipped); want about %d", s.Sent, o.duration, o.rate, s.MissedTicks, s.SkippedTicks, want)
			}
			if s.Sent+s.SkippedTicks != s.Ticks || s.Ticks+s.MissedTicks < want {
				t.Errorf("%d ticks, %d missed, %d skipped, %d sent: the schedule of %d does not add up", s.Ticks, s.MissedTicks, s.SkippedTicks, s.Sent, want)
			}
			if s.Failed != 0 || s.Succeeded != s.Sent {
				t.Errorf("%d of %d failed: %+v", s.Failed, s.Sent, s.Failures)
			}
			if s.Attempts != s.Sent || s.RetriedRequests != 0 || int64(s.Attempts) != srv.requests.Load() {
				t.Errorf("attempts %d, retried %d, the server saw %d, for %d sent; want one attempt each", s.Attempts, s.RetriedRequests, srv.requests.Load(), s.Sent)
			}
			if s.Protocols["HTTP/2.0"] != s.Attempts {
				t.Errorf("protocols %v; want HTTP/2.0 for all %d", s.Protocols, s.Attempts)
			}
			wantConns := 1
			if mode == modeFresh {
				wantConns = s.Attempts
			}
			if got := srv.connections(); got != wantConns || s.Connections < int64(got) {
				t.Errorf("%d requests came on %d connections, the client dialed %d; want %d", s.Attempts, got, s.Connections, wantConns)
			}
			if s.Ready == nil || s.LatencyMS.P50 <= 0 || s.LatencyMS.Max < s.LatencyMS.P99 || s.MaxSuccessGapMS <= 0 {
				t.Errorf("ready %v, latency %+v, max gap %.1fms: want a first success, ordered percentiles and a gap", s.Ready, s.LatencyMS, s.MaxSuccessGapMS)
			}
			if b, err := os.ReadFile(o.ready); err != nil || !strings.Contains(string(b), "T") {
				t.Errorf("-ready %s: %q, %v; want the time of the first success", o.ready, b, err)
			}
		})
	}
}

// TestServerGone: once the server closes its connections and its
// listener, the requests fail and are counted. A request in flight at the
// close is retried by client-go a second later and fails then: the two
// modes run side by side to wait that second once.
func TestServerGone(t *testing.T) {
	for _, mode := range []string{modeShared, modeFresh} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := newAPIServer(t, 0)
			o := testOptions(t, srv, mode)
			closing := make(chan time.Time, 1)
			go func() {
				time.Sleep(o.duration / 2)
				closing <- time.Now()
				srv.CloseClientConnections()
				srv.Close()
			}()
			s, err := run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, s)
			if s.Succeeded == 0 || s.Failed == 0 {
				t.Fatalf("%d succeeded, %d failed; want successes before the close and failures after", s.Succeeded, s.Failed)
			}
			if s.FailedBeforeReady != 0 {
				t.Errorf("%d failed before the first success; want 0", s.FailedBeforeReady)
			}
			at := <-closing
			refused := false
			for _, f := range s.Failures {
				if f.First.Before(at) {
					t.Errorf("a failure at %s, before the server closed (%s): %+v", f.First, at, f)
				}
				refused = refused || strings.Contains(f.Error, "connection refused")
			}
			if !refused {
				t.Errorf("failures %+v; want the closed listener's connection refused among them", s.Failures)
			}
		})
	}
}

// TestRetriesVisible: requests client-go retried past a 429 succeed,
// but show in attempts and retried.
func TestRetriesVisible(t *testing.T) {
	srv := newAPIServer(t, 5)
	o := testOptions(t, srv, modeShared)
	s, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
	if s.Failed != 0 {
		t.Errorf("%d failed: %+v; client-go retries a 429 with Retry-After", s.Failed, s.Failures)
	}
	if s.RetriedRequests == 0 || s.SucceededAfterRetry != s.RetriedRequests || s.Attempts != s.Sent+s.RetriedRequests {
		t.Errorf("%d sent, %d attempts, %d retried, %d succeeded after a retry; want every 5th attempt retried once", s.Sent, s.Attempts, s.RetriedRequests, s.SucceededAfterRetry)
	}
	if len(s.Retried) != 1 || !strings.Contains(s.Retried[0].Error, "429") || s.Retried[0].Count != s.RetriedRequests {
		t.Errorf("retried %+v; want the 429s, %d of them", s.Retried, s.RetriedRequests)
	}
}

// TestSummaryFile: the JSON written to -out reads back with its fields.
func TestSummaryFile(t *testing.T) {
	srv := newAPIServer(t, 0)
	o := testOptions(t, srv, modeShared)
	o.duration = 100 * time.Millisecond
	s, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSummary(s, o.out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(o.out)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"start", "end", "sent", "succeeded", "failed", "attempts", "failures", "latency_ms", "max_success_gap_ms", "per_second", "connections"} {
		if _, ok := got[k]; !ok {
			t.Errorf("summary has no %q: %s", k, b)
		}
	}
	if line := s.line(); !strings.Contains(line, fmt.Sprintf("%d sent", s.Sent)) {
		t.Errorf("line %q does not say how many were sent", line)
	}
}

func TestNormalizeError(t *testing.T) {
	for in, want := range map[string]string{
		`Get "https://10.250.0.1:6443/api": read tcp 10.250.0.1:41234->10.250.0.1:6443: read: connection reset by peer`: `Get "https://10.250.0.1:6443/api": read tcp 10.250.0.1:*->10.250.0.1:6443: read: connection reset by peer`,
		`read tcp [::1]:5555->[::1]:6443: EOF`:                                                     `read tcp [::1]:*->[::1]:6443: EOF`,
		`stream error: stream ID 17; INTERNAL_ERROR`:                                               `stream error: stream ID *; INTERNAL_ERROR`,
		`http2: server sent GOAWAY and closed the connection; LastStreamID=1999, ErrCode=NO_ERROR`: `http2: server sent GOAWAY and closed the connection; LastStreamID=*, ErrCode=NO_ERROR`,
	} {
		if got := normalizeError(in); got != want {
			t.Errorf("normalizeError(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if got, want := percentiles(d), (latency{P50: 50, P95: 95, P99: 99, Max: 100}); got != want {
		t.Errorf("percentiles of 1..100ms = %+v; want %+v", got, want)
	}
	if got := percentiles(nil); got != (latency{}) {
		t.Errorf("percentiles of nothing = %+v; want zeros", got)
	}
}

func TestValidate(t *testing.T) {
	good := options{kubeconfig: "admin.conf", rate: defaultRate, timeout: defaultTimeout, mode: modeShared}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*options){
		"-kubeconfig": func(o *options) { o.kubeconfig = "" },
		"-rate":       func(o *options) { o.rate = 0 },
		"-duration":   func(o *options) { o.duration = -time.Second },
		"-timeout":    func(o *options) { o.timeout = 0 },
		"-mode":       func(o *options) { o.mode = "pooled" },
	} {
		o := good
		change(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("bad %s: %v; want an error naming it", name, err)
		}
	}
}

// TestURL: with -url every request is a plain GET of the URL on a new
// connection (a Service's NodePort, as a new client reaches it); a status
// other than 200 counts as failed.
func TestURL(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%5 == 0 {
			http.Error(w, "every fifth fails", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "web-1")
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	o := options{url: srv.URL + "/hostname", rate: testRate, duration: testDuration, timeout: testTimeout, mode: modeShared,
		ready: filepath.Join(dir, "ready"), log: t.Output()}
	s, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
	if s.Sent == 0 || int64(s.Sent) != n.Load() {
		t.Fatalf("sent %d, the server saw %d", s.Sent, n.Load())
	}
	if want := s.Sent / 5; s.Failed != want {
		t.Errorf("failed %d of %d, want every fifth: %d", s.Failed, s.Sent, want)
	}
	if s.Connections != int64(s.Sent) {
		t.Errorf("%d connections for %d requests, want one each", s.Connections, s.Sent)
	}
	bad := options{url: "http://x", write: true, rate: 1, timeout: time.Second, mode: modeShared}
	if err := bad.validate(); err == nil {
		t.Error("-url with -write: no error")
	}
}
