// Package pki writes and checks the certificate set kubeadm writes for a
// control plane (same file names, subjects, SANs and usages), with ECDSA
// P-256 keys stored 0600. A certificate that still matches what would be
// written — same subject and SANs, signed by the current CA, not about to
// expire — is reused rather than replaced.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/layout"
)

const (
	// CAValidity is how long a CA is valid, as kubeadm.
	CAValidity = 10 * 365 * 24 * time.Hour
	// CertValidity is how long a leaf certificate is valid, as kubeadm.
	CertValidity = 365 * 24 * time.Hour
	// RenewBefore is how close to expiry a certificate is replaced (half
	// its lifetime when that is shorter: see RenewWithin).
	RenewBefore = 24 * time.Hour
)

// RenewWithin is how close to its expiry a certificate made to live
// validity is replaced: RenewBefore, or half of a shorter lifetime (a
// ten-minute certificate is replaced with five minutes left, not at once).
func RenewWithin(validity time.Duration) time.Duration {
	if validity <= 0 {
		validity = CertValidity
	}
	return min(RenewBefore, validity/2)
}

// CAName is the cluster CA's Name, which signs the API server's serving
// and client certificates and every kubeconfig's. The etcd CA's and the
// API server's etcd client certificate's names are layout's, which reads
// them too.
const CAName = "ca"

// The controller-manager's and the scheduler's serving certificates,
// signed by the cluster CA (kubeadm has none: its controller-manager and
// scheduler serve certificates they sign themselves, in memory, which
// nothing can check or renew). "-server" keeps them apart from the
// kubeconfigs controller-manager.conf and scheduler.conf in
// check-expiration's list.
const (
	ControllerManagerServer = "controller-manager-server"
	SchedulerServer         = "scheduler-server"
)

// Spec is one certificate of the set. Name is its path under the pki dir
// without extension ("apiserver", "etcd/server"); CA is the Name of the
// CA that signs it, empty for a CA.
type Spec struct {
	Name         string
	CA           string
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Usages       []x509.ExtKeyUsage
	// Validity is a leaf certificate's lifetime; 0 is CertValidity.
	Validity time.Duration
	// Optional says a node may lack it and be whole: kubeadm does not
	// make it, nor did devk before it gave the controller-manager and the
	// scheduler serving certificates. check-expiration and renew pass
	// over it when it is missing; up writes it.
	Optional bool
}

// lifetime is how long a certificate of s is made to live.
func (s Spec) lifetime() time.Duration {
	if s.Validity > 0 {
		return s.Validity
	}
	return CertValidity
}

// IsCA reports whether the spec is a self-signed CA.
func (s Spec) IsCA() bool { return s.CA == "" }

// Config is what the SANs and subjects depend on.
type Config struct {
	// NodeName is the node's name; it is in the apiserver's and etcd's SANs.
	NodeName string
	// ServiceIP is the first IP of the service range (kubernetes.default).
	ServiceIP net.IP
	// AdvertiseIP is the address the apiserver and etcd serve on.
	AdvertiseIP net.IP
	// EndpointIP, when set, is the load balancer's address in front of
	// every API server (the control-plane endpoint): in the apiserver's
	// SANs, as kubeadm puts controlPlaneEndpoint there.
	EndpointIP net.IP
	// DNSDomain is the cluster's DNS domain (cluster.local).
	DNSDomain string
	// Validity is the leaf certificates' lifetime; 0 is CertValidity
	// (kubeadm's year). The CAs keep theirs.
	Validity time.Duration
}

var (
	server       = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client       = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	serverClient = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
)

