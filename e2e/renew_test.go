//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
)

type expirationReport struct {
	Certificates []struct {
		Node      string    `json:"node"`
		Name      string    `json:"name"`
		Path      string    `json:"path"`
		NotAfter  time.Time `json:"notAfter"`
		Serial    string    `json:"serial"`
		Renewable bool      `json:"renewable"`
		UsedBy    []string  `json:"usedBy"`
	} `json:"certificates"`
	CAs []struct {
		Node     string `json:"node"`
		Name     string `json:"name"`
		External bool   `json:"external"`
	} `json:"certificateAuthorities"`
}

type renewReport struct {
	Renewed []struct {
		Node, Name, Path, OldSerial, Serial, Verified string
	} `json:"renewed"`
	Restarted        []struct{ Node, Pod string } `json:"restarted"`
	KubeconfigMerged string                       `json:"kubeconfigMerged"`
}

// pods are the pods a renewal restarted, as node/pod.
func (r renewReport) pods() []string {
	var out []string
	for _, p := range r.Restarted {
		out = append(out, p.Node+"/"+p.Pod)
	}
	return out
}

// devkCerts are what check-expiration lists and renew all renews on a
// devk cluster: kubeadm's 11 and the controller-manager's and scheduler's
// serving certificates.
const devkCerts = 13

