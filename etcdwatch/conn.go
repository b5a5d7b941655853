package etcdwatch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// tlsConfig loads the TLS files, naming the file that is wrong.
func (e Endpoint) tlsConfig() (*tls.Config, error) {
	if !e.TLS() {
		return nil, nil
	}
	if (e.Cert == "") != (e.Key == "") {
		return nil, fmt.Errorf("etcd client certificate and key go together: got cert %q and key %q", e.Cert, e.Key)
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
	if e.Cert != "" {
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
	}
	return cfg, nil
}

// maxRecvMsgSize bounds one response: a whole-keyspace historical watch
// can carry many events.
const maxRecvMsgSize = 256 << 20

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
		Endpoints:          e.Endpoints,
		TLS:                tlsCfg,
		DialTimeout:        timeout,
		Logger:             zap.NewNop(),
		Context:            ctx,
		MaxCallRecvMsgSize: maxRecvMsgSize,
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