// Specs is kubeadm's certificate set for a single control-plane node,
// CAs before the certificates they sign, and the controller-manager's and
// scheduler's serving certificates devk adds to it (Optional).
func Specs(c Config) []Spec {
	loop4, loop6 := net.IPv4(127, 0, 0, 1), net.IPv6loopback
	etcdIPs := uniqIPs(c.AdvertiseIP, loop4, loop6)
	etcdDNS := []string{c.NodeName, "localhost"}
	specs := []Spec{
		{Name: CAName, CommonName: "kubernetes"},
		{Name: "apiserver", CA: CAName, CommonName: "kube-apiserver", Usages: server,
			DNSNames: []string{c.NodeName, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc." + c.DNSDomain, "localhost"},
			IPs: uniqIPs(c.ServiceIP, c.AdvertiseIP, loop4, c.EndpointIP)},
		{Name: "apiserver-kubelet-client", CA: CAName, CommonName: "kube-apiserver-kubelet-client",
			Organization: []string{"kubeadm:cluster-admins"}, Usages: client},
		{Name: "front-proxy-ca", CommonName: "front-proxy-ca"},
		{Name: "front-proxy-client", CA: "front-proxy-ca", CommonName: "front-proxy-client", Usages: client},
		{Name: layout.EtcdCAName, CommonName: "etcd-ca"},
		{Name: "etcd/server", CA: layout.EtcdCAName, CommonName: c.NodeName, Usages: serverClient, DNSNames: etcdDNS, IPs: etcdIPs},
		{Name: "etcd/peer", CA: layout.EtcdCAName, CommonName: c.NodeName, Usages: serverClient, DNSNames: etcdDNS, IPs: etcdIPs},
		{Name: "etcd/healthcheck-client", CA: layout.EtcdCAName, CommonName: "kube-etcd-healthcheck-client", Usages: client},
		{Name: layout.APIServerEtcdClient, CA: layout.EtcdCAName, CommonName: "kube-apiserver-etcd-client", Usages: client},
		// Their secure ports are on the node address (the probes') and
		// loopback (a kubeadm-style --bind-address), as the API server's.
		{Name: ControllerManagerServer, CA: CAName, CommonName: "kube-controller-manager", Usages: server,
			DNSNames: []string{c.NodeName, "localhost"}, IPs: uniqIPs(c.AdvertiseIP, loop4), Optional: true},
		{Name: SchedulerServer, CA: CAName, CommonName: "kube-scheduler", Usages: server,
			DNSNames: []string{c.NodeName, "localhost"}, IPs: uniqIPs(c.AdvertiseIP, loop4), Optional: true},
	}
	for i := range specs {
		if !specs[i].IsCA() {
			specs[i].Validity = c.Validity
		}
	}
	return specs
}

func uniqIPs(ips ...net.IP) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		if ip == nil || slices.ContainsFunc(out, ip.Equal) {
			continue
		}
		out = append(out, ip)
	}
	return out
}

// CertPath and KeyPath are where a spec's files live under dir.
func CertPath(dir, name string) string { return filepath.Join(dir, name+".crt") }

// KeyPath is the private key of name under dir.
func KeyPath(dir, name string) string { return filepath.Join(dir, name+".key") }

// ErrStale is returned by Check when a certificate exists but must be
// replaced (expired, wrong SANs, signed by another CA).
var ErrStale = errors.New("certificate must be replaced")

// ErrExpiring is the ErrStale of a certificate that is right but close to
// its end (RenewWithin).
var ErrExpiring = fmt.Errorf("%w: it expires soon", ErrStale)

// Check reports whether the files of s under dir are present and still
// what Ensure would write: nil if they can be reused, an error wrapping
// fs.ErrNotExist when absent, ErrStale (with the reason) otherwise.
func Check(dir string, s Spec, now time.Time) error {
	crt, key, err := Load(dir, s.Name)
	if err != nil {
		return err
	}
	if !publicKeyMatches(crt, key) {
		return fmt.Errorf("%w: %s does not belong to %s", ErrStale, KeyPath(dir, s.Name), CertPath(dir, s.Name))
	}
	if now.Before(crt.NotBefore) {
		return fmt.Errorf("%w: %s is not valid before %s (is the clock right?)", ErrStale, s.Name, crt.NotBefore.Format(time.RFC3339))
	}
	if now.Add(RenewWithin(s.lifetime())).After(crt.NotAfter) {
		return fmt.Errorf("%w: %s expires %s", ErrExpiring, s.Name, crt.NotAfter.Format(time.RFC3339))
	}
	if crt.Subject.CommonName != s.CommonName || !sameStrings(crt.Subject.Organization, s.Organization) {
		return fmt.Errorf("%w: %s has subject %q, want CN=%s O=%v", ErrStale, s.Name, crt.Subject.String(), s.CommonName, s.Organization)
	}
	if s.IsCA() {
		if !crt.IsCA {
			return fmt.Errorf("%w: %s is not a CA", ErrStale, s.Name)
		}
		return nil
	}
	if !sameStrings(crt.DNSNames, s.DNSNames) || !sameIPs(crt.IPAddresses, s.IPs) {
		return fmt.Errorf("%w: %s has SANs %v %v, want %v %v", ErrStale, s.Name, crt.DNSNames, crt.IPAddresses, s.DNSNames, s.IPs)
	}
	ca, _, err := Load(dir, s.CA)
	if err != nil {
		return fmt.Errorf("%w: its CA %s: %v", ErrStale, s.CA, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: s.Usages}); err != nil {
		return fmt.Errorf("%w: %s does not verify against %s: %v", ErrStale, s.Name, s.CA, err)
	}
	return nil
}

