// Package certs is `devk certs`: what a control-plane node's certificates
// and kubeconfigs are, when they expire, which CA signed them, whether
// devk can renew them and which components use them; on devk's clusters
// and on kubeadm-layout nodes alike.
package certs

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/pki"
)

// Files is where a node keeps what check-expiration reads, as its report
// says: the PKI directory, the directory of the kubeconfigs (admin.conf,
// …) and the kubelet's static pod manifests, derived from the node's
// layout.Node (filesOf).
type Files struct {
	PKIDir        string `json:"pkiDir"`
	KubeconfigDir string `json:"kubeconfigDir"`
	ManifestsDir  string `json:"manifestsDir"`
}

// filesOf is where node n keeps what check-expiration reads: the
// kubeconfigs are beside its admin kubeconfig.
func filesOf(n layout.Node) Files {
	return Files{PKIDir: n.PKIDir, KubeconfigDir: filepath.Dir(n.Kubeconfig), ManifestsDir: n.ManifestsDir}
}

// NodeFiles is one control-plane node of a report, by its name, and
// where its files are: on a devk cluster each control-plane node has its
// own (node 0's at the cluster directory's top, the others' under
// nodes/<node>/), signed by the same CAs, which every node holds a copy
// of. A kubeadm node given by its directories may be unnamed.
type NodeFiles struct {
	// Name is the node's (its kubelet's) name; "" for a node given by
	// its directories alone.
	Name  string `json:"node,omitempty"`
	Files Files  `json:"files"`
}

// nodeFiles is control-plane node n as a report lists it.
func nodeFiles(n layout.ControlPlaneNode) NodeFiles {
	return NodeFiles{Name: n.Name, Files: filesOf(n.Node)}
}

// Entry is what a report says of every certificate and CA: whose and
// which file it is, and when it expires.
type Entry struct {
	// Node is the node whose file it is ("" on an unnamed node); every
	// control-plane node has its own copy of each CA.
	Node string `json:"node,omitempty"`
	// Name is kubeadm's: "ca", "apiserver", "etcd-server", "admin.conf", ….
	Name string `json:"name"`
	// Path is the file: the certificate, or the kubeconfig that holds it.
	Path string `json:"path"`
	// Missing says the file is not there; the times are then zero.
	Missing  bool      `json:"missing,omitempty"`
	NotAfter time.Time `json:"notAfter"`
	Residual Duration  `json:"residual"`
}

// fill sets when the certificate read (crt, err) expires, or that the
// file is missing.
func (e *Entry) fill(crt *x509.Certificate, err error, now time.Time) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.Missing = true
		return nil
	case err != nil:
		return err
	}
	e.NotAfter, e.Residual = crt.NotAfter, Duration(crt.NotAfter.Sub(now))
	return nil
}

// Cert is one certificate or kubeconfig client certificate.
type Cert struct {
	Entry
	Serial    string `json:"serial,omitempty"`
	CA        string `json:"ca"`
	Renewable bool   `json:"renewable"`
	// Why says why it cannot be renewed, when it cannot.
	Why string `json:"why,omitempty"`
	// UsedBy are the static pods whose manifests name the file, or who
	// else uses it (admin.conf: kubectl).
	UsedBy []string `json:"usedBy"`

	// spec is the certificate's name in the PKI directory (etcd/server),
	// "" for a kubeconfig; pods are the static pods of UsedBy.
	spec, caSpec string
	pods         []string
}

// CA is one certificate authority.
type CA struct {
	Entry
	// External says devk has the CA's certificate but not its key: the
	// CA is managed elsewhere, and what it signs cannot be renewed here.
	External bool `json:"external"`
}

// Report is check-expiration's answer: every node's certificates, then
// every node's CAs, node by node in the order asked.
type Report struct {
	Nodes []NodeFiles `json:"nodes"`
	Now   time.Time   `json:"now"`
	Certs []Cert      `json:"certificates"`
	CAs   []CA        `json:"certificateAuthorities"`
}

// Duration is a time.Duration that JSON writes in seconds.
type Duration time.Duration

// JSONShape is how -o json writes it, for the result's help.
func (Duration) JSONShape() string { return "seconds" }

// MarshalJSON writes whole seconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprint(int64(time.Duration(d) / time.Second))), nil
}

// UnmarshalJSON reads whole seconds (a report another devk wrote: the
// node agent's).
func (d *Duration) UnmarshalJSON(data []byte) error {
	var secs int64
	if err := json.Unmarshal(data, &secs); err != nil {
		return fmt.Errorf("a duration in seconds: %w", err)
	}
	*d = Duration(time.Duration(secs) * time.Second)
	return nil
}

// kubeadmName is kubeadm's name for a certificate of the set: the file's
// path with "/" as "-" (etcd/server is etcd-server).
func kubeadmName(specName string) string { return strings.ReplaceAll(specName, "/", "-") }

// otherUsers are who uses a kubeconfig no static pod names.
var otherUsers = map[string]string{
	"admin":    "kubectl (you)",
	superAdmin: "break-glass (system:masters)",
}

