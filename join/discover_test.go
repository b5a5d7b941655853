package join

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
)

var testToken = Token{ID: "abcdef", Secret: "0123456789abcdef"}

// clusterInfoKubeconfig is cluster-info's kubeconfig as devk up writes
// it: one cluster, no user.
func clusterInfoKubeconfig(t *testing.T, server string, caPEM []byte) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[""] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// sign is what the controller-manager's bootstrapsigner does: the same
// cluster-bootstrap function, keyed by the token.
func sign(t *testing.T, kubeconfig string, tok Token) string {
	t.Helper()
	sig, err := jws.ComputeDetachedSignature(kubeconfig, tok.ID, tok.Secret)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func TestVerifyClusterInfo(t *testing.T) {
	ca, _ := newCA(t)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	other, _ := newCA(t)
	const server = "https://10.250.0.2:6443"
	good := clusterInfoKubeconfig(t, server, caPEM)
	sigKey := bootstrapapi.JWSSignatureKeyPrefix + testToken.ID
	twoClusters := func() string {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["a"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
		cfg.Clusters["b"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
		data, _ := clientcmd.Write(*cfg)
		return string(data)
	}()
	for _, tc := range []struct {
		name    string
		data    map[string]string
		token   Token
		pins    []Pin
		wantIs  error
		wantMsg string // "" = valid
	}{
		{name: "signed by the token, CA pinned", data: map[string]string{bootstrapapi.KubeConfigKey: good, sigKey: sign(t, good, testToken)}, token: testToken, pins: []Pin{PinOf(ca)}},
		{name: "wrong secret", data: map[string]string{bootstrapapi.KubeConfigKey: good, sigKey: sign(t, good, testToken)},
			token: Token{ID: testToken.ID, Secret: "ffffffffffffffff"}, pins: []Pin{PinOf(ca)}, wantIs: ErrBadSignature, wantMsg: "secret is wrong"},
		{name: "kubeconfig changed after signing", data: map[string]string{bootstrapapi.KubeConfigKey: strings.Replace(good, "10.250.0.2", "10.250.0.66", 1), sigKey: sign(t, good, testToken)},
			token: testToken, pins: []Pin{PinOf(ca)}, wantIs: ErrBadSignature},
		{name: "signed by another token only", data: map[string]string{bootstrapapi.KubeConfigKey: good, bootstrapapi.JWSSignatureKeyPrefix + "zzzzzz": sign(t, good, Token{ID: "zzzzzz", Secret: testToken.Secret})},
			token: testToken, pins: []Pin{PinOf(ca)}, wantIs: ErrNotSigned, wantMsg: "signed for tokens zzzzzz"},
		{name: "not signed at all", data: map[string]string{bootstrapapi.KubeConfigKey: good}, token: testToken, pins: []Pin{PinOf(ca)}, wantIs: ErrNotSigned, wantMsg: "bootstrapsigner"},
		{name: "no kubeconfig", data: map[string]string{sigKey: sign(t, good, testToken)}, token: testToken, pins: []Pin{PinOf(ca)}, wantMsg: "no kubeconfig key"},
		{name: "another CA pinned", data: map[string]string{bootstrapapi.KubeConfigKey: good, sigKey: sign(t, good, testToken)}, token: testToken, pins: []Pin{PinOf(other)}, wantIs: ErrPinMismatch, wantMsg: PinOf(ca).String()},
		{name: "two clusters", data: map[string]string{bootstrapapi.KubeConfigKey: twoClusters, sigKey: sign(t, twoClusters, testToken)}, token: testToken, pins: []Pin{PinOf(ca)}, wantMsg: "names 2 clusters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := verifyClusterInfo(tc.data, tc.token, tc.pins)
			if tc.wantIs == nil && tc.wantMsg == "" {
				if err != nil {
					t.Fatal(err)
				}
				if d.Server != server || string(d.CAPEM) != string(caPEM) {
					t.Fatalf("verifyClusterInfo = %s and %d bytes of CA, want %s and the CA", d.Server, len(d.CAPEM), server)
				}
				return
			}
			if err == nil || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("verifyClusterInfo = %v, want %v saying %q", err, tc.wantIs, tc.wantMsg)
			}
		})
	}
}

// clusterInfoServer stands in for the API server's one anonymous read a
// joining node makes (the real API server is in e2e/join_test.go): it
// serves cluster-info as data says over TLS with httptest's certificate.
func clusterInfoServer(t *testing.T, data func(srv *httptest.Server) map[string]string) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/kube-public/configmaps/cluster-info" {
			http.NotFound(w, r)
			return
		}
		cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: "kube-public"}, Data: data(srv)}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(cm)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDiscoverTrustsOnlyThePinnedCA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	signed := func(kc string) map[string]string {
		return map[string]string{bootstrapapi.KubeConfigKey: kc, bootstrapapi.JWSSignatureKeyPrefix + testToken.ID: sign(t, kc, testToken)}
	}
	endpoint := func(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "https://") }

	// cluster-info names the server's own CA: both reads agree.
	srv := clusterInfoServer(t, func(srv *httptest.Server) map[string]string {
		return signed(clusterInfoKubeconfig(t, srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	})
	d, err := Discover(ctx, endpoint(srv), testToken, []Pin{PinOf(srv.Certificate())})
	if err != nil {
		t.Fatal(err)
	}
	if d.Server != srv.URL {
		t.Fatalf("discovered %s, want %s", d.Server, srv.URL)
	}

	// cluster-info names a CA that did not sign the server's certificate
	// (the pin matches that CA): the second read refuses the server at
	// once rather than waiting it out.
	ca, _ := newCA(t)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	impostor := clusterInfoServer(t, func(srv *httptest.Server) map[string]string {
		return signed(clusterInfoKubeconfig(t, srv.URL, caPEM))
	})
	t0 := time.Now()
	_, err = Discover(ctx, endpoint(impostor), testToken, []Pin{PinOf(ca)})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a server whose certificate the pinned CA did not sign: %v, want a certificate error", err)
	}
	if took := time.Since(t0); took > 2*discoveryInterval {
		t.Errorf("the certificate error took %s: it was waited out", took)
	}

	// A server that answers differently once checked.
	reads := 0
	fickle := clusterInfoServer(t, func(srv *httptest.Server) map[string]string {
		reads++
		caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		if reads > 1 {
			return signed(clusterInfoKubeconfig(t, "https://10.250.0.66:6443", caPEM))
		}
		return signed(clusterInfoKubeconfig(t, srv.URL, caPEM))
	})
	if _, err := Discover(ctx, endpoint(fickle), testToken, []Pin{PinOf(fickle.Certificate())}); err == nil || !strings.Contains(err.Error(), "different cluster-info") {
		t.Fatalf("a server that changes cluster-info between the reads: %v", err)
	}

	// No signature for the token: Discover waits, then says why.
	unsigned := clusterInfoServer(t, func(srv *httptest.Server) map[string]string {
		return map[string]string{bootstrapapi.KubeConfigKey: clusterInfoKubeconfig(t, srv.URL, nil)}
	})
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := Discover(short, endpoint(unsigned), testToken, []Pin{PinOf(unsigned.Certificate())}); !errors.Is(err, ErrNotSigned) || !strings.Contains(err.Error(), "gave up waiting") {
		t.Fatalf("a cluster-info never signed: %v", err)
	}

	// The same, when the deadline falls during a read (the second one
	// answers late): the reason is still the missing signature, not the
	// cut-short read.
	slowReads := 0
	slow := clusterInfoServer(t, func(srv *httptest.Server) map[string]string {
		if slowReads++; slowReads > 1 {
			time.Sleep(2 * discoveryInterval)
		}
		return map[string]string{bootstrapapi.KubeConfigKey: clusterInfoKubeconfig(t, srv.URL, nil)}
	})
	cut, cancelCut := context.WithTimeout(ctx, discoveryInterval+discoveryInterval/2)
	defer cancelCut()
	if _, err := Discover(cut, endpoint(slow), testToken, []Pin{PinOf(slow.Certificate())}); !errors.Is(err, ErrNotSigned) {
		t.Fatalf("a deadline during a read: %v, want ErrNotSigned", err)
	}
}

