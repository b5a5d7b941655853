package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestProbe(t *testing.T) {
	ready := false
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready {
			http.Error(w, "[-]etcd failed: not ready", http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	err := Probe(context.Background(), srv.URL+"/readyz")
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "etcd failed") {
		t.Fatalf("probe of a failing endpoint: %v; want the status and the body", err)
	}
	ready = true
	if err := Probe(context.Background(), srv.URL+"/readyz"); err != nil {
		t.Fatalf("probe of a ready endpoint (self-signed certificate): %v", err)
	}
}

func TestClient(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "admin.conf")
	if _, err := Client(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Client of a missing kubeconfig: %v; want an error naming it", err)
	}
	kc := filepath.Join(t.TempDir(), "kc")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
	cs, err := Client(kc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ServerVersion(cs); err == nil {
		t.Fatal("ServerVersion of a closed port succeeded")
	}
}

// TestApply checks Apply against client-go's field-managed fake. The fake
// bumps resourceVersion on every apply, so that an apply that changes
// nothing reports no change is the real API server's part, which the
// e2e suite's second `devk up` checks.
func TestApply(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	cms := cs.CoreV1().ConfigMaps("kube-system")
	cm := func(v string) *corev1ac.ConfigMapApplyConfiguration {
		return corev1ac.ConfigMap("c", "kube-system").WithData(map[string]string{"k": v})
	}
	for _, step := range []struct {
		name    string
		value   string
		changed bool
	}{
		{"new", "a", true},
		{"another value", "b", true},
	} {
		changed, err := Apply(ctx, cms, "c", cm(step.value))
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if changed != step.changed {
			t.Errorf("%s: changed = %v, want %v", step.name, changed, step.changed)
		}
	}
	got, err := cms.Get(ctx, "c", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "b" {
		t.Fatalf("after the applies: %v %v", got, err)
	}
}

func TestBuildInfoVersion(t *testing.T) {
	metrics := []byte(`# HELP kubernetes_build_info [ALPHA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.
# TYPE kubernetes_build_info gauge
kubernetes_build_info{build_date="2026-01-01T00:00:00Z",compiler="gc",git_commit="abc",git_tree_state="clean",git_version="v1.35.4",go_version="go1.25.7",major="1",minor="35",platform="linux/amd64"} 1
`)
	if v, err := BuildInfoVersion(metrics); err != nil || v != "v1.35.4" {
		t.Fatalf("BuildInfoVersion = %q, %v", v, err)
	}
	if _, err := BuildInfoVersion([]byte("go_goroutines 12\n")); err == nil {
		t.Fatal("BuildInfoVersion without the metric: no error")
	}
}

func TestEmulates(t *testing.T) {
	for _, tc := range []struct {
		v    apimachineryversion.Info
		want string
	}{
		{apimachineryversion.Info{Major: "1", Minor: "34", EmulationMajor: "1", EmulationMinor: "33"}, "1.33"},
		{apimachineryversion.Info{Major: "1", Minor: "34", EmulationMajor: "1", EmulationMinor: "34"}, ""},
		{apimachineryversion.Info{Major: "1", Minor: "30"}, ""},
	} {
		if got := Emulates(tc.v); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestTransient(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"cut connection", &url.Error{Op: "Post", URL: "https://10.250.1.2:6443/api/v1/namespaces/default/pods/web/eviction", Err: io.ErrUnexpectedEOF}, true},
		{"cut connection, wrapped", fmt.Errorf("evict: %w", io.ErrUnexpectedEOF), true},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{"unavailable", apierrors.NewServiceUnavailable("starting"), true},
		{"too many requests", apierrors.NewTooManyRequests("later", 1), true},
		{"forbidden", apierrors.NewForbidden(gr, "web", errors.New("no")), false},
		{"not found", apierrors.NewNotFound(gr, "web"), false},
		{"invalid", apierrors.NewBadRequest("bad"), false},
		// client-go wraps a TLS handshake's refusal in a *url.Error, a
		// net.Error: it is no less final for that.
		{"unknown authority", &url.Error{Op: "Get", URL: "https://10.250.1.2:6443/version", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, false},
		{"another host's certificate", &url.Error{Op: "Get", URL: "https://10.250.1.2:6443/version", Err: x509.HostnameError{Host: "10.250.1.2", Certificate: &x509.Certificate{}}}, false},
		{"expired", fmt.Errorf("list: %w", &url.Error{Op: "Get", URL: "https://10.250.1.2:6443/api", Err: x509.CertificateInvalidError{Reason: x509.Expired}}), false},
		{"no such host", &url.Error{Op: "Get", URL: "https://nosuch.example:6443/api", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nosuch.example", IsNotFound: true}}}, false},
		{"resolver timed out", &url.Error{Op: "Get", URL: "https://slow.example:6443/api", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "i/o timeout", Name: "slow.example", IsTimeout: true}}}, true},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
