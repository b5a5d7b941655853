package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
)

// TestRenewKeepsWhatKubeadmKeeps: a renewed certificate has the old one's
// subject, SANs, usages and key, a new serial, the new validity, and the
// old one is kept beside it; Restore puts it back.
func TestRenewKeepsWhatKubeadmKeeps(t *testing.T) {
	dir := t.TempDir()
	issued := time.Now().Add(-300 * 24 * time.Hour)
	ensureAll(t, dir, testConfig(), issued)
	before, err := os.ReadFile(CertPath(dir, "etcd/server"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old, renewed, err := Renew(dir, "etcd/server", "etcd/ca", now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Subject.String() != old.Subject.String() || !slices.Equal(renewed.DNSNames, old.DNSNames) ||
		!sameIPs(renewed.IPAddresses, old.IPAddresses) || !slices.Equal(renewed.ExtKeyUsage, old.ExtKeyUsage) {
		t.Errorf("renewed %s: subject %s SANs %v %v usages %v; was %s %v %v %v", "etcd/server",
			renewed.Subject, renewed.DNSNames, renewed.IPAddresses, renewed.ExtKeyUsage, old.Subject, old.DNSNames, old.IPAddresses, old.ExtKeyUsage)
	}
	if renewed.SerialNumber.Cmp(old.SerialNumber) == 0 || !renewed.NotAfter.Equal(now.Add(10*time.Minute).Truncate(time.Second)) {
		t.Errorf("serial %s (was %s), not after %s", renewed.SerialNumber, old.SerialNumber, renewed.NotAfter)
	}
	crt, key, err := Load(dir, "etcd/server")
	if err != nil || !publicKeyMatches(crt, key) || crt.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Fatalf("on disk: %v, matches its key %v", err, err == nil && publicKeyMatches(crt, key))
	}
	ca, _, _ := Load(dir, "etcd/ca")
	roots := x509Pool(ca)
	if _, err := crt.Verify(x509VerifyOptions(roots, now)); err != nil {
		t.Errorf("renewed certificate does not verify against its CA: %v", err)
	}
	if kept, _ := os.ReadFile(CertPath(dir, "etcd/server") + BackupSuffix); !bytes.Equal(kept, before) {
		t.Error("the previous certificate was not kept")
	}
	if ok, err := Restore(CertPath(dir, "etcd/server")); !ok || err != nil {
		t.Fatalf("Restore = %v, %v", ok, err)
	}
	if back, _ := os.ReadFile(CertPath(dir, "etcd/server")); !bytes.Equal(back, before) {
		t.Error("Restore did not put the previous certificate back")
	}
}

func TestRenewRefuses(t *testing.T) {
	dir := t.TempDir()
	ensureAll(t, dir, testConfig(), time.Now())
	before, _ := os.ReadFile(CertPath(dir, "front-proxy-client"))
	if err := os.Remove(KeyPath(dir, "front-proxy-ca")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Renew(dir, "front-proxy-client", "front-proxy-ca", time.Now(), CertValidity); !errors.Is(err, ErrExternalCA) {
		t.Errorf("under an external CA: %v", err)
	}
	// A certificate beside another's key.
	other, _ := os.ReadFile(KeyPath(dir, "apiserver-kubelet-client"))
	if err := os.WriteFile(KeyPath(dir, "apiserver"), other, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Renew(dir, "apiserver", CAName, time.Now(), CertValidity); err == nil {
		t.Error("a certificate that does not match its key was renewed")
	}
	if after, _ := os.ReadFile(CertPath(dir, "front-proxy-client")); !bytes.Equal(after, before) {
		t.Error("a refused renewal changed the certificate")
	}
	if _, err := os.Stat(CertPath(dir, "apiserver") + BackupSuffix); err == nil {
		t.Error("a refused renewal left a backup")
	}
}

func TestRenewKubeconfig(t *testing.T) {
	dir := t.TempDir()
	ensureAll(t, dir, testConfig(), time.Now())
	certPEM, keyPEM, err := ClientCert(dir, CAName, "kubernetes-admin", []string{"kubeadm:cluster-admins"}, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["k"] = &clientcmdapi.Cluster{Server: "https://10.250.0.2:6443"}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["admin@k"] = &clientcmdapi.Context{Cluster: "k", AuthInfo: "admin"}
	cfg.CurrentContext = "admin@k"
	path := filepath.Join(dir, "admin.conf")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	old, renewed, err := RenewKubeconfig(dir, CAName, path, time.Now(), 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	user := got.AuthInfos["admin"]
	certs, err := certutil.ParseCertsPEM(user.ClientCertificateData)
	if err != nil || certs[0].SerialNumber.Cmp(renewed.SerialNumber) != 0 || certs[0].SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatalf("kubeconfig holds serial %v (renewed %s, old %s): %v", certs[0].SerialNumber, renewed.SerialNumber, old.SerialNumber, err)
	}
	if !bytes.Equal(user.ClientKeyData, keyPEM) || certs[0].Subject.CommonName != "kubernetes-admin" || !slices.Equal(certs[0].Subject.Organization, []string{"kubeadm:cluster-admins"}) {
		t.Errorf("renewal changed the key or the subject: %s", certs[0].Subject)
	}
	if err := CheckClientCert(dir, CAName, user.ClientCertificateData, "kubernetes-admin", []string{"kubeadm:cluster-admins"}, time.Now(), 0); err != nil {
		t.Error(err)
	}
	if fi, err := os.Stat(path + BackupSuffix); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig backup: %v", err)
	}
}

func x509Pool(ca *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca)
	return p
}

func x509VerifyOptions(roots *x509.CertPool, now time.Time) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
}

// TestShortValidity: leaf certificates and client certificates made to
// live ten minutes do, the CAs keep their ten years, and a ten-minute
// certificate is replaced with half its life left, not at once.
func TestShortValidity(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.Validity = 10 * time.Minute
	now := time.Now()
	ensureAll(t, dir, cfg, now)
	for _, s := range Specs(cfg) {
		crt, _, err := Load(dir, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		want := now.Add(10 * time.Minute)
		if s.IsCA() {
			want = now.Add(CAValidity)
		}
		if d := crt.NotAfter.Sub(want); d < -2*time.Second || d > 2*time.Second {
			t.Errorf("%s: not after %s, want %s", s.Name, crt.NotAfter, want)
		}
		if !s.IsCA() {
			if err := Check(dir, s, now.Add(4*time.Minute)); err != nil {
				t.Errorf("%s after 4 of 10 minutes: %v", s.Name, err)
			}
			if err := Check(dir, s, now.Add(6*time.Minute)); !errors.Is(err, ErrStale) {
				t.Errorf("%s after 6 of 10 minutes: %v, want stale", s.Name, err)
			}
		}
	}
	certPEM, _, err := ClientCert(dir, CAName, "kubernetes-admin", nil, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	crts, _ := certutil.ParseCertsPEM(certPEM)
	if d := crts[0].NotAfter.Sub(now.Add(10 * time.Minute)); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("client certificate not after %s", crts[0].NotAfter)
	}
	if err := CheckClientCert(dir, CAName, certPEM, "kubernetes-admin", nil, now.Add(6*time.Minute), 10*time.Minute); !errors.Is(err, ErrStale) {
		t.Errorf("client certificate after 6 of 10 minutes: %v", err)
	}
	if RenewWithin(0) != RenewBefore || RenewWithin(10*time.Minute) != 5*time.Minute {
		t.Errorf("RenewWithin: %s, %s", RenewWithin(0), RenewWithin(10*time.Minute))
	}
}
