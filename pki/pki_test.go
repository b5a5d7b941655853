package pki

import (
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func testConfig() Config {
	return Config{NodeName: "devk-control-plane", ServiceIP: net.ParseIP("10.96.0.1"), AdvertiseIP: net.ParseIP("127.0.0.1"), DNSDomain: "cluster.local"}
}

func ensureAll(t *testing.T, dir string, cfg Config, now time.Time) map[string]Result {
	t.Helper()
	out := map[string]Result{}
	for _, s := range Specs(cfg) {
		r, err := Ensure(dir, s, now, true)
		if err != nil {
			t.Fatalf("Ensure %s: %v", s.Name, err)
		}
		out[s.Name] = r
	}
	return out
}

func TestKubeadmFileSetAndSANs(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ensureAll(t, dir, testConfig(), now)
	for _, name := range []string{"ca", "apiserver", "apiserver-kubelet-client", "front-proxy-ca", "front-proxy-client",
		"etcd/ca", "etcd/server", "etcd/peer", "etcd/healthcheck-client", "apiserver-etcd-client"} {
		for _, p := range []string{CertPath(dir, name), KeyPath(dir, name)} {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("kubeadm's %s is missing: %v", p, err)
			}
		}
		fi, err := os.Stat(KeyPath(dir, name))
		if err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", KeyPath(dir, name), fi.Mode().Perm())
		}
	}

	tests := []struct {
		name      string
		cert      string
		wantDNS   []string
		wantIPs   []string
		wantCN    string
		wantOrg   []string
		wantUsage x509.ExtKeyUsage
		issuer    string
	}{
		{"apiserver serves every name clients use", "apiserver",
			[]string{"devk-control-plane", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
			[]string{"10.96.0.1", "127.0.0.1"}, "kube-apiserver", nil, x509.ExtKeyUsageServerAuth, "kubernetes"},
		{"etcd server on loopback v4 and v6", "etcd/server",
			[]string{"devk-control-plane", "localhost"}, []string{"127.0.0.1", "::1"}, "devk-control-plane", nil, x509.ExtKeyUsageServerAuth, "etcd-ca"},
		{"etcd peer", "etcd/peer",
			[]string{"devk-control-plane", "localhost"}, []string{"127.0.0.1", "::1"}, "devk-control-plane", nil, x509.ExtKeyUsageClientAuth, "etcd-ca"},
		{"kubelet client is in kubeadm:cluster-admins", "apiserver-kubelet-client",
			nil, nil, "kube-apiserver-kubelet-client", []string{"kubeadm:cluster-admins"}, x509.ExtKeyUsageClientAuth, "kubernetes"},
		{"front proxy client signed by the front-proxy CA", "front-proxy-client",
			nil, nil, "front-proxy-client", nil, x509.ExtKeyUsageClientAuth, "front-proxy-ca"},
		{"apiserver's etcd client signed by etcd's CA", "apiserver-etcd-client",
			nil, nil, "kube-apiserver-etcd-client", nil, x509.ExtKeyUsageClientAuth, "etcd-ca"},
		{"controller-manager serves with the cluster CA's certificate", ControllerManagerServer,
			[]string{"devk-control-plane", "localhost"}, []string{"127.0.0.1"}, "kube-controller-manager", nil, x509.ExtKeyUsageServerAuth, "kubernetes"},
		{"scheduler serves with the cluster CA's certificate", SchedulerServer,
			[]string{"devk-control-plane", "localhost"}, []string{"127.0.0.1"}, "kube-scheduler", nil, x509.ExtKeyUsageServerAuth, "kubernetes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crt, _, err := Load(dir, tt.cert)
			if err != nil {
				t.Fatal(err)
			}
			dns := slices.Clone(crt.DNSNames)
			slices.Sort(dns)
			want := slices.Clone(tt.wantDNS)
			slices.Sort(want)
			if !slices.Equal(dns, want) {
				t.Errorf("DNS SANs = %v, want %v", dns, want)
			}
			var ips []string
			for _, ip := range crt.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tt.wantIPs) {
				t.Errorf("IP SANs = %v, want %v", ips, tt.wantIPs)
			}
			if crt.Subject.CommonName != tt.wantCN || !slices.Equal(crt.Subject.Organization, tt.wantOrg) {
				t.Errorf("subject = %s, want CN=%s O=%v", crt.Subject, tt.wantCN, tt.wantOrg)
			}
			if !slices.Contains(crt.ExtKeyUsage, tt.wantUsage) {
				t.Errorf("usages %v lack %v", crt.ExtKeyUsage, tt.wantUsage)
			}
			if crt.Issuer.CommonName != tt.issuer {
				t.Errorf("issuer %s, want %s", crt.Issuer.CommonName, tt.issuer)
			}
			if crt.IsCA {
				t.Error("a leaf certificate is a CA")
			}
			if d := crt.NotAfter.Sub(now); d < CertValidity-time.Hour || d > CertValidity+time.Hour {
				t.Errorf("valid for %s, want about %s", d, CertValidity)
			}
		})
	}
	ca, _, err := Load(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.NotAfter.Sub(now) < CAValidity-48*time.Hour {
		t.Errorf("ca: IsCA=%v, valid until %s; want a CA valid about 10 years", ca.IsCA, ca.NotAfter)
	}
}

