package etcdwatch

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultCluster is the devk cluster looked for when none is named.
const DefaultCluster = "devk"

// kubeadmDir is where a kubeadm control-plane node keeps its certificates.
const kubeadmDir = "/etc/kubernetes"

// ConnOptions say which etcd to talk to. Empty fields are filled from the
// ETCDCTL_* environment variables, then from the devk cluster's or the
// kubeadm node's PKI.
type ConnOptions struct {
	// Endpoints are client URLs (https://127.0.0.1:2379). Plain http
	// endpoints are used without TLS.
	Endpoints []string
	// CACert, Cert and Key are PEM files for TLS.
	CACert, Cert, Key string
	// Cluster names the devk cluster (default "devk"); ClusterSet says the
	// user named it, so that a missing cluster is an error rather than a
	// reason to look for a kubeadm node.
	Cluster    string
	ClusterSet bool
	// Home is $DEVK_HOME; empty means $DEVK_HOME, else ~/.devk.
	Home string
	// KubeadmDir is /etc/kubernetes unless a test says otherwise.
	KubeadmDir string
	// Prefix is the API server's --etcd-prefix; empty means the one the
	// cluster's API server manifest names, else /registry.
	Prefix string
	// DialTimeout bounds connecting and the first request; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// CommandTimeout bounds each request after that (a watch's stream
	// excepted); 0 means DefaultCommandTimeout.
	CommandTimeout time.Duration
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// DefaultCommandTimeout is etcdctl's default --command-timeout.
// DefaultDialTimeout is longer than etcdctl's 2 s: it covers the first
// read too, against an etcd that may be starting.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultCommandTimeout = 5 * time.Second
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
// cluster's directory, a kubeadm node's /etc/kubernetes.
func (o ConnOptions) Resolve() (Endpoint, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	e := Endpoint{Endpoints: append([]string(nil), o.Endpoints...), CACert: o.CACert, Cert: o.Cert, Key: o.Key, Prefix: o.Prefix}
	var sources []string
	if len(e.Endpoints) > 0 || e.CACert != "" || e.Cert != "" || e.Key != "" {
		sources = append(sources, "flags")
	}
	fromEnv := false
	if len(e.Endpoints) == 0 {
		if v := getenv("ETCDCTL_ENDPOINTS"); v != "" {
			e.Endpoints = splitList(v)
			fromEnv = true
		}
	}
	for _, f := range []struct {
		dst *string
		env string
	}{{&e.CACert, "ETCDCTL_CACERT"}, {&e.Cert, "ETCDCTL_CERT"}, {&e.Key, "ETCDCTL_KEY"}} {
		if *f.dst == "" {
			if v := getenv(f.env); v != "" {
				*f.dst = v
				fromEnv = true
			}
		}
	}
	if fromEnv {
		sources = append(sources, "ETCDCTL_*")
	}
	for i, ep := range e.Endpoints {
		if !strings.Contains(ep, "://") {
			// etcdctl's convention: no scheme means https when TLS files
			// are given, else http
			scheme := "http://"
			if e.CACert != "" || e.Cert != "" {
				scheme = "https://"
			}
			e.Endpoints[i] = scheme + ep
		}
	}

	explicitPlain := len(e.Endpoints) > 0 && !e.TLS()
	complete := len(e.Endpoints) > 0 && (explicitPlain || (e.CACert != "" && e.Cert != "" && e.Key != ""))
	if !complete {
		found, err := o.discover()
		if err != nil {
			if len(e.Endpoints) > 0 {
				// https endpoints without (all) certificates: let the
				// TLS handshake say what is missing
				e.Source = strings.Join(sources, " and ")
				return e, nil
			}
			return Endpoint{}, err
		}
		if len(e.Endpoints) == 0 {
			e.Endpoints = found.Endpoints
		}
		if e.TLS() {
			if e.CACert == "" {
				e.CACert = found.CACert
			}
			if e.Cert == "" {
				e.Cert = found.Cert
			}
			if e.Key == "" {
				e.Key = found.Key
			}
		}
		if e.Prefix == "" {
			e.Prefix = found.Prefix
		}
		sources = append(sources, found.Source)
	}
	if e.Prefix == "" {
		e.Prefix = DefaultPrefix
	}
	e.Source = strings.Join(sources, " and ")
	for _, ep := range e.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Endpoint{}, fmt.Errorf("endpoint %q: use a client URL such as https://127.0.0.1:2379", ep)
		}
	}
	return e, nil
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
	name := o.Cluster
	if name == "" {
		name = DefaultCluster
	}
	home, err := devkHome(o.Home, o.Getenv)
	if err != nil {
		return Endpoint{}, err
	}
	dir := filepath.Join(home, "clusters", name)
	ca := filepath.Join(dir, "pki", "etcd", "ca.crt")
	if _, err := os.Stat(ca); err == nil {
		e := Endpoint{
			CACert: ca,
			Cert:   filepath.Join(dir, "pki", "apiserver-etcd-client.crt"),
			Key:    filepath.Join(dir, "pki", "apiserver-etcd-client.key"),
			Source: fmt.Sprintf("devk cluster %q (%s)", name, dir),
		}
		flags := apiserverEtcdFlags(filepath.Join(dir, "manifests", "kube-apiserver.yaml"))
		e.Endpoints = splitList(flags["etcd-servers"])
		e.Prefix = flags["etcd-prefix"]
		if len(e.Endpoints) == 0 {
			e.Endpoints = []string{clusterJSONEndpoint(filepath.Join(dir, "cluster.json"))}
		}
		return e, nil
	}
	if o.ClusterSet {
		return Endpoint{}, fmt.Errorf("no devk cluster %q: %s does not exist; start it with `devk up --name %s`, or pass --endpoints", name, ca, name)
	}
	kdir := o.KubeadmDir
	if kdir == "" {
		kdir = kubeadmDir
	}
	kca := filepath.Join(kdir, "pki", "etcd", "ca.crt")
	if _, err := os.Stat(kca); err == nil {
		flags := apiserverEtcdFlags(filepath.Join(kdir, "manifests", "kube-apiserver.yaml"))
		e := Endpoint{
			Endpoints: splitList(flags["etcd-servers"]),
			CACert:    orElse(flags["etcd-cafile"], kca),
			Cert:      orElse(flags["etcd-certfile"], filepath.Join(kdir, "pki", "apiserver-etcd-client.crt")),
			Key:       orElse(flags["etcd-keyfile"], filepath.Join(kdir, "pki", "apiserver-etcd-client.key")),
			Prefix:    flags["etcd-prefix"],
			Source:    fmt.Sprintf("kubeadm node (%s)", kdir),
		}
		if len(e.Endpoints) == 0 {
			e.Endpoints = []string{"https://127.0.0.1:2379"}
		}
		return e, nil
	}
	return Endpoint{}, fmt.Errorf("no etcd to talk to: no devk cluster %q (%s is missing) and no kubeadm node (%s is missing); start a cluster with `devk up`, or pass --endpoints (and --cacert, --cert, --key for TLS)", name, ca, kca)
}