// superAdmin is the kubeconfig only the first control-plane node has:
// kubeadm's init writes it and its join does not ("If missing,
// super-admin.conf will not cause an error", kubeadm's documentation
// says), nor does devk's. A node without it is whole: it is not listed.
const superAdmin = "super-admin"

// ErrNotPKI is returned when the PKI directory holds no CA.
var ErrNotPKI = errors.New("not a Kubernetes PKI directory")

// InspectNodes reads each node's certificates, kubeconfigs and CAs as of
// now (see Inspect), each row saying whose it is.
func InspectNodes(nodes []layout.ControlPlaneNode, now time.Time) (*Report, error) {
	r := &Report{Now: now}
	for _, n := range nodes {
		one, err := Inspect(n.Node, now)
		if err != nil {
			if n.Name != "" {
				err = fmt.Errorf("node %s: %w", n.Name, err)
			}
			return nil, err
		}
		r.Add(n.Name, one)
	}
	return r, nil
}

// Add puts one node's report (Inspect's, read there) into r as node's:
// its rows, then its files.
func (r *Report) Add(node string, one *Report) {
	for _, c := range one.Certs {
		c.Node = node
		r.Certs = append(r.Certs, c)
	}
	for _, c := range one.CAs {
		c.Node = node
		r.CAs = append(r.CAs, c)
	}
	for _, f := range one.Nodes {
		f.Name = node
		r.Nodes = append(r.Nodes, f)
	}
}

// Inspect reads one node's certificates, kubeconfigs and CAs as of now.
// kubelet.conf is left out, as kubeadm leaves it out: the kubelet renews
// its own client certificate; so is an optional certificate the node
// does not have (the controller-manager's and scheduler's serving
// certificates, which only devk's clusters have; super-admin.conf,
// which only the first control-plane node has).
func Inspect(n layout.Node, now time.Time) (*Report, error) {
	f := filesOf(n)
	if _, err := os.Stat(pki.CertPath(f.PKIDir, pki.CAName)); err != nil {
		return nil, fmt.Errorf("%s: %w (no %s.crt): pass the directory that holds ca.crt (kubeadm: /etc/kubernetes/pki)", f.PKIDir, ErrNotPKI, pki.CAName)
	}
	users, err := manifestUsers(f.ManifestsDir, n)
	if err != nil {
		return nil, err
	}
	r := &Report{Nodes: []NodeFiles{{Files: f}}, Now: now}
	external := map[string]bool{}
	for _, s := range pki.Specs(pki.Config{}) {
		if !s.IsCA() {
			continue
		}
		ca := CA{Entry: Entry{Name: kubeadmName(s.Name), Path: pki.CertPath(f.PKIDir, s.Name)}}
		crt, err := readCert(ca.Path)
		if err := ca.fill(crt, err, now); err != nil {
			return nil, err
		}
		if !ca.Missing {
			if _, err := os.Stat(pki.KeyPath(f.PKIDir, s.Name)); errors.Is(err, fs.ErrNotExist) {
				ca.External = true
			}
		}
		external[s.Name] = ca.External
		r.CAs = append(r.CAs, ca)
	}
	caState := func(caName string) (bool, string) {
		ca := r.CAs[slices.IndexFunc(r.CAs, func(c CA) bool { return c.Name == kubeadmName(caName) })]
		switch {
		case ca.Missing:
			return false, "its CA " + ca.Name + " is missing"
		case external[caName]:
			return false, "its CA " + ca.Name + " is external (no " + filepath.Base(pki.KeyPath(f.PKIDir, caName)) + ")"
		}
		return true, ""
	}
	for _, s := range pki.Specs(pki.Config{}) {
		if s.IsCA() {
			continue
		}
		pods := users[filepath.Clean(pki.CertPath(f.PKIDir, s.Name))]
		c := Cert{Entry: Entry{Name: kubeadmName(s.Name), Path: pki.CertPath(f.PKIDir, s.Name)}, CA: kubeadmName(s.CA), UsedBy: slices.Clone(pods), spec: s.Name, caSpec: s.CA, pods: pods}
		crt, err := readCert(c.Path)
		if err := c.fill(crt, err, now); err != nil {
			return nil, err
		}
		if c.Missing && s.Optional {
			continue // a kubeadm node's, or an older devk cluster's: it has none
		}
		c.Renewable, c.Why = caState(s.CA)
		r.Certs = append(r.Certs, c)
	}
	for _, k := range pki.KubeconfigSpecs("") {
		if k.Name == "kubelet" {
			continue
		}
		path := filepath.Join(f.KubeconfigDir, k.Name+".conf")
		pods := users[filepath.Clean(path)]
		c := Cert{Entry: Entry{Name: k.Name + ".conf", Path: path}, CA: pki.CAName, UsedBy: slices.Clone(pods), caSpec: pki.CAName, pods: pods}
		if u, ok := otherUsers[k.Name]; ok {
			c.UsedBy = append(c.UsedBy, u)
		}
		crt, err := kubeconfigCert(path)
		if err := c.fill(crt, err, now); err != nil {
			return nil, err
		}
		if c.Missing && k.Name == superAdmin {
			continue // a node that joined the control plane: it has none
		}
		c.Renewable, c.Why = caState(pki.CAName)
		r.Certs = append(r.Certs, c)
	}
	sort.SliceStable(r.Certs, func(i, j int) bool { return r.Certs[i].Name < r.Certs[j].Name })
	return r, nil
}