// userClientSerial is the serial of the client certificate of context
// devk-<name> in the user's kubeconfig.
func userClientSerial(t *testing.T, path, name string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.AuthInfos["devk-"+name]
	if u == nil {
		t.Fatalf("%s has no user devk-%s", path, name)
	}
	crts, err := certutil.ParseCertsPEM(u.ClientCertificateData)
	if err != nil {
		t.Fatal(err)
	}
	return crts[0].SerialNumber.Text(16)
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
// pods, and the API server, etcd, the controller-manager and the
// scheduler then serve the new serials, the cluster is healthy, kubectl
// works with the renewed admin.conf, and the user's kubeconfig has the
// renewed admin credentials, which work too.
func TestCertsRenew(t *testing.T) {
	c := Cluster(t)
	r := MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "-o", "json")
	var rep expirationReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("check-expiration -o json: %v\n%s", err, r.Stdout)
	}
	if len(rep.Certificates) != devkCerts || len(rep.CAs) != 3 {
		t.Fatalf("check-expiration listed %d certificates and %d CAs, want %d and 3:\n%s", len(rep.Certificates), len(rep.CAs), devkCerts, r.Stdout)
	}
	const node = "devk-control-plane"
	for _, crt := range rep.Certificates {
		if crt.Node != node {
			t.Errorf("%s is node %q's, want %s's", crt.Name, crt.Node, node)
		}
	}
	for _, ca := range rep.CAs {
		if ca.Node != node {
			t.Errorf("CA %s is node %q's, want %s's", ca.Name, ca.Node, node)
		}
	}
	if r := MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration"); !strings.HasPrefix(r.Stdout, "NODE ") || strings.Count(r.Stdout, node+" ") != devkCerts+3 {
		t.Errorf("check-expiration's table does not name the node on each row:\n%s", r.Stdout)
	}
	if r := Devk(t, c.Tree, c.Env, "certs", "renew", "apiserver", "--node", "nosuch"); r.Err == nil || !strings.Contains(r.Stderr, `no node "nosuch"; its nodes: `+node) {
		t.Errorf("renew --node nosuch: %v\n%s", r.Err, r.Stderr)
	}
	for _, crt := range rep.Certificates {
		want := map[string]string{"controller-manager-server": "kube-controller-manager", "scheduler-server": "kube-scheduler"}[crt.Name]
		if want != "" && strings.Join(crt.UsedBy, ",") != want {
			t.Errorf("%s used by %v, want %s", crt.Name, crt.UsedBy, want)
		}
	}
	userKubeconfig := filepath.Join(c.Home, "user-kubeconfig")
	userBefore := userClientSerial(t, userKubeconfig, "devk")
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
	if len(rr.Renewed) != devkCerts {
		t.Fatalf("renewed %d, want %d:\n%s", len(rr.Renewed), devkCerts, r.Stdout)
	}
	serial := map[string]string{}
	for _, x := range rr.Renewed {
		if x.Node != node {
			t.Errorf("renewed %s on node %q, want %s", x.Name, x.Node, node)
		}
		if x.Serial == before[x.Name] || x.OldSerial != before[x.Name] || x.Verified == "" {
			t.Errorf("%s: serial %s (was %s, reported old %s), verified %q", x.Name, x.Serial, before[x.Name], x.OldSerial, x.Verified)
		}
		serial[x.Name] = x.Serial
	}
	for _, p := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if !slices.Contains(rr.pods(), node+"/"+p) {
			t.Errorf("%s was not restarted: %v", p, rr.pods())
		}
	}
	ip := apiServerHost(t, c)
	if got := servedSerial(t, net.JoinHostPort(ip, "6443")); got != serial["apiserver"] {
		t.Errorf("the API server serves serial %s, renewed %s", got, serial["apiserver"])
	}
	if got := servedSerial(t, net.JoinHostPort(ip, "2379")); got != serial["etcd-server"] {
		t.Errorf("etcd serves serial %s, renewed %s", got, serial["etcd-server"])
	}
	for name, port := range map[string]string{"controller-manager-server": "10257", "scheduler-server": "10259"} {
		if got := servedSerial(t, net.JoinHostPort(ip, port)); got != serial[name] {
			t.Errorf("port %s serves serial %s, renewed %s %s", port, got, name, serial[name])
		}
		for _, x := range rr.Renewed {
			if x.Name == name && !strings.Contains(x.Verified, "presents serial "+serial[name]) {
				t.Errorf("%s verified %q, want by the serial its server presents", name, x.Verified)
			}
		}
	}
	if got := userClientSerial(t, userKubeconfig, "devk"); got != serial["admin.conf"] || got == userBefore {
		t.Errorf("your kubeconfig's devk-devk client certificate: serial %s (was %s), renewed admin.conf %s", got, userBefore, serial["admin.conf"])
	}
	if !strings.Contains(rr.KubeconfigMerged, "devk-devk") {
		t.Errorf("renew did not say it merged admin.conf into your kubeconfig: %q", rr.KubeconfigMerged)
	}
	if r := run(t, c.Tree, nil, c.KubectlPath(), "--kubeconfig", userKubeconfig, "--context", "devk-devk", "get", "--raw", "/readyz"); r.Err != nil || strings.TrimSpace(r.Stdout) != "ok" {
		t.Fatalf("kubectl with your kubeconfig's renewed context: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
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
	return serverHost(t, c.Kubeconfig)
}

// serverHost is the host of the API server a kubeconfig names.
func serverHost(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname()
}

// pairsMatch checks that every certificate of the cluster's PKI and every
// kubeconfig's client certificate belongs to the key beside it.
func pairsMatch(t *testing.T, clusterDir string) {
	t.Helper()
	samePub := func(what string, certPEM, keyPEM []byte) {
		crts, err := certutil.ParseCertsPEM(certPEM)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		a, _ := x509.MarshalPKIXPublicKey(crts[0].PublicKey)
		b, _ := x509.MarshalPKIXPublicKey(key.(crypto.Signer).Public())
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the certificate does not match its key", what)
		}
	}
	pkiDir := filepath.Join(clusterDir, "pki")
	crts, _ := filepath.Glob(filepath.Join(pkiDir, "*.crt"))
	etcd, _ := filepath.Glob(filepath.Join(pkiDir, "etcd", "*.crt"))
	for _, crt := range append(crts, etcd...) {
		c, err := os.ReadFile(crt)
		if err != nil {
			t.Fatal(err)
		}
		k, err := os.ReadFile(strings.TrimSuffix(crt, ".crt") + ".key")
		if err != nil {
			t.Fatal(err)
		}
		samePub(crt, c, k)
	}
	for _, name := range []string{"admin", "super-admin", "controller-manager", "scheduler"} {
		path := filepath.Join(clusterDir, name+".conf")
		cfg, err := clientcmd.LoadFromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		u := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
		samePub(path, u.ClientCertificateData, u.ClientKeyData)
	}
}