func orElse(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func devkHome(home string, getenv func(string) string) (string, error) {
	if home != "" {
		return home, nil
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if h := getenv("DEVK_HOME"); h != "" {
		return h, nil
	}
	uh, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory to find ~/.devk in: set DEVK_HOME or pass --endpoints: %w", err)
	}
	return filepath.Join(uh, ".devk"), nil
}

// apiserverEtcdFlags reads the --etcd-* flags of a kube-apiserver static
// pod manifest: the API server's own view of its etcd. A missing or odd
// manifest gives no flags.
func apiserverEtcdFlags(path string) map[string]string {
	flags := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return flags
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "- ")
		line = strings.Trim(line, `"'`)
		name, val, ok := strings.Cut(strings.TrimPrefix(line, "--"), "=")
		if !ok || !strings.HasPrefix(line, "--etcd-") {
			continue
		}
		flags[name] = strings.Trim(val, `"'`)
	}
	return flags
}

// clusterJSONEndpoint reads the etcd client address from a devk cluster's
// cluster.json (advertiseIP, ports.etcdClient); kubeadm's default when
// absent.
func clusterJSONEndpoint(path string) string {
	var c struct {
		AdvertiseIP string `json:"advertiseIP"`
		Ports       struct {
			EtcdClient int `json:"etcdClient"`
		} `json:"ports"`
	}
	ip, port := "127.0.0.1", 2379
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &c) == nil {
		if c.AdvertiseIP != "" {
			ip = c.AdvertiseIP
		}
		if c.Ports.EtcdClient != 0 {
			port = c.Ports.EtcdClient
		}
	}
	return "https://" + net.JoinHostPort(ip, strconv.Itoa(port))
}

