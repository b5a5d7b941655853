package etcdwatch

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/etcdwatch/etcdtest"
	"github.com/devk/devk/pki"
)

// ensure writes each spec under dir with the PKI code `devk up` uses.
func ensure(t *testing.T, dir string, specs ...pki.Spec) {
	t.Helper()
	for _, sp := range specs {
		if _, err := pki.Ensure(dir, sp, time.Now(), false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTLS runs an etcd that, like a kubeadm or devk cluster's, serves
// clients over TLS and requires a client certificate, and checks that
// discovery finds a devk cluster's PKI and that each kind of mistake is
// explained.
func TestTLS(t *testing.T) {
	home := t.TempDir()
	clusterDir := writeClusterJSON(t, home, "devk", nil).Dir
	pkiDir := filepath.Join(clusterDir, "pki")
	// A devk cluster's etcd certificates, as `devk up` writes them.
	for _, sp := range pki.Specs(pki.Config{NodeName: "node", AdvertiseIP: net.ParseIP("127.0.0.1"), ServiceIP: net.ParseIP("10.96.0.1"), DNSDomain: "cluster.local"}) {
		if sp.Name == "etcd/ca" || sp.Name == "etcd/server" || sp.Name == "apiserver-etcd-client" {
			ensure(t, pkiDir, sp)
		}
	}
	// Another cluster's: its CA has the same name, so the client offers
	// its certificate and etcd must reject it.
	other := t.TempDir()
	ensure(t, other, pki.Spec{Name: "ca", CommonName: "etcd-ca"},
		pki.Spec{Name: "client", CA: "ca", CommonName: "intruder", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	srv, err := etcdtest.StartTLS(t.TempDir(), &etcdtest.TLS{
		CA: filepath.Join(pkiDir, "etcd", "ca.crt"), Cert: filepath.Join(pkiDir, "etcd", "server.crt"), Key: filepath.Join(pkiDir, "etcd", "server.key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.Endpoint, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s is not TLS", srv.Endpoint)
	}
	writeFile(t, filepath.Join(clusterDir, "manifests", "kube-apiserver.yaml"),
		"spec:\n  containers:\n  - name: kube-apiserver\n    command:\n    - kube-apiserver\n    - --etcd-servers="+srv.Endpoint+"\n")
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
		{name: "explicit files", o: ConnOptions{Endpoints: []string{srv.Endpoint}, CACert: filepath.Join(pkiDir, "etcd", "ca.crt"),
			Cert: filepath.Join(pkiDir, "apiserver-etcd-client.crt"), Key: filepath.Join(pkiDir, "apiserver-etcd-client.key"), Home: "/nonexistent", KubeadmDir: "/nonexistent"}},
		{name: "wrong CA", o: ConnOptions{Home: home, CACert: filepath.Join(other, "ca.crt")},
			wantErr: "the server's certificate is not signed by the CA in " + filepath.Join(other, "ca.crt")},
		{name: "client certificate from another CA", o: ConnOptions{Home: home, Cert: filepath.Join(other, "client.crt"), Key: filepath.Join(other, "client.key")},
			wantErr: "etcd rejected the client certificate " + filepath.Join(other, "client.crt")},
		{name: "no client certificate", o: ConnOptions{Endpoints: []string{srv.Endpoint}, CACert: filepath.Join(pkiDir, "etcd", "ca.crt"), Home: "/nonexistent", KubeadmDir: "/nonexistent"},
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
