package certs

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// fixturePKI writes kubeadm's layout under a temporary directory: the
// certificate set signed at issued, the four kubeconfigs, and an
// apiserver manifest naming its files.
func fixturePKI(t *testing.T, issued time.Time) layout.Node {
	t.Helper()
	dir := t.TempDir()
	f := layout.Node{PKIDir: filepath.Join(dir, "pki"), Kubeconfig: filepath.Join(dir, AdminConf), ManifestsDir: filepath.Join(dir, "manifests")}
	cfg := pki.Config{NodeName: "node-1", ServiceIP: net.ParseIP("10.96.0.1"), AdvertiseIP: net.ParseIP("10.250.0.2"), DNSDomain: "cluster.local"}
	for _, s := range pki.Specs(cfg) {
		if _, err := pki.Ensure(f.PKIDir, s, issued, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range pki.KubeconfigSpecs("node-1") {
		writeKubeconfig(t, f, k, issued)
	}
	manifest := `apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system}
spec:
  containers:
  - name: kube-apiserver
    image: registry.k8s.io/kube-apiserver:v1.34.4
    command:
    - kube-apiserver
    - --tls-cert-file=` + pki.CertPath(f.PKIDir, "apiserver") + `
    - --tls-private-key-file=` + pki.KeyPath(f.PKIDir, "apiserver") + `
    - --etcd-certfile=` + f.PKIDir + `/./apiserver-etcd-client.crt
    - --proxy-client-cert-file=` + pki.CertPath(f.PKIDir, "front-proxy-client") + `
`
	if err := os.MkdirAll(f.ManifestsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.ManifestsDir, "kube-apiserver.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, f, "kube-scheduler", "--tls-cert-file="+pki.CertPath(f.PKIDir, pki.SchedulerServer),
		"--tls-private-key-file="+pki.KeyPath(f.PKIDir, pki.SchedulerServer), "--kubeconfig="+filepath.Join(dir, "scheduler.conf"))
	return f
}

// writeKubeconfig writes k's kubeconfig beside f's admin kubeconfig, its
// client certificate signed by f's cluster CA at issued, in kubeadm's
// shape (cluster/internal/kubeconfig.Bytes writes the same; the cluster
// package imports this one).
func writeKubeconfig(t *testing.T, f layout.Node, k pki.KubeconfigSpec, issued time.Time) {
	t.Helper()
	caPEM, err := os.ReadFile(pki.CertPath(f.PKIDir, pki.CAName))
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := pki.ClientCert(f.PKIDir, pki.CAName, k.CommonName, k.Organization, issued, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: "https://10.250.0.2:6443", CertificateAuthorityData: caPEM}
	cfg.AuthInfos[k.CommonName] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: k.CommonName}
	cfg.CurrentContext = "default"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(f.Kubeconfig), k.Name+".conf"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeManifest writes a static pod manifest of one container, both
// named pod, running it with flags.
func writeManifest(t *testing.T, f layout.Node, pod string, flags ...string) {
	t.Helper()
	m := "apiVersion: v1\nkind: Pod\nmetadata: {name: " + pod + ", namespace: kube-system}\nspec:\n  containers:\n  - name: " + pod +
		"\n    image: registry.k8s.io/" + pod + ":v1.34.4\n    command:\n    - " + pod + "\n"
	for _, fl := range flags {
		m += "    - " + strconv.Quote(fl) + "\n"
	}
	if err := os.WriteFile(filepath.Join(f.ManifestsDir, pod+".yaml"), []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
}

func byName[T any](items []T, name func(T) string) map[string]T {
	m := map[string]T{}
	for _, it := range items {
		m[name(it)] = it
	}
	return m
}

// TestCheckExpirationTable: kubeadm's table from a fixture PKI: every
// certificate and kubeconfig with its expiry, CA and users; the front
// proxy's CA made external (its key removed), so what it signs cannot be
// renewed; a missing kubeconfig shows as missing.
func TestCheckExpirationTable(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := fixturePKI(t, issued)
	if err := os.Remove(pki.KeyPath(f.PKIDir, "front-proxy-ca")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(filepath.Dir(f.Kubeconfig), "scheduler.conf")); err != nil {
		t.Fatal(err)
	}
	now := issued.Add(300 * 24 * time.Hour)
	r, err := Inspect(f, now)
	if err != nil {
		t.Fatal(err)
	}
	certs := byName(r.Certs, func(c Cert) string { return c.Name })
	want := []string{"admin.conf", "apiserver", "apiserver-etcd-client", "apiserver-kubelet-client", "controller-manager-server", "controller-manager.conf",
		"etcd-healthcheck-client", "etcd-peer", "etcd-server", "front-proxy-client", "scheduler-server", "scheduler.conf", "super-admin.conf"}
	var got []string
	for _, c := range r.Certs {
		got = append(got, c.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("certificates %v, want %v", got, want)
	}
	for _, c := range r.Certs {
		if c.Name == "scheduler.conf" {
			if !c.Missing {
				t.Errorf("scheduler.conf removed, not reported missing: %+v", c)
			}
			continue
		}
		if !c.NotAfter.Equal(issued.Add(pki.CertValidity)) || HumanDuration(c.Residual) != "65d" || c.Serial == "" {
			t.Errorf("%s: expires %s (residual %s, serial %q), want %s (65d)", c.Name, c.NotAfter, HumanDuration(c.Residual), c.Serial, issued.Add(pki.CertValidity))
		}
	}
	for name, ca := range map[string]string{"apiserver": "ca", "etcd-server": "etcd-ca", "apiserver-etcd-client": "etcd-ca", "front-proxy-client": "front-proxy-ca", "admin.conf": "ca",
		"controller-manager-server": "ca", "scheduler-server": "ca"} {
		if certs[name].CA != ca {
			t.Errorf("%s: CA %q, want %q", name, certs[name].CA, ca)
		}
	}
	if fp := certs["front-proxy-client"]; fp.Renewable || !strings.Contains(fp.Why, "external") {
		t.Errorf("front-proxy-client under an external CA: renewable %v (%q)", fp.Renewable, fp.Why)
	}
	if !certs["apiserver"].Renewable || !certs["etcd-peer"].Renewable || !certs["admin.conf"].Renewable {
		t.Error("certificates of CAs devk has the key of are not renewable")
	}
	for name, users := range map[string][]string{
		"apiserver": {"kube-apiserver"}, "apiserver-etcd-client": {"kube-apiserver"}, "front-proxy-client": {"kube-apiserver"},
		"admin.conf": {"kubectl (you)"}, "etcd-peer": nil, "scheduler-server": {"kube-scheduler"}, "controller-manager-server": nil,
	} {
		if !slices.Equal(certs[name].UsedBy, users) {
			t.Errorf("%s used by %q, want %q", name, certs[name].UsedBy, users)
		}
	}
	cas := byName(r.CAs, func(c CA) string { return c.Name })
	if len(cas) != 3 || !cas["front-proxy-ca"].External || cas["ca"].External || cas["etcd-ca"].External {
		t.Errorf("CAs %+v: want ca, etcd-ca, and front-proxy-ca external", r.CAs)
	}
	// A CA is made for ten years from when it is written (not issued).
	if y := HumanDuration(cas["ca"].Residual); y != "9y" && y != "10y" {
		t.Errorf("ca residual %s, want ten years or a little less", y)
	}

	if exp := r.ExpiringWithin(30 * 24 * time.Hour); !slices.Equal(exp, []string{"scheduler.conf"}) {
		t.Errorf("expiring within 30d: %v, want only the missing scheduler.conf", exp)
	}
	if exp := r.ExpiringWithin(90 * 24 * time.Hour); len(exp) != len(want) {
		t.Errorf("expiring within 90d: %v, want every certificate", exp)
	}
}

// TestCheckExpirationWithoutServingCerts: a node without the
// controller-manager's and scheduler's serving certificates (kubeadm's,
// or a cluster an older devk made) is whole: they are not listed, not
// counted as missing, and renew does not know them.
func TestCheckExpirationWithoutServingCerts(t *testing.T) {
	f := fixturePKI(t, time.Now())
	for _, name := range []string{pki.ControllerManagerServer, pki.SchedulerServer} {
		for _, p := range []string{pki.CertPath(f.PKIDir, name), pki.KeyPath(f.PKIDir, name)} {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, err := Inspect(f, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Certs {
		if strings.HasSuffix(c.Name, "-server") && c.Name != "etcd-server" {
			t.Errorf("listed %s (missing %v), which a kubeadm node does not have", c.Name, c.Missing)
		}
	}
	if len(r.Certs) != 11 {
		t.Errorf("%d certificates, want kubeadm's 11", len(r.Certs))
	}
	if exp := r.ExpiringWithin(30 * 24 * time.Hour); len(exp) != 0 {
		t.Errorf("expiring within 30d or missing: %v, want none", exp)
	}
	_, err = Renew(context.Background(), RenewOptions{Nodes: oneNode(f, filepath.Join(t.TempDir(), "none.sock")), Names: []string{pki.SchedulerServer}}, phase.Options{})
	if err == nil || !strings.Contains(err.Error(), `no certificate "scheduler-server" on this node`) {
		t.Errorf("renew of a serving certificate the node does not have: %v", err)
	}
}

func TestCheckExpirationNotPKI(t *testing.T) {
	dir := t.TempDir()
	_, err := Inspect(layout.Node{PKIDir: dir, Kubeconfig: filepath.Join(dir, AdminConf)}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Fatalf("a directory without ca.crt: %v", err)
	}
}

func TestParseWithinAndHuman(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 720 * time.Hour, "0d": 0, "10m": 10 * time.Minute, "720h": 720 * time.Hour} {
		if got, err := ParseWithin(in); err != nil || got != want {
			t.Errorf("ParseWithin(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "-1d", "3w", "1.5d", "-5m", "365000d"} {
		if _, err := ParseWithin(bad); err == nil {
			t.Errorf("ParseWithin(%q) accepted", bad)
		}
	}
	for d, want := range map[time.Duration]string{-time.Second: "invalid", 0: "invalid", 90 * time.Second: "1m", 3 * time.Hour: "3h", 400 * 24 * time.Hour: "1y", 40 * 24 * time.Hour: "40d"} {
		if got := HumanDuration(Duration(d)); got != want {
			t.Errorf("HumanDuration(%s) = %s, want %s", d, got, want)
		}
	}
}

// TestManifestUsersInANode: kubeadm's manifests in a devk node name the
// paths inside the node (/etc/kubernetes/…); the pods that use a file
// are found by the file's path on this machine, so renew restarts them.
func TestManifestUsersInANode(t *testing.T) {
	dir := t.TempDir()
	n := layout.Node{ManifestsDir: filepath.Join(dir, "manifests"), PKIDir: filepath.Join(dir, "pki"), EtcKubernetes: dir}
	if err := os.MkdirAll(n.ManifestsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := "apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, namespace: kube-system}\nspec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --tls-cert-file=/etc/kubernetes/pki/apiserver.crt, --audit-log-path=/var/log/audit.log]\n"
	if err := os.WriteFile(filepath.Join(n.ManifestsDir, "kube-apiserver.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	users, err := manifestUsers(n.ManifestsDir, n)
	if err != nil {
		t.Fatal(err)
	}
	if got := users[filepath.Join(dir, "pki", "apiserver.crt")]; !slices.Equal(got, []string{"kube-apiserver"}) {
		t.Errorf("users of the node's apiserver.crt = %v (all: %v)", got, users)
	}
	if got := users["/var/log/audit.log"]; !slices.Equal(got, []string{"kube-apiserver"}) {
		t.Errorf("a path outside /etc/kubernetes is the machine's: %v", users)
	}
}