// tlsConfig loads the TLS files, naming the file that is wrong.
func (e Endpoint) tlsConfig() (*tls.Config, error) {
	if !e.TLS() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.CACert != "" {
		pem, err := os.ReadFile(e.CACert)
		if err != nil {
			return nil, fmt.Errorf("read etcd CA %s: %w (pass --cacert)", e.CACert, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA %s holds no PEM certificate: pass the etcd CA with --cacert", e.CACert)
		}
		cfg.RootCAs = pool
	}
	switch {
	case e.Cert != "" && e.Key != "":
		pair, err := tls.LoadX509KeyPair(e.Cert, e.Key)
		if err != nil {
			return nil, fmt.Errorf("load etcd client certificate %s and key %s: %w (pass --cert and --key)", e.Cert, e.Key, err)
		}
		if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
			if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
				return nil, fmt.Errorf("etcd client certificate %s is valid only from %s to %s: renew it (devk up renews a devk cluster's certificates)", e.Cert, leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
			}
		}
		cfg.Certificates = []tls.Certificate{pair}
	case e.Cert != "" || e.Key != "":
		return nil, fmt.Errorf("etcd client certificate and key go together: got cert %q and key %q", e.Cert, e.Key)
	}
	return cfg, nil
}

// Client is a connected etcd client with what it was resolved from.
// Each of its reads is bounded by CommandTimeout.
type Client struct {
	*clientv3.Client
	Endpoint Endpoint
	// Revision is the store's revision when the connection was checked.
	Revision int64
	// CommandTimeout bounds each request.
	CommandTimeout time.Duration
}

// Connect resolves and connects, then checks the connection with one
// cheap read, so that a wrong address or certificate is reported here,
// naming the address and files used.
func Connect(ctx context.Context, o ConnOptions) (*Client, error) {
	e, err := o.Resolve()
	if err != nil {
		return nil, err
	}
	cli, err := connectEndpoint(ctx, e, durationOr(o.DialTimeout, DefaultDialTimeout))
	if err != nil {
		return nil, err
	}
	cli.CommandTimeout = durationOr(o.CommandTimeout, DefaultCommandTimeout)
	cli.KV = boundedKV{KV: cli.KV, timeout: cli.CommandTimeout, endpoints: strings.Join(e.Endpoints, ",")}
	return cli, nil
}

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// boundedKV gives each read its own deadline: an etcd that stops
// answering once connected fails the command instead of hanging it. devk
// only reads, all through Get.
type boundedKV struct {
	clientv3.KV
	timeout   time.Duration
	endpoints string
}

func (k boundedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	resp, err := k.KV.Get(rctx, key, opts...)
	return resp, requestTimeout(ctx, rctx, k.endpoints, k.timeout, err)
}

// bounded runs one request that is not a read (a watch progress request)
// under the command timeout.
func (c *Client) bounded(ctx context.Context, request func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, c.CommandTimeout)
	defer cancel()
	return requestTimeout(ctx, rctx, strings.Join(c.Endpoint.Endpoints, ","), c.CommandTimeout, request(rctx))
}

// openWatch starts a watch. etcd's client returns one only once etcd has
// accepted it, so opening it is a request like any other and is bounded
// by the command timeout; the stream then runs until ctx ends or stop is
// called.
func (c *Client) openWatch(ctx context.Context, key string, opts ...clientv3.OpOption) (wch clientv3.WatchChan, stop context.CancelFunc, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	rctx, rcancel := context.WithTimeout(ctx, c.CommandTimeout)
	defer rcancel()
	stopOpening := context.AfterFunc(rctx, cancel)
	wch = c.Watch(wctx, key, opts...)
	if !stopOpening() {
		cancel()
		return nil, nil, requestTimeout(ctx, rctx, strings.Join(c.Endpoint.Endpoints, ","), c.CommandTimeout, rctx.Err())
	}
	return wch, cancel, nil
}

// requestTimeout explains err when it is the request's own deadline
// (rctx's, not the caller's ctx's) that ran out.
func requestTimeout(ctx, rctx context.Context, endpoints string, timeout time.Duration, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("etcd %s did not answer within --command-timeout %s (%w): check that it is running and healthy, or raise --command-timeout", endpoints, timeout, err)
}

func connectEndpoint(ctx context.Context, e Endpoint, timeout time.Duration) (*Client, error) {
	tlsCfg, err := e.tlsConfig()
	if err != nil {
		return nil, err
	}
	if problem := preflight(e, tlsCfg, timeout); problem != "" {
		return nil, fmt.Errorf("etcd %s: %s", e, problem)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   e.Endpoints,
		TLS:         tlsCfg,
		DialTimeout: timeout,
		Logger:      zap.NewNop(),
		Context:     ctx,
		// a whole-keyspace historical watch can carry many events
		MaxCallRecvMsgSize: 256 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", e, err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := cli.Get(cctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("etcd %s did not answer: %s", e, diagnose(e, tlsCfg, timeout, err))
	}
	return &Client{Client: cli, Endpoint: e, Revision: resp.Header.Revision}, nil
}