// TestCertsShortLived: a cluster made with --cert-validity 10m has
// ten-minute certificates (up warns of them), renews them after a kill in
// the middle of a renewal (no certificate is ever left beside a key it
// does not match), and `devk up --renew-certs` renews them too.
func TestCertsShortLived(t *testing.T) {
	c := Cluster(t)
	t.Cleanup(func() { Devk(t, c.Tree, c.Env, "down", "--name", "short") })
	t0 := time.Now()
	r := MustDevkEnv(t, c.Tree, c.Env, "up", "--name", "short", "--cert-validity", "10m")
	if !strings.Contains(r.Stderr, "expire within 30d") {
		t.Errorf("up with ten-minute certificates did not warn:\n%s", r.Stderr)
	}
	clusterDir := filepath.Join(c.Home, "clusters", "short")
	r = MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "--name", "short", "-o", "json")
	var rep expirationReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	for _, crt := range rep.Certificates {
		if crt.NotAfter.Before(t0.Add(10*time.Minute-time.Minute)) || crt.NotAfter.After(time.Now().Add(10*time.Minute+time.Minute)) {
			t.Errorf("%s expires %s, want ten minutes after it was made", crt.Name, crt.NotAfter)
		}
	}
	if len(rep.Certificates) != devkCerts {
		t.Errorf("%d certificates listed, want %d", len(rep.Certificates), devkCerts)
	}
	olderDevk(t, c, clusterDir)

	renew := []string{"certs", "renew", "all", "--name", "short", "--validity", "10m"}
	for _, point := range []string{"certs-renew/renew/apiserver", "certs-renew/restart"} {
		r := atPoint(t, c.Tree, c.Env, point, "kill", renew...)
		if !killedBySignal(r.Err, syscall.SIGKILL) {
			t.Fatalf("at %s: %v", point, r.Err)
		}
		pairsMatch(t, clusterDir)
		r = MustDevkEnv(t, c.Tree, c.Env, append(renew, "-o", "json")...)
		var rr renewReport
		if err := json.Unmarshal([]byte(r.Stdout), &rr); err != nil {
			t.Fatal(err)
		}
		if len(rr.Renewed) != devkCerts || len(rr.Restarted) != 4 {
			t.Fatalf("re-run after a kill at %s: %d renewed, %v restarted", point, len(rr.Renewed), rr.pods())
		}
	}
	pairsMatch(t, clusterDir)
	admin := filepath.Join(clusterDir, "admin.conf")
	if r := run(t, c.Tree, nil, c.KubectlPath(), "--kubeconfig", admin, "get", "--raw", "/readyz"); r.Err != nil || strings.TrimSpace(r.Stdout) != "ok" {
		t.Fatalf("kubectl with the renewed admin.conf: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	r = MustDevkEnv(t, c.Tree, c.Env, "up", "--name", "short", "--renew-certs")
	if !strings.Contains(r.Stderr, "certs-expiry") || !strings.Contains(r.Stderr, fmt.Sprintf("renewed %d", devkCerts)) {
		t.Errorf("up --renew-certs did not renew:\n%s", r.Stderr)
	}
	MustDevkEnv(t, c.Tree, c.Env, "down", "--name", "short")
}

// olderDevk makes cluster "short" look made by a devk from before the
// controller-manager and scheduler had serving certificates of the
// cluster CA (no such files, no --tls-* flags in their manifests), checks
// that check-expiration then lists kubeadm's set alone and finds nothing
// missing, and that `devk up` gives it the files and the flags back: the
// two components serve them.
func olderDevk(t *testing.T, c *SharedCluster, clusterDir string) {
	t.Helper()
	pkiDir := filepath.Join(clusterDir, "pki")
	for _, pod := range []string{"kube-controller-manager", "kube-scheduler"} {
		path := filepath.Join(clusterDir, "manifests", pod+".yaml")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var p corev1.Pod
		if err := yaml.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		ct := &p.Spec.Containers[0]
		ct.Command = slices.DeleteFunc(ct.Command, func(a string) bool { return strings.HasPrefix(a, "--tls-") })
		serving := func(name string) bool { return strings.HasPrefix(name, "serving-") }
		ct.VolumeMounts = slices.DeleteFunc(ct.VolumeMounts, func(m corev1.VolumeMount) bool { return serving(m.Name) })
		p.Spec.Volumes = slices.DeleteFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return serving(v.Name) })
		out, err := yaml.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		// Written beside the manifests dir and renamed in: the kubelet
		// reads every file in it.
		tmp := filepath.Join(clusterDir, pod+".yaml.old-devk")
		if err := os.WriteFile(tmp, out, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"controller-manager-server", "scheduler-server"} {
		for _, ext := range []string{".crt", ".key"} {
			if err := os.Remove(filepath.Join(pkiDir, name+ext)); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "--name", "short", "-o", "json")
	var rep expirationReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Certificates) != 11 {
		t.Errorf("without the serving certificates: %d listed, want kubeadm's 11:\n%s", len(rep.Certificates), r.Stdout)
	}
	MustDevkEnv(t, c.Tree, c.Env, "certs", "check-expiration", "--name", "short", "--fail-within", "1m")

	MustDevkEnv(t, c.Tree, c.Env, "up", "--name", "short")
	ip := serverHost(t, filepath.Join(clusterDir, "admin.conf"))
	for name, port := range map[string]string{"controller-manager-server": "10257", "scheduler-server": "10259"} {
		crts, err := certutil.CertsFromFile(filepath.Join(pkiDir, name+".crt"))
		if err != nil {
			t.Fatalf("up did not write %s back: %v", name, err)
		}
		want := crts[0].SerialNumber.Text(16)
		// up waited for the restarted pods' /healthz, served with the file.
		if got := servedSerial(t, net.JoinHostPort(ip, port)); got != want {
			t.Errorf("after up, port %s serves serial %s, %s.crt has %s", port, got, name, want)
		}
	}
}

