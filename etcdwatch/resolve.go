package etcdwatch

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/devk/devk/internal/layout"
)

// ConnOptions say which etcd to talk to. Empty fields are filled from the
// ETCDCTL_* environment variables, then from the devk cluster's or the
// kubeadm node's layout.
type ConnOptions struct {
	// Endpoints are client URLs (https://127.0.0.1:2379). Plain http
	// endpoints are used without TLS.
	Endpoints []string
	// CACert, Cert and Key are PEM files for TLS.
	CACert, Cert, Key string
	// Cluster names the devk cluster (default layout.DefaultName);
	// ClusterSet says the user named it, so that a missing cluster is an
	// error rather than a reason to look for a kubeadm node.
	Cluster    string
	ClusterSet bool
	// Home is devk's home as layout.HomeDir takes it: empty means
	// $DEVK_HOME, else ~/.devk.
	Home string
	// KubeadmDir is layout.KubeadmDir unless a test says otherwise.
	KubeadmDir string
	// Prefix is the API server's --etcd-prefix; empty means the one the
	// cluster's API server manifest names, else DefaultPrefix.
	Prefix string
	// DialTimeout bounds connecting and the first request; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// CommandTimeout bounds each request after that (a watch's stream
	// excepted); 0 means DefaultCommandTimeout.
	CommandTimeout time.Duration
	// Getenv reads the ETCDCTL_* variables; nil means os.Getenv.
	Getenv func(string) string
}

// DefaultCommandTimeout is etcdctl's default --command-timeout.
// DefaultDialTimeout is longer than etcdctl's 2 s: it covers the first
// read too, against an etcd that may be starting.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultCommandTimeout = 5 * time.Second
)

// The environment variables etcdctl reads, which devk honours too.
const (
	envEndpoints = "ETCDCTL_ENDPOINTS"
	envCACert    = "ETCDCTL_CACERT"
	envCert      = "ETCDCTL_CERT"
	envKey       = "ETCDCTL_KEY"
)

// Endpoint is a resolved connection: what will be used and where each
// part came from, for messages.
type Endpoint struct {
	Endpoints         []string
	CACert, Cert, Key string
	Prefix            string
	// Source says where the settings came from: "flags", "ETCDCTL_*",
	// `devk cluster "devk" (/root/.devk/clusters/devk)`, "kubeadm node (/etc/kubernetes)".
	Source string
}

// TLS reports whether the connection uses TLS.
func (e Endpoint) TLS() bool {
	for _, ep := range e.Endpoints {
		if strings.HasPrefix(ep, "https://") {
			return true
		}
	}
	return e.CACert != "" || e.Cert != ""
}

func (e Endpoint) String() string {
	s := strings.Join(e.Endpoints, ",")
	var files []string
	if e.CACert != "" {
		files = append(files, "cacert "+e.CACert)
	}
	if e.Cert != "" {
		files = append(files, "cert "+e.Cert)
	}
	if e.Key != "" {
		files = append(files, "key "+e.Key)
	}
	if len(files) > 0 {
		s += " (" + strings.Join(files, ", ") + ")"
	}
	return s + " from " + e.Source
}