// preflight checks, before gRPC gets involved, that some endpoint
// accepts a TCP connection and our TLS handshake: gRPC would only say
// "deadline exceeded" after the dial timeout. It returns "" when one
// endpoint looks fine, else what is wrong with the first.
func preflight(e Endpoint, tlsCfg *tls.Config, timeout time.Duration) string {
	first := ""
	for _, ep := range e.Endpoints {
		problem := checkEndpoint(ep, e, tlsCfg, timeout)
		if problem == "" {
			return ""
		}
		if first == "" {
			first = problem
		}
	}
	return first
}

// diagnose explains a failed first request: the endpoint checks again,
// then a TLS server behind an http:// endpoint, then the RPC error.
func diagnose(e Endpoint, tlsCfg *tls.Config, timeout time.Duration, rpcErr error) string {
	if problem := preflight(e, tlsCfg, timeout); problem != "" {
		return problem
	}
	for _, ep := range e.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "http" {
			continue
		}
		conn, err := net.DialTimeout("tcp", u.Host, timeout)
		if err != nil {
			continue
		}
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) // only asks "is this TLS?"
		tc.SetDeadline(time.Now().Add(timeout))
		err = tc.Handshake()
		tc.Close()
		if err == nil {
			return fmt.Sprintf("%s speaks TLS: use https://%s with --cacert, --cert and --key", u.Host, u.Host)
		}
	}
	return fmt.Sprintf("%v: check that the address is etcd's client port and that etcd is healthy", rpcErr)
}

// http2Hello is the HTTP/2 client connection preface followed by an empty
// SETTINGS frame.
const http2Hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// checkEndpoint dials one endpoint (and shakes hands for https) and says
// what is wrong, or "".
func checkEndpoint(ep string, e Endpoint, tlsCfg *tls.Config, timeout time.Duration) string {
	u, err := url.Parse(ep)
	if err != nil {
		return fmt.Sprintf("endpoint %q: %v", ep, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, timeout)
	if err != nil {
		return fmt.Sprintf("cannot reach %s: %v; is etcd running (devk up, or `crictl ps` on the node)? Pass --endpoints if it listens elsewhere", u.Host, err)
	}
	if u.Scheme != "https" || tlsCfg == nil {
		conn.Close()
		return ""
	}
	cfg := tlsCfg.Clone()
	cfg.ServerName = u.Hostname()
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(conn, cfg)
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(timeout))
	err = tc.Handshake()
	if err == nil {
		// with TLS 1.3 the server judges the client certificate after
		// the handshake, so a rejection only shows on a read. Say hello in
		// HTTP/2 (preface and an empty SETTINGS frame): an accepting
		// server answers at once with its own SETTINGS.
		if _, err = tc.Write([]byte(http2Hello)); err == nil {
			_, err = tc.Read(make([]byte, 1))
		}
		var ne net.Error
		if errors.Is(err, io.EOF) || (errors.As(err, &ne) && ne.Timeout()) {
			err = nil // not a TLS verdict: let gRPC have its say
		}
	}
	if err == nil {
		return ""
	}
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	msg := err.Error()
	switch {
	case errors.As(err, &unknownAuth):
		return fmt.Sprintf("TLS to %s: the server's certificate is not signed by the CA in %s: pass the etcd CA (pki/etcd/ca.crt) with --cacert", u.Host, orElse(e.CACert, "the system pool"))
	case errors.As(err, &hostErr):
		return fmt.Sprintf("TLS to %s: %v: use an endpoint address the server certificate names", u.Host, err)
	case errors.As(err, &certInvalid):
		return fmt.Sprintf("TLS to %s: the server's certificate is not valid: %v", u.Host, err)
	case strings.Contains(msg, "certificate required") || (e.Cert == "" && strings.Contains(msg, "bad certificate")):
		return fmt.Sprintf("TLS to %s: etcd wants a client certificate: pass --cert and --key (the API server's pki/apiserver-etcd-client.crt and .key)", u.Host)
	case strings.Contains(msg, "bad certificate") || strings.Contains(msg, "unknown certificate authority") || strings.Contains(msg, "certificate"):
		return fmt.Sprintf("TLS to %s: etcd rejected the client certificate %s (%v): pass one signed by etcd's CA, such as pki/apiserver-etcd-client.crt", u.Host, e.Cert, err)
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Sprintf("%s does not speak TLS: use http://%s", u.Host, u.Host)
	default:
		return fmt.Sprintf("TLS to %s: %v: check --cacert %s, --cert %s, --key %s", u.Host, err, e.CACert, e.Cert, e.Key)
	}
}
