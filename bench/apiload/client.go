package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devk/devk/internal/kube"
)

// The object every request GETs. A GET of one object without a
// resourceVersion is read from etcd, a quorum read (the API server's
// watch cache serves a GET only when one is given), so each request goes
// load balancer → API server → etcd and back, and fails when that path
// does. A list of nodes with resourceVersion "" was the other candidate:
// since 1.34 it is served from the watch cache once etcd has confirmed
// the current revision (consistent lists from cache, GA), so etcd sees
// only that, and its response grows with the nodes; this object's stays
// one small ConfigMap. The controller-manager's root-ca-cert-publisher
// puts kube-root-ca.crt in every namespace soon after the cluster starts;
// until then each request fails with NotFound and -ready waits.
const (
	targetNamespace = "kube-system"
	targetName      = "kube-root-ca.crt"
)

// targetPath is the URL path of that GET (what the tests serve).
const targetPath = "/api/v1/namespaces/" + targetNamespace + "/configmaps/" + targetName

// With -write each request is a write instead: a merge patch of one
// annotation of the PodTemplate writeNamespace/writeName (which the bench
// creates), a resource no controller watches and that devk's audit
// policy logs with its bodies (RequestResponse), the costliest level.
const (
	writeNamespace = "default"
	writeName      = "apiload"
	writePath      = "/api/v1/namespaces/" + writeNamespace + "/podtemplates/" + writeName
)

// How a new connection is dialed: client-go's own dialer settings.
const (
	dialTimeout   = 30 * time.Second
	dialKeepAlive = 30 * time.Second
)

// client sends the requests of a run and counts what its transport does.
type client struct {
	cs      kubernetes.Interface
	server  string // the kubeconfig's server: the load balancer
	request string // what each request is, for the summary
	dialer  *countingDialer
	write   bool
	seq     atomic.Int64
	// plain, with -url, GETs the URL request names.
	plain *http.Client
	url   string
}

// newClient makes the clientset of o.mode from o.kubeconfig: client-go's
// own transport (HTTP/2, one connection reused) in shared mode; in fresh
// mode a transport that keeps no connection, with client-go's TLS
// settings and defaults. Either way every attempt client-go makes passes
// through attemptRecorder, and every connection through the dialer.
func newClient(o options) (*client, error) {
	d := &countingDialer{d: net.Dialer{Timeout: dialTimeout, KeepAlive: dialKeepAlive}}
	if o.url != "" {
		rt := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true} // no proxy: a node address is on this machine
		plain := &http.Client{Timeout: o.timeout, Transport: attemptRecorder{next: rt}}
		return &client{server: o.url, request: "GET " + o.url, dialer: d, plain: plain, url: o.url}, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("-kubeconfig %s: %w (give the cluster's admin.conf)", o.kubeconfig, err)
	}
	switch o.mode {
	case modeShared:
		// A Dial of its own also gives this clientset a transport of its
		// own rather than one from client-go's cache.
		cfg.Dial = d.DialContext
	case modeFresh:
		tlsCfg, err := rest.TLSConfigFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("-kubeconfig %s: its TLS settings: %w", o.kubeconfig, err)
		}
		cfg.Transport = utilnet.SetTransportDefaults(&http.Transport{
			TLSClientConfig:   tlsCfg,
			DialContext:       d.DialContext,
			DisableKeepAlives: true,
		})
		// now in the transport; client-go refuses a transport and TLS
		// settings both
		cfg.TLSClientConfig = rest.TLSClientConfig{}
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return attemptRecorder{next: rt} })
	unthrottled := func(c *rest.Config) {
		c.QPS = float32(qpsHeadroom * o.rate)
		c.Burst = inFlightFactor * o.rate
	}
	cs, err := kube.ClientForConfig(cfg, kube.WithTimeout(o.timeout), kube.WithoutWarnings(), unthrottled)
	if err != nil {
		return nil, fmt.Errorf("-kubeconfig %s: %w", o.kubeconfig, err)
	}
	if o.write {
		return &client{cs: cs, server: cfg.Host, request: "PATCH " + writePath, dialer: d, write: true}, nil
	}
	return &client{cs: cs, server: cfg.Host, request: "GET " + targetPath, dialer: d}, nil
}

// get sends one request (with -write, the patch); at records what the transport saw of it.
func (c *client) get(ctx context.Context, at *attempts) error {
	ctx = context.WithValue(ctx, attemptsKey{}, at)
	if c.plain != nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
		if err != nil {
			return err
		}
		resp, err := c.plain.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", c.url, resp.Status)
		}
		return nil
	}
	if c.write {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"apiload/seq":"%d"}}}`, c.seq.Add(1))
		_, err := c.cs.CoreV1().PodTemplates(writeNamespace).Patch(ctx, writeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	_, err := c.cs.CoreV1().ConfigMaps(targetNamespace).Get(ctx, targetName, metav1.GetOptions{})
	return err
}

// countingDialer dials as net.Dialer does and counts the connections
// made: one for a whole shared run that nothing broke, one per request in
// fresh mode.
type countingDialer struct {
	d net.Dialer
	n atomic.Int64
}

// DialContext is net.Dialer's, counted when it connects.
func (c *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := c.d.DialContext(ctx, network, addr)
	if err == nil {
		c.n.Add(1)
	}
	return conn, err
}

// attemptsKey is the context key of a request's *attempts.
type attemptsKey struct{}

// attempts is what the transport saw of one request. client-go sends a
// GET again after a connection reset, an EOF, a lost HTTP/2 connection
// (as a 500 with Retry-After: 1 of its own) or a 429/5xx response with
// Retry-After, up to 10 times, and returns only the last outcome: a
// request that succeeded on a retry is a success, but its earlier
// attempts are recorded here so that the summary shows them.
type attempts struct {
	mu       sync.Mutex
	outcomes []string // per attempt: "" for a response below 400, else its status or the error
	protos   []string // per attempt that got a response: its protocol
}

func (a *attempts) add(resp *http.Response, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err != nil:
		a.outcomes = append(a.outcomes, err.Error())
	case resp.StatusCode >= http.StatusBadRequest:
		a.outcomes = append(a.outcomes, "response "+resp.Status)
	default:
		a.outcomes = append(a.outcomes, "")
	}
	if resp != nil {
		a.protos = append(a.protos, resp.Proto)
	}
}

// retried are the outcomes of the attempts before the last: what
// client-go retried past.
func (a *attempts) retried() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.outcomes) < 2 {
		return nil
	}
	return append([]string(nil), a.outcomes[:len(a.outcomes)-1]...)
}

func (a *attempts) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.outcomes)
}

// attemptRecorder is the innermost wrapper of client-go's transport:
// each attempt of a request passes through it once. What the HTTP/2
// transport beneath retries on its own (a request the server refused
// unprocessed, after a GOAWAY, goes again on a new connection) is one
// attempt here; Connections shows the new connection.
type attemptRecorder struct{ next http.RoundTripper }

// RoundTrip sends the attempt and records its outcome in the request's
// attempts, when its context has one.
func (r attemptRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if at, ok := req.Context().Value(attemptsKey{}).(*attempts); ok {
		at.add(resp, err)
	}
	return resp, err
}