// Resolve decides which etcd to use, without connecting. Each of
// endpoints, cacert, cert and key comes from the first of: ConnOptions,
// ETCDCTL_ENDPOINTS / ETCDCTL_CACERT / ETCDCTL_CERT / ETCDCTL_KEY, the devk
// cluster's layout, a kubeadm node's (/etc/kubernetes).
func (o ConnOptions) Resolve() (Endpoint, error) {
	e, sources := o.fromFlags()
	if o.fromEnv(&e) {
		sources = append(sources, "ETCDCTL_*")
	}
	e.defaultSchemes()
	if !e.complete() {
		found, err := o.discover()
		switch {
		case err != nil && len(e.Endpoints) > 0:
			// https endpoints without (all) certificates: let the TLS
			// handshake say what is missing
		case err != nil:
			return Endpoint{}, err
		default:
			e.fillFrom(found)
			sources = append(sources, found.Source)
		}
	}
	if e.Prefix == "" {
		e.Prefix = DefaultPrefix
	}
	e.Source = strings.Join(sources, " and ")
	if err := e.validate(); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// fromFlags is what the options say themselves.
func (o ConnOptions) fromFlags() (Endpoint, []string) {
	e := Endpoint{Endpoints: append([]string(nil), o.Endpoints...), CACert: o.CACert, Cert: o.Cert, Key: o.Key, Prefix: o.Prefix}
	if len(e.Endpoints) > 0 || e.CACert != "" || e.Cert != "" || e.Key != "" {
		return e, []string{"flags"}
	}
	return e, nil
}

// fromEnv fills what the flags left empty from the ETCDCTL_* variables,
// and reports whether any was used.
func (o ConnOptions) fromEnv(e *Endpoint) bool {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	used := false
	if len(e.Endpoints) == 0 {
		if v := getenv(envEndpoints); v != "" {
			e.Endpoints = splitList(v)
			used = true
		}
	}
	for _, f := range []struct {
		dst *string
		env string
	}{{&e.CACert, envCACert}, {&e.Cert, envCert}, {&e.Key, envKey}} {
		if *f.dst == "" {
			if v := getenv(f.env); v != "" {
				*f.dst = v
				used = true
			}
		}
	}
	return used
}

// defaultSchemes follows etcdctl: an endpoint without a scheme is https
// when TLS files are given, else http.
func (e *Endpoint) defaultSchemes() {
	for i, ep := range e.Endpoints {
		if !strings.Contains(ep, "://") {
			scheme := "http://"
			if e.CACert != "" || e.Cert != "" {
				scheme = "https://"
			}
			e.Endpoints[i] = scheme + ep
		}
	}
}

// complete reports whether nothing needs discovering: endpoints are known
// and are plain http, or come with every TLS file.
func (e Endpoint) complete() bool {
	if len(e.Endpoints) == 0 {
		return false
	}
	return !e.TLS() || (e.CACert != "" && e.Cert != "" && e.Key != "")
}

// fillFrom takes from a discovered endpoint what e lacks: its endpoints,
// its TLS files when e uses TLS (the client certificate and key as a
// pair: half of one is not a pair with half of another), its key prefix.
func (e *Endpoint) fillFrom(found Endpoint) {
	if len(e.Endpoints) == 0 {
		e.Endpoints = found.Endpoints
	}
	if e.TLS() {
		e.CACert = orElse(e.CACert, found.CACert)
		if e.Cert == "" && e.Key == "" {
			e.Cert, e.Key = found.Cert, found.Key
		}
	}
	e.Prefix = orElse(e.Prefix, found.Prefix)
}

// validate checks that every endpoint is a client URL.
func (e Endpoint) validate() error {
	for _, ep := range e.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("endpoint %q: use a client URL such as https://127.0.0.1:2379", ep)
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// discover finds the devk cluster's etcd, else (unless a cluster was named)
// a kubeadm node's.
func (o ConnOptions) discover() (Endpoint, error) {
	e, err := o.devkCluster()
	var missing *noClusterError
	if !errors.As(err, &missing) || o.ClusterSet {
		return e, err
	}
	if e, ok := o.kubeadmNode(); ok {
		return e, nil
	}
	missing.kubeadmCA = layout.Kubeadm(o.KubeadmDir).EtcdCACert()
	return Endpoint{}, missing
}

// devkCluster is the etcd of the devk cluster the options name, as its
// API server's manifest and PKI describe it.
func (o ConnOptions) devkCluster() (Endpoint, error) {
	cfg, paths, err := layout.Open(o.Home, o.Cluster)
	var nc *layout.NoClusterError
	switch {
	case errors.As(err, &nc):
		return Endpoint{}, &noClusterError{nc: nc}
	case err != nil:
		return Endpoint{}, fmt.Errorf("devk cluster %q: %w (or pass --endpoints)", orElse(o.Cluster, layout.DefaultName), err)
	}
	return endpointOf(paths.FirstNode().ControlPlane(cfg, cfg.FirstNode()).Etcd(), fmt.Sprintf("devk cluster %q (%s)", cfg.Name, paths.Dir)), nil
}

// kubeadmNode is the etcd of the kubeadm node whose files are in
// KubeadmDir, if its etcd CA is there.
func (o ConnOptions) kubeadmNode() (Endpoint, bool) {
	n := layout.Kubeadm(o.KubeadmDir)
	if _, err := os.Stat(n.EtcdCACert()); err != nil {
		return Endpoint{}, false
	}
	return endpointOf(n.Etcd(), fmt.Sprintf("kubeadm node (%s)", o.kubeadmDir())), true
}

func (o ConnOptions) kubeadmDir() string { return orElse(o.KubeadmDir, layout.KubeadmDir) }

func endpointOf(e layout.Etcd, source string) Endpoint {
	return Endpoint{Endpoints: e.Endpoints, CACert: e.CACert, Cert: e.Cert, Key: e.Key, Prefix: e.Prefix, Source: source}
}

// noClusterError is layout's error for a devk cluster that does not
// exist, said for `devk etcd` (whose flag is --cluster) with what to do;
// errors.Is(err, layout.ErrNoCluster) holds.
type noClusterError struct {
	nc *layout.NoClusterError
	// kubeadmCA is the etcd CA of the kubeadm node looked for instead,
	// when one was.
	kubeadmCA string
}

func (e *noClusterError) Error() string {
	others := "there are none"
	if len(e.nc.Others) > 0 {
		others = "there are: " + strings.Join(e.nc.Others, ", ") + "; pick one with --cluster"
	}
	missing := fmt.Sprintf("no devk cluster %q in %s (%s)", e.nc.Name, e.nc.Home, others)
	if e.kubeadmCA == "" {
		return fmt.Sprintf("%s: start it with `devk up --name %s`, or pass --endpoints", missing, e.nc.Name)
	}
	return fmt.Sprintf("no etcd to talk to: %s and no kubeadm node (%s is missing); start a cluster with `devk up`, or pass --endpoints (and --cacert, --cert, --key for TLS)", missing, e.kubeadmCA)
}

func (e *noClusterError) Unwrap() error { return e.nc }

func orElse(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