func TestEnsureReusesValidAndReplacesStale(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	cfg := testConfig()
	first := ensureAll(t, dir, cfg, now)
	for name, r := range first {
		if r != Created {
			t.Errorf("first run: %s %s, want created", name, r)
		}
	}
	before, _ := os.ReadFile(CertPath(dir, "apiserver"))
	// The later runs check at the time they run: a CA is valid from when
	// certutil made it (whole seconds), which may be after now.
	again := ensureAll(t, dir, cfg, time.Now())
	for name, r := range again {
		if r != Reused {
			t.Errorf("second run: %s %s, want reused", name, r)
		}
	}
	after, _ := os.ReadFile(CertPath(dir, "apiserver"))
	if string(before) != string(after) {
		t.Error("a valid apiserver certificate was rewritten")
	}

	t.Run("new node name replaces the certificates naming it", func(t *testing.T) {
		cfg2 := cfg
		cfg2.NodeName = "other"
		res := ensureAll(t, dir, cfg2, time.Now())
		for _, name := range []string{"apiserver", "etcd/server", "etcd/peer"} {
			if res[name] != Replaced {
				t.Errorf("%s: %s, want replaced", name, res[name])
			}
		}
		if res["ca"] != Reused || res["front-proxy-client"] != Reused {
			t.Errorf("unaffected certificates were not reused: ca %s, front-proxy-client %s", res["ca"], res["front-proxy-client"])
		}
	})

	t.Run("near expiry is stale", func(t *testing.T) {
		specs := Specs(cfg)
		err := Check(dir, specs[2], now.Add(CertValidity-time.Hour))
		if !errors.Is(err, ErrStale) {
			t.Errorf("Check a day before expiry = %v, want ErrStale", err)
		}
	})

	t.Run("a new CA invalidates what it signed", func(t *testing.T) {
		os.Remove(CertPath(dir, "front-proxy-ca"))
		os.Remove(KeyPath(dir, "front-proxy-ca"))
		specs := Specs(cfg)
		var ca, client Spec
		for _, s := range specs {
			switch s.Name {
			case "front-proxy-ca":
				ca = s
			case "front-proxy-client":
				client = s
			}
		}
		if r, err := Ensure(dir, ca, now, true); err != nil || r != Created {
			t.Fatalf("Ensure CA = %v, %v", r, err)
		}
		if err := Check(dir, client, now); !errors.Is(err, ErrStale) {
			t.Errorf("client signed by the old CA: Check = %v, want ErrStale", err)
		}
		if _, err := Ensure(dir, client, now, false); err == nil {
			t.Error("Ensure with mayReplace=false replaced a stale certificate of a running cluster")
		}
		if r, err := Ensure(dir, client, now, true); err != nil || r != Replaced {
			t.Errorf("Ensure = %v, %v; want replaced", r, err)
		}
	})

	t.Run("a key that does not match is stale", func(t *testing.T) {
		data, _ := os.ReadFile(KeyPath(dir, "etcd/peer"))
		os.WriteFile(KeyPath(dir, "etcd/healthcheck-client"), data, 0o600)
		specs := Specs(cfg)
		for _, s := range specs {
			if s.Name == "etcd/healthcheck-client" {
				if err := Check(dir, s, now); !errors.Is(err, ErrStale) {
					t.Errorf("Check = %v, want ErrStale", err)
				}
			}
		}
	})

	t.Run("missing is not-exist", func(t *testing.T) {
		empty := t.TempDir()
		if err := Check(empty, Specs(cfg)[0], now); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Check on an empty dir = %v, want fs.ErrNotExist", err)
		}
	})
}

