package etcdwatch

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/etcdwatch/etcdtest"
)

type certPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// issue makes a certificate signed by ca (self-signed when ca is nil) and
// writes it and its key as <dir>/<name>.crt and .key.
func issue(t *testing.T, dir, name string, ca *certPair, isCA, server bool) *certPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	writeFile(t, filepath.Join(dir, name+".crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, filepath.Join(dir, name+".key"), string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return &certPair{cert, key}
}

// TestTLS runs an etcd that, like a kubeadm or devk cluster's, serves
// clients over TLS and requires a client certificate, and checks that
// discovery finds a devk cluster's PKI and that each kind of mistake is
// explained.
func TestTLS(t *testing.T) {
	home := t.TempDir()
	clusterDir := filepath.Join(home, "clusters", "devk")
	pki := filepath.Join(clusterDir, "pki")
	ca := issue(t, filepath.Join(pki, "etcd"), "ca", nil, true, false)
	issue(t, filepath.Join(pki, "etcd"), "server", ca, false, true)
	issue(t, pki, "apiserver-etcd-client", ca, false, false)
	other := t.TempDir()
	otherCA := issue(t, other, "ca", nil, true, false)
	issue(t, other, "client", otherCA, false, false)

	srv, err := etcdtest.StartTLS(t.TempDir(), &etcdtest.TLS{
		CA: filepath.Join(pki, "etcd", "ca.crt"), Cert: filepath.Join(pki, "etcd", "server.crt"), Key: filepath.Join(pki, "etcd", "server.key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.Endpoint, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s is not TLS", srv.Endpoint)
	}
	writeFile(t, filepath.Join(clusterDir, "manifests", "kube-apiserver.yaml"),
		"spec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --etcd-servers="+srv.Endpoint+"\n")
	if err := os.WriteFile(filepath.Join(other, "not-pem.crt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}

	noEnv := func(string) string { return "" }
	tests := []struct {
		name    string
		o       ConnOptions
		wantErr string
	}{
		{name: "devk cluster found from DEVK_HOME", o: ConnOptions{Home: home}},
		{name: "explicit files", o: ConnOptions{Endpoints: []string{srv.Endpoint}, CACert: filepath.Join(pki, "etcd", "ca.crt"),
			Cert: filepath.Join(pki, "apiserver-etcd-client.crt"), Key: filepath.Join(pki, "apiserver-etcd-client.key"), Home: "/nonexistent", KubeadmDir: "/nonexistent"}},
		{name: "wrong CA", o: ConnOptions{Home: home, CACert: filepath.Join(other, "ca.crt")},
			wantErr: "the server's certificate is not signed by the CA in " + filepath.Join(other, "ca.crt")},
		{name: "client certificate from another CA", o: ConnOptions{Home: home, Cert: filepath.Join(other, "client.crt"), Key: filepath.Join(other, "client.key")},
			wantErr: "etcd rejected the client certificate " + filepath.Join(other, "client.crt")},
		{name: "no client certificate", o: ConnOptions{Endpoints: []string{srv.Endpoint}, CACert: filepath.Join(pki, "etcd", "ca.crt"), Home: "/nonexistent", KubeadmDir: "/nonexistent"},
			wantErr: "etcd wants a client certificate: pass --cert and --key"},
		{name: "plain http to a TLS port", o: ConnOptions{Endpoints: []string{strings.Replace(srv.Endpoint, "https", "http", 1)}},
			wantErr: "speaks TLS: use https://127.0.0.1:"},
		{name: "CA file that is not PEM", o: ConnOptions{Home: home, CACert: filepath.Join(other, "not-pem.crt")},
			wantErr: "holds no PEM certificate"},
		{name: "key missing", o: ConnOptions{Home: home, Cert: filepath.Join(other, "client.crt"), Key: filepath.Join(other, "nope.key")},
			wantErr: "load etcd client certificate " + filepath.Join(other, "client.crt") + " and key " + filepath.Join(other, "nope.key")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Getenv = noEnv
			tc.o.DialTimeout = 2 * time.Second
			cli, err := Connect(context.Background(), tc.o)
			if tc.wantErr != "" {
				if err == nil {
					cli.Close()
				}
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			if cli.Revision < 1 || cli.Endpoint.Endpoints[0] != srv.Endpoint {
				t.Errorf("connected to %v at revision %d", cli.Endpoint, cli.Revision)
			}
		})
	}
}