// haCerts is TestHAControlPlane's certificates step, on its running
// cluster of three control-plane nodes (cps, node 0 first):
// check-expiration lists every node's own certificates and its copy of
// the CAs, each row naming its node; a renewal killed while node 0's API
// server is out of HAProxy leaves every certificate beside its key, and
// the next renewal puts node 0 back first; `devk certs renew apiserver`
// then goes node by node while a client sends requests through HAProxy,
// none of which fails, and each node's API server serves its own
// renewed certificate (its serial, and the file's, on the node's
// address).
func haCerts(t *testing.T, c *SharedCluster, name string, cps []string, admin string) {
	cfg, paths, err := layout.Open(c.Home, name)
	if err != nil {
		t.Fatal(err)
	}
	devk := func(args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, c.Tree, c.Env, append(args, "--name", name)...)
	}
	r := devk("certs", "check-expiration", "-o", "json")
	var rep expirationReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("check-expiration -o json: %v\n%s", err, r.Stdout)
	}
	rows, cas := map[string]int{}, map[string]int{}
	serials := map[string]string{} // node/name -> serial
	for _, crt := range rep.Certificates {
		rows[crt.Node]++
		serials[crt.Node+"/"+crt.Name] = crt.Serial
		np, err := paths.Node(cfg, crt.Node)
		if err != nil {
			t.Fatalf("a row of node %q: %v", crt.Node, err)
		}
		if !strings.HasPrefix(crt.Path, np.Dir+string(filepath.Separator)) {
			t.Errorf("%s of node %s is read from %s, not from the node's own files under %s", crt.Name, crt.Node, crt.Path, np.Dir)
		}
		if crt.Name == "super-admin.conf" && crt.Node != cps[0] {
			t.Errorf("super-admin.conf is node 0's alone; listed for %s", crt.Node)
		}
	}
	for _, ca := range rep.CAs {
		cas[ca.Node]++
	}
	for i, n := range cps {
		want := devkCerts - 1 // super-admin.conf is node 0's alone
		if i == 0 {
			want = devkCerts
		}
		if rows[n] != want || cas[n] != 3 {
			t.Errorf("node %s: %d certificates and %d CAs listed, want %d and 3", n, rows[n], cas[n], want)
		}
	}
	if len(rows) != len(cps) {
		t.Errorf("check-expiration listed the nodes %v, want the control-plane nodes %v", rows, cps)
	}
	if serials[cps[1]+"/apiserver"] == serials[cps[0]+"/apiserver"] {
		t.Error("two nodes list the same apiserver certificate")
	}
	text := devk("certs", "check-expiration").Stdout
	for _, n := range cps {
		if !strings.Contains(text, n+" ") {
			t.Errorf("check-expiration's table has no row of %s:\n%s", n, text)
		}
	}
	if r := Devk(t, c.Tree, c.Env, "certs", "check-expiration", "--name", name, "--node", "nosuch"); r.Err == nil || !strings.Contains(r.Stderr, strings.Join(cfg.NodeNames(), ", ")) {
		t.Errorf("--node nosuch: %v, want an error naming the cluster's nodes\n%s", r.Err, r.Stderr)
	}

	// Killed once node 0's API server restarted out of HAProxy: every
	// node's files stay whole; the next renewal puts node 0 back first.
	if r := atPoint(t, c.Tree, c.Env, "certs-renew/verify", "kill", "certs", "renew", "apiserver", "--name", name); !killedBySignal(r.Err, syscall.SIGKILL) {
		t.Fatalf("not killed at certs-renew/verify: %v\n%s", r.Err, r.Stderr)
	}
	pairsMatch(t, paths.Dir)
	// The kubelet makes node 0's API server again (its sandbox was
	// removed): renew wants it running.
	n0, _, err := cfg.FindNode(cps[0])
	if err != nil {
		t.Fatal(err)
	}
	insecure := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		resp, err := insecure.Get("https://" + net.JoinHostPort(n0.IP, "6443") + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("node 0's API server not ready again after the kill: %v", err)
	}

	load := startLoad(t, admin)
	rn := devk("certs", "renew", "apiserver", "-o", "json")
	sent, failures := load.stop()
	var rr renewReport
	if err := json.Unmarshal([]byte(rn.Stdout), &rr); err != nil {
		t.Fatalf("renew -o json: %v\n%s", err, rn.Stdout)
	}
	var order []string
	for _, x := range rr.Renewed {
		order = append(order, x.Node)
		if x.Name != "apiserver" || x.Serial == serials[x.Node+"/apiserver"] || !strings.Contains(x.Verified, "/readyz ok") {
			t.Errorf("node %s: renewed %s serial %s (was %s), verified %q", x.Node, x.Name, x.Serial, serials[x.Node+"/apiserver"], x.Verified)
		}
		n, _, err := cfg.FindNode(x.Node)
		if err != nil {
			t.Fatal(err)
		}
		np, _ := paths.Node(cfg, x.Node)
		crts, err := certutil.CertsFromFile(filepath.Join(np.PKI(), "apiserver.crt"))
		if err != nil {
			t.Fatal(err)
		}
		served := servedSerial(t, net.JoinHostPort(n.IP, "6443"))
		if served != x.Serial || crts[0].SerialNumber.Text(16) != x.Serial {
			t.Errorf("node %s serves serial %s, its apiserver.crt has %s, renewed %s", x.Node, served, crts[0].SerialNumber.Text(16), x.Serial)
		}
	}
	if !slices.Equal(order, cps) || !slices.Equal(rr.pods(), []string{cps[0] + "/kube-apiserver", cps[1] + "/kube-apiserver", cps[2] + "/kube-apiserver"}) {
		t.Errorf("renewed on %v, restarted %v; want each node's API server in turn, node 0 first", order, rr.pods())
	}
	t.Logf("rolling renewal of 3 API servers' certificates took %s; %d requests through HAProxy meanwhile, %d failed", rn.Took.Round(time.Millisecond), sent, len(failures))
	if sent < 100 {
		t.Errorf("the load sent only %d requests: it did not run", sent)
	}
	if len(failures) > 0 {
		t.Errorf("%d of %d requests through HAProxy failed during the rolling renewal, e.g. %s", len(failures), sent, failures[0])
	}
	var st struct {
		LoadBalancer struct {
			Servers []struct{ Node, Status string }
		}
	}
	if err := json.Unmarshal([]byte(devk("status", "-o", "json").Stdout), &st); err != nil {
		t.Fatal(err)
	}
	for _, s := range st.LoadBalancer.Servers {
		if !strings.HasPrefix(s.Status, "UP") {
			t.Errorf("after the renewal HAProxy says %s for %s, want every server UP", s.Status, s.Node)
		}
	}
	pairsMatch(t, paths.Dir)
}
