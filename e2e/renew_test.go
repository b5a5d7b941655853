//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

type expirationReport struct {
	Certificates []struct {
		Name      string    `json:"name"`
		Path      string    `json:"path"`
		NotAfter  time.Time `json:"notAfter"`
		Serial    string    `json:"serial"`
		Renewable bool      `json:"renewable"`
		UsedBy    []string  `json:"usedBy"`
	} `json:"certificates"`
	CAs []struct {
		Name     string `json:"name"`
		External bool   `json:"external"`
	} `json:"certificateAuthorities"`
}

type renewReport struct {
	Renewed []struct {
		Name, Path, OldSerial, Serial, Verified string
	} `json:"renewed"`
	Restarted []string `json:"restarted"`
}

// servedSerial is the serial of the certificate the TLS server at addr
// presents (the handshake may fail afterwards: etcd wants a client
// certificate).
func servedSerial(t *testing.T, addr string) string {
	t.Helper()
	var serial string
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, &tls.Config{
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if c, err := x509.ParseCertificate(raw[0]); err == nil {
				serial = c.SerialNumber.Text(16)
			}
			return nil
		},
	})
	if conn != nil {
		conn.Close()
	}
	if serial == "" {
		t.Fatalf("no certificate from %s: %v", addr, err)
	}
	return serial
}

// TestCertsRenew: check-expiration lists every certificate of the shared
// cluster as the files say; renew all replaces each, restarts the static
// pods, and the API server and etcd then serve the new serials, the
// cluster is healthy, and kubectl works with the renewed admin.conf.
func TestCertsRenew(t *testing.T) {
	c := Cluster(t)
	r := MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "-o", "json")
	var rep expirationReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("check-expiration -o json: %v\n%s", err, r.Stdout)
	}
	if len(rep.Certificates) != 11 || len(rep.CAs) != 3 {
		t.Fatalf("check-expiration listed %d certificates and %d CAs, want 11 and 3:\n%s", len(rep.Certificates), len(rep.CAs), r.Stdout)
	}
	before := map[string]string{}
	for _, crt := range rep.Certificates {
		data, err := os.ReadFile(crt.Path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(crt.Name, ".conf") {
			// The serial check is enough for a kubeconfig: the report read it.
			before[crt.Name] = crt.Serial
			continue
		}
		parsed, err := certutil.ParseCertsPEM(data)
		if err != nil {
			t.Fatal(err)
		}
		if !parsed[0].NotAfter.Equal(crt.NotAfter) || parsed[0].SerialNumber.Text(16) != crt.Serial || !crt.Renewable {
			t.Errorf("%s: reported expiry %s serial %s renewable %v; the file says %s %s", crt.Name, crt.NotAfter, crt.Serial, crt.Renewable,
				parsed[0].NotAfter, parsed[0].SerialNumber.Text(16))
		}
		before[crt.Name] = crt.Serial
	}
	if r := Devk(t, c.Tree, c.Env, "certs", "check-expiration", "--fail-within", "400d"); r.Err == nil || !strings.Contains(r.Stderr, "expire within 400d") {
		t.Errorf("--fail-within 400d on one-year certificates: %v\n%s", r.Err, r.Stderr)
	}
	if r := Devk(t, c.Tree, c.Env, "certs", "renew", "etcd-ca"); r.Err == nil || !strings.Contains(r.Stderr, `no certificate "etcd-ca"`) {
		t.Errorf("renew of a CA: %v\n%s", r.Err, r.Stderr)
	}

	r = MustDevkEnv(t, c.Tree, c.Env, "certs", "renew", "all", "-o", "json")
	var rr renewReport
	if err := json.Unmarshal([]byte(r.Stdout), &rr); err != nil {
		t.Fatalf("renew -o json: %v\n%s", err, r.Stdout)
	}
	if len(rr.Renewed) != 11 {
		t.Fatalf("renewed %d, want 11:\n%s", len(rr.Renewed), r.Stdout)
	}
	serial := map[string]string{}
	for _, x := range rr.Renewed {
		if x.Serial == before[x.Name] || x.OldSerial != before[x.Name] || x.Verified == "" {
			t.Errorf("%s: serial %s (was %s, reported old %s), verified %q", x.Name, x.Serial, before[x.Name], x.OldSerial, x.Verified)
		}
		serial[x.Name] = x.Serial
	}
	for _, p := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if !strings.Contains(strings.Join(rr.Restarted, ","), p) {
			t.Errorf("%s was not restarted: %v", p, rr.Restarted)
		}
	}
	ip := apiServerHost(t, c)
	if got := servedSerial(t, net.JoinHostPort(ip, "6443")); got != serial["apiserver"] {
		t.Errorf("the API server serves serial %s, renewed %s", got, serial["apiserver"])
	}
	if got := servedSerial(t, net.JoinHostPort(ip, "2379")); got != serial["etcd-server"] {
		t.Errorf("etcd serves serial %s, renewed %s", got, serial["etcd-server"])
	}
	if r := c.Kubectl(t, "get", "--raw", "/readyz"); r.Err != nil || strings.TrimSpace(r.Stdout) != "ok" {
		t.Fatalf("kubectl with the renewed admin.conf: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	MustDevkEnv(t, c.Tree, c.Env, "digest", "verify")
	if _, err := os.Stat(filepath.Join(c.Home, "clusters", "devk", "pki", "apiserver.crt.devk-prev")); err != nil {
		t.Errorf("the previous apiserver.crt was not kept: %v", err)
	}
}

// apiServerHost is the host of the shared cluster's API server (the
// node's address), from its admin.conf.
func apiServerHost(t *testing.T, c *SharedCluster) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname()
}