// Result says what Ensure did.
type Result int

const (
	Reused Result = iota
	Created
	Replaced
)

func (r Result) String() string {
	return [...]string{"reused", "created", "replaced"}[r]
}

// Ensure writes s under dir unless a valid one is there. With
// mayReplace false, a stale certificate is an error instead of being
// replaced (the cluster using it is running).
func Ensure(dir string, s Spec, now time.Time, mayReplace bool) (Result, error) {
	err := Check(dir, s, now)
	if err == nil {
		return Reused, nil
	}
	res := Created
	if !errors.Is(err, fs.ErrNotExist) {
		if !mayReplace {
			return Reused, fmt.Errorf("%w; the cluster is running, so up will not replace it under it: `devk up --renew-certs` (or `devk certs renew all`) renews it and restarts what uses it", err)
		}
		res = Replaced
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return res, err
	}
	var crt *x509.Certificate
	if s.IsCA() {
		crt, err = certutil.NewSelfSignedCACert(certutil.Config{CommonName: s.CommonName, Organization: s.Organization}, key)
	} else {
		var ca *x509.Certificate
		var caKey crypto.Signer
		if ca, caKey, err = Load(dir, s.CA); err != nil {
			return res, fmt.Errorf("load CA %s to sign %s: %w", s.CA, s.Name, err)
		}
		crt, err = sign(s, key, ca, caKey, now)
	}
	if err != nil {
		return res, fmt.Errorf("make %s: %w", s.Name, err)
	}
	if err := writePair(dir, s.Name, crt, key); err != nil {
		return res, err
	}
	return res, nil
}

func sign(s Spec, key *ecdsa.PrivateKey, ca *x509.Certificate, caKey crypto.Signer, now time.Time) (*x509.Certificate, error) {
	return signPublic(s, key.Public(), ca, caKey, now, s.lifetime())
}

// signPublic signs s for the public key pub, valid for validity from now
// (no longer than the CA).
func signPublic(s Spec, pub crypto.PublicKey, ca *x509.Certificate, caKey crypto.Signer, now time.Time, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).SetInt64(math.MaxInt64-1))
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: s.CommonName, Organization: s.Organization},
		SerialNumber:          new(big.Int).Add(serial, big.NewInt(1)),
		DNSNames:              s.DNSNames,
		IPAddresses:           s.IPs,
		NotBefore:             ca.NotBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           s.Usages,
		BasicConstraintsValid: true,
		AuthorityKeyId:        ca.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func writePair(dir, name string, crt *x509.Certificate, key crypto.PrivateKey) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	certPEM, err := certutil.EncodeCertificates(crt)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(CertPath(dir, name)), 0o755); err != nil {
		return err
	}
	// Key first: a crash between the two writes leaves a pair that Check
	// rejects (key does not match), never a certificate without its key.
	if err := atomicfile.Write(KeyPath(dir, name), keyPEM, 0o600, ""); err != nil {
		return err
	}
	return atomicfile.Write(CertPath(dir, name), certPEM, 0o644, "")
}