func TestDiscoverBadArguments(t *testing.T) {
	ctx := context.Background()
	if _, err := Discover(ctx, "10.250.0.2", testToken, []Pin{{}}); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("endpoint without port: %v", err)
	}
	if _, err := Discover(ctx, "10.250.0.2:6443", testToken, nil); err == nil || !strings.Contains(err.Error(), "no CA hash") {
		t.Errorf("no pins: %v", err)
	}
}

func TestBootstrapKubeconfig(t *testing.T) {
	ca, _ := newCA(t)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	data, err := BootstrapKubeconfig("https://10.250.0.2:6443", caPEM, testToken)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://10.250.0.2:6443" || rc.BearerToken != testToken.String() || string(rc.CAData) != string(caPEM) {
		t.Fatalf("the bootstrap kubeconfig gives host %s, token %q, %d bytes of CA", rc.Host, rc.BearerToken, len(rc.CAData))
	}
	for name, call := range map[string]func() error{
		"http server": func() error { _, err := BootstrapKubeconfig("http://10.250.0.2:6443", caPEM, testToken); return err },
		"no CA":       func() error { _, err := BootstrapKubeconfig("https://10.250.0.2:6443", nil, testToken); return err },
		"no token":    func() error { _, err := BootstrapKubeconfig("https://10.250.0.2:6443", caPEM, Token{}); return err },
	} {
		if call() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