func TestSAKeyPair(t *testing.T) {
	dir := t.TempDir()
	if r, err := EnsureSA(dir); err != nil || r != Created {
		t.Fatalf("EnsureSA = %v, %v", r, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, SAKeyName)); fi.Mode().Perm() != 0o600 {
		t.Errorf("sa.key mode %v", fi.Mode().Perm())
	}
	if r, err := EnsureSA(dir); err != nil || r != Reused {
		t.Errorf("second EnsureSA = %v, %v; want reused", r, err)
	}
	os.Remove(filepath.Join(dir, SAPubName))
	if r, err := EnsureSA(dir); err != nil || r != Replaced {
		t.Errorf("EnsureSA without sa.pub = %v, %v; want replaced", r, err)
	}
}

func TestClientCert(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	if _, err := Ensure(dir, Specs(testConfig())[0], now, true); err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ClientCert(dir, "ca", "system:node:n1", []string{"system:nodes"}, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckClientCert(dir, "ca", certPEM, "system:node:n1", []string{"system:nodes"}, now, 0); err != nil {
		t.Errorf("CheckClientCert on a fresh certificate: %v", err)
	}
	if err := CheckClientCert(dir, "ca", certPEM, "system:node:n2", []string{"system:nodes"}, now, 0); !errors.Is(err, ErrStale) {
		t.Errorf("CheckClientCert for another node = %v, want ErrStale", err)
	}
}

// TestControllerServingCerts: the controller-manager's and scheduler's
// serving certificates name the node (its name and address) and
// loopback, serve only, live as long as the other leaves
// (--cert-validity), and are the only optional ones; a PKI made before
// them (an older devk's) gets them even while its cluster runs, since
// nothing uses a file that is not there.
func TestControllerServingCerts(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	cfg := testConfig()
	cfg.AdvertiseIP, cfg.Validity = net.ParseIP("10.250.0.2"), 10*time.Minute
	var optional []string
	for _, s := range Specs(cfg) {
		if s.Optional {
			optional = append(optional, s.Name)
			continue
		}
		if _, err := Ensure(dir, s, now, true); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(optional, []string{ControllerManagerServer, SchedulerServer}) {
		t.Fatalf("optional certificates %v, want the controller-manager's and scheduler's serving ones", optional)
	}
	for _, s := range Specs(cfg) {
		if !s.Optional {
			continue
		}
		if r, err := Ensure(dir, s, now, false); err != nil || r != Created {
			t.Fatalf("%s on an older PKI under a running cluster: %v, %v; want created", s.Name, r, err)
		}
		crt, _, err := Load(dir, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		var ips []string
		for _, ip := range crt.IPAddresses {
			ips = append(ips, ip.String())
		}
		if !slices.Equal(crt.DNSNames, []string{"devk-control-plane", "localhost"}) || !slices.Equal(ips, []string{"10.250.0.2", "127.0.0.1"}) {
			t.Errorf("%s: SANs %v %v, want the node's name and address and loopback", s.Name, crt.DNSNames, ips)
		}
		if !slices.Equal(crt.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
			t.Errorf("%s: usages %v, want server auth", s.Name, crt.ExtKeyUsage)
		}
		if d := crt.NotAfter.Sub(now); d < 9*time.Minute || d > 11*time.Minute {
			t.Errorf("%s: valid for %s, want the leaves' 10m", s.Name, d)
		}
		_, renewed, err := Renew(dir, s.Name, s.CA, now, time.Hour)
		if err != nil {
			t.Fatalf("renew %s: %v", s.Name, err)
		}
		if !slices.Equal(renewed.DNSNames, crt.DNSNames) || renewed.SerialNumber.Cmp(crt.SerialNumber) == 0 {
			t.Errorf("%s renewed: SANs %v (was %v), serial %s (was %s)", s.Name, renewed.DNSNames, crt.DNSNames, renewed.SerialNumber, crt.SerialNumber)
		}
	}
}