// Load reads a certificate and its key.
func Load(dir, name string) (*x509.Certificate, crypto.Signer, error) {
	certs, err := certutil.CertsFromFile(CertPath(dir, name))
	if err != nil {
		if _, serr := os.Stat(CertPath(dir, name)); errors.Is(serr, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s: %w", CertPath(dir, name), fs.ErrNotExist)
		}
		return nil, nil, fmt.Errorf("%w: read %s: %v", ErrStale, CertPath(dir, name), err)
	}
	k, err := keyutil.PrivateKeyFromFile(KeyPath(dir, name))
	if err != nil {
		if _, serr := os.Stat(KeyPath(dir, name)); errors.Is(serr, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s: %w", KeyPath(dir, name), fs.ErrNotExist)
		}
		return nil, nil, fmt.Errorf("%w: read %s: %v", ErrStale, KeyPath(dir, name), err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s is not a signing key", ErrStale, KeyPath(dir, name))
	}
	return certs[0], signer, nil
}

func publicKeyMatches(crt *x509.Certificate, key crypto.Signer) bool {
	a, err := x509.MarshalPKIXPublicKey(crt.PublicKey)
	if err != nil {
		return false
	}
	b, err := x509.MarshalPKIXPublicKey(key.Public())
	return err == nil && bytes.Equal(a, b)
}

func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

func sameIPs(a, b []net.IP) bool {
	str := func(ips []net.IP) []string {
		var out []string
		for _, ip := range ips {
			out = append(out, ip.String())
		}
		return out
	}
	return sameStrings(str(a), str(b))
}

// SA key pair file names, as kubeadm.
const (
	SAKeyName = "sa.key"
	SAPubName = "sa.pub"
)

// EnsureSA writes the service-account signing key pair (sa.key, sa.pub)
// unless a matching pair is there.
func EnsureSA(dir string) (Result, error) {
	keyPath, pubPath := filepath.Join(dir, SAKeyName), filepath.Join(dir, SAPubName)
	k, kerr := keyutil.PrivateKeyFromFile(keyPath)
	pubs, perr := keyutil.PublicKeysFromFile(pubPath)
	if kerr == nil && perr == nil && len(pubs) == 1 {
		if s, ok := k.(crypto.Signer); ok {
			a, err1 := x509.MarshalPKIXPublicKey(s.Public())
			b, err2 := x509.MarshalPKIXPublicKey(pubs[0])
			if err1 == nil && err2 == nil && bytes.Equal(a, b) {
				return Reused, nil
			}
		}
	}
	res := Created
	if _, err := os.Stat(keyPath); err == nil {
		res = Replaced
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return res, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return res, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return res, err
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	if err := atomicfile.Write(keyPath, keyPEM, 0o600, ""); err != nil {
		return res, err
	}
	return res, atomicfile.Write(pubPath, pubPEM, 0o644, "")
}

// ClientCert makes a client certificate signed by the CA name under dir,
// for a kubeconfig, living validity (0: CertValidity), and returns it and
// its key in PEM.
func ClientCert(dir, caName, commonName string, orgs []string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	ca, caKey, err := Load(dir, caName)
	if err != nil {
		return nil, nil, fmt.Errorf("load CA %s: %w", caName, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	crt, err := sign(Spec{CommonName: commonName, Organization: orgs, Usages: client, Validity: validity}, key, ca, caKey, now)
	if err != nil {
		return nil, nil, err
	}
	if certPEM, err = certutil.EncodeCertificates(crt); err != nil {
		return nil, nil, err
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	return certPEM, keyPEM, err
}

// CheckClientCert reports whether certPEM is a client certificate for
// commonName/orgs signed by the CA name under dir and not about to expire
// (for a certificate made to live validity: RenewWithin).
func CheckClientCert(dir, caName string, certPEM []byte, commonName string, orgs []string, now time.Time, validity time.Duration) error {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrStale, err)
	}
	crt := certs[0]
	if crt.Subject.CommonName != commonName || !sameStrings(crt.Subject.Organization, orgs) {
		return fmt.Errorf("%w: subject %q, want CN=%s O=%v", ErrStale, crt.Subject.String(), commonName, orgs)
	}
	if now.Add(RenewWithin(validity)).After(crt.NotAfter) {
		return fmt.Errorf("%w: expires %s", ErrExpiring, crt.NotAfter.Format(time.RFC3339))
	}
	ca, _, err := Load(dir, caName)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: client}); err != nil {
		return fmt.Errorf("%w: does not verify against %s: %v", ErrStale, caName, err)
	}
	return nil
}

// KubeconfigSpec is one of the kubeconfigs kubeadm writes.
type KubeconfigSpec struct {
	Name         string // file name without .conf
	CommonName   string
	Organization []string
}

// KubeconfigSpecs are admin, super-admin, controller-manager, scheduler
// and kubelet, with kubeadm's subjects.
func KubeconfigSpecs(nodeName string) []KubeconfigSpec {
	return []KubeconfigSpec{
		{"admin", "kubernetes-admin", []string{"kubeadm:cluster-admins"}},
		{"super-admin", "kubernetes-super-admin", []string{"system:masters"}},
		{"controller-manager", "system:kube-controller-manager", nil},
		{"scheduler", "system:kube-scheduler", nil},
		{"kubelet", "system:node:" + nodeName, []string{"system:nodes"}},
	}
}