// fill sets what the certificate says, or that the file is missing.
func (c *Cert) fill(crt *x509.Certificate, err error, now time.Time) error {
	if err := c.Entry.fill(crt, err, now); err != nil || c.Missing {
		return err
	}
	c.Serial = crt.SerialNumber.Text(16)
	return nil
}

// readCert reads the first certificate of a PEM file; a missing file's
// error wraps fs.ErrNotExist.
func readCert(path string) (*x509.Certificate, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	certs, err := certutil.CertsFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return certs[0], nil
}

// kubeconfigCert is the client certificate of a kubeconfig's current
// context's user: embedded, or the file it names.
func kubeconfigCert(path string) (*x509.Certificate, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig %s: %w", path, err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s: no current context", path)
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s: context %s names no user", path, cfg.CurrentContext)
	}
	data := user.ClientCertificateData
	if len(data) == 0 && user.ClientCertificate != "" {
		if data, err = os.ReadFile(user.ClientCertificate); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("kubeconfig %s: user %s has no client certificate", path, ctx.AuthInfo)
	}
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: client certificate: %w", path, err)
	}
	return certs[0], nil
}

// manifestUsers maps each file a static pod's command line names (a flag's
// value that is an absolute path, as this machine sees it) to the pods
// that name it.
func manifestUsers(dir string, n layout.Node) (map[string][]string, error) {
	out := map[string][]string{}
	if dir == "" {
		return out, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		pod, err := staticpod.Parse(data)
		if err != nil {
			continue // not a manifest the kubelet could run either
		}
		for _, ct := range pod.Spec.Containers {
			for _, arg := range append(slices.Clone(ct.Command), ct.Args...) {
				_, v, ok := strings.Cut(arg, "=")
				if !ok || !filepath.IsAbs(v) {
					continue
				}
				p := filepath.Clean(n.HostPath(v)) // a kubeadm manifest in a devk node names the node's paths
				if !slices.Contains(out[p], pod.Name) {
					out[p] = append(out[p], pod.Name)
				}
			}
		}
	}
	return out, nil
}

// ExpiringWithin lists what expires (or is missing) sooner than d from
// the report's time, each as <node>/<name> on a named node.
func (r *Report) ExpiringWithin(d time.Duration) []string {
	var out []string
	for _, c := range r.Certs {
		if c.Missing || time.Duration(c.Residual) < d {
			out = append(out, qualified(c.Node, c.Name))
		}
	}
	for _, c := range r.CAs {
		if !c.Missing && time.Duration(c.Residual) < d {
			out = append(out, qualified(c.Node, c.Name))
		}
	}
	return out
}

// qualified is name on node: <node>/<name>, or name on an unnamed node.
func qualified(node, name string) string {
	if node == "" {
		return name
	}
	return node + "/" + name
}

// HumanDuration writes a residual time as kubeadm does: the largest unit
// (365d as 1y), "invalid" once expired.
func HumanDuration(d Duration) string {
	t := time.Duration(d)
	switch {
	case t <= 0:
		return "invalid"
	case t >= 365*24*time.Hour:
		return fmt.Sprintf("%dy", int(t/(365*24*time.Hour)))
	case t >= 24*time.Hour:
		return fmt.Sprintf("%dd", int(t/(24*time.Hour)))
	case t >= time.Hour:
		return fmt.Sprintf("%dh", int(t/time.Hour))
	case t >= time.Minute:
		return fmt.Sprintf("%dm", int(t/time.Minute))
	}
	return fmt.Sprintf("%ds", int(t/time.Second))
}

// ParseWithin reads --fail-within: a Go duration (720h, 10m) or days
// (30d).
func ParseWithin(s string) (time.Duration, error) {
	const maxWithinDays = int(math.MaxInt64 / int64(24*time.Hour))
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && fmt.Sprint(n) == days && n >= 0 {
			if n > maxWithinDays {
				return 0, fmt.Errorf("%q is longer than a time.Duration holds: at most %dd", s, maxWithinDays)
			}
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration: use days (30d) or a Go duration (720h, 10m)", s)
	}
	return d, nil
}

// Names are kubeadm's names of the certificates and kubeconfigs
// check-expiration lists, for completion and messages.
func Names() []string {
	var out []string
	for _, s := range pki.Specs(pki.Config{}) {
		if !s.IsCA() {
			out = append(out, kubeadmName(s.Name))
		}
	}
	for _, k := range pki.KubeconfigSpecs("") {
		if k.Name != "kubelet" {
			out = append(out, k.Name+".conf")
		}
	}
	slices.Sort(out)
	return out
}
