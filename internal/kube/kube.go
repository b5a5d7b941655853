// Package kube is how devk talks to a cluster's API server and to the
// node's own health endpoints: one way to build a clientset from a
// kubeconfig, one way to write an object (server-side apply), one way to
// probe a loopback health endpoint, one way to ask the server's version.
package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// RequestTimeout bounds each API request: the API server may be the
	// very pod being swapped or started, and devk must never hang on it.
	RequestTimeout = 5 * time.Second
	// ProbeTimeout bounds one health probe.
	ProbeTimeout = 3 * time.Second
	// QPS and Burst let devk's bursts of bootstrap writes through
	// client-go's rate limiter.
	QPS, Burst = 50, 100
	// probeBodyLimit is how much of a failing probe's body the error shows.
	probeBodyLimit = 512
)

// Option changes how a Client talks to the server.
type Option func(*rest.Config)

// WithRate lets the client send qps requests a second (burst at once)
// instead of QPS and Burst: a job that makes objects by the thousand.
func WithRate(qps float32, burst int) Option {
	return func(c *rest.Config) { c.QPS, c.Burst = qps, burst }
}

// WithTimeout bounds each request by d instead of RequestTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *rest.Config) { c.Timeout = d }
}

// Client is a clientset for the kubeconfig file, each request bounded by
// RequestTimeout unless an option says otherwise.
func Client(kubeconfig string, opts ...Option) (*kubernetes.Clientset, error) {
	cfg, err := restConfig(kubeconfig, opts)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// InCluster is Client as a pod reaches its cluster: through the
// kubernetes Service, with its ServiceAccount's token and CA.
func InCluster(opts ...Option) (*kubernetes.Clientset, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(withLimits(cfg, opts))
}

// Dynamic is a dynamic client for the kubeconfig file, with Client's
// limits: for reading objects of any resource discovery lists.
func Dynamic(kubeconfig string, opts ...Option) (*dynamic.DynamicClient, error) {
	cfg, err := restConfig(kubeconfig, opts)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(cfg)
}

// WithHost sends the requests to host (https://IP:PORT) instead of the
// kubeconfig's server, with its credentials and CA: one API server of
// several, or a component's own secure port whose serving certificate
// the cluster CA signs.
func WithHost(host string) Option {
	return func(c *rest.Config) { c.Host = host }
}

// WithoutWarnings drops the server's deprecation warnings, which client-go
// otherwise prints to stderr: for a client that reads every resource.
func WithoutWarnings() Option {
	return func(c *rest.Config) { c.WarningHandler = rest.NoWarnings{} }
}

// ClientForConfig is Client for a connection made in memory rather than
// read from a kubeconfig file (an anonymous client of a joining node),
// with Client's limits. cfg is not changed.
func ClientForConfig(cfg *rest.Config, opts ...Option) (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(withLimits(rest.CopyConfig(cfg), opts))
}

// DynamicForConfig is Dynamic for a config already loaded.
func DynamicForConfig(cfg *rest.Config, opts ...Option) (*dynamic.DynamicClient, error) {
	return dynamic.NewForConfig(withLimits(rest.CopyConfig(cfg), opts))
}

func restConfig(kubeconfig string, opts []Option) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return withLimits(cfg, opts), nil
}

func withLimits(cfg *rest.Config, opts []Option) *rest.Config {
	cfg.Timeout = RequestTimeout
	cfg.QPS, cfg.Burst = QPS, Burst
	// Only when a proxy is set: a Proxy function makes client-go's
	// transport one per client instead of one shared.
	if cfg.Proxy == nil && ProxySet(os.Environ()) {
		cfg.Proxy = Proxy
	}
	for _, o := range opts {
		o(cfg)
	}
	return cfg
}

// FieldManager is devk's field manager in server-side applies.
const FieldManager = "devk"

// Applier is a typed client's Get and Apply: T is the object
// (*corev1.ConfigMap), AC its apply configuration.
type Applier[T metav1.Object, AC any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Apply(ctx context.Context, ac AC, opts metav1.ApplyOptions) (T, error)
}

// Apply server-side applies ac, the object called name, as FieldManager,
// taking over fields another manager set (devk's objects are devk's),
// and reports whether the object changed: it is new, or its
// resourceVersion moved (an apply that changes nothing leaves it).
func Apply[T metav1.Object, AC any](ctx context.Context, api Applier[T, AC], name string, ac AC) (bool, error) {
	before := ""
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		before = cur.GetResourceVersion()
	case !apierrors.IsNotFound(err):
		return false, err
	}
	out, err := api.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return false, err
	}
	return before == "" || out.GetResourceVersion() != before, nil
}

// insecureLoopback probes the node's own endpoints as the kubelet's
// probes do: the serving certificates are self-signed or signed by a CA
// the probe does not need, and the endpoint is this machine's.
var insecureLoopback = &http.Client{
	Timeout:   ProbeTimeout,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
}

// Probe GETs a health endpoint (http or https, on the node itself) and
// succeeds on 200 OK; otherwise the error names the URL, the status and
// the start of the body (which says what is not ready).
func Probe(ctx context.Context, url string) error {
	_, err := ProbeBody(ctx, url)
	return err
}

// ProbeIn is Probe from inside the network namespace at netns (a node's
// bind mount under /run/netns: its loopback is the node's own, where
// etcd's health endpoint is), or Probe itself when netns is empty.
func ProbeIn(ctx context.Context, netns, url string) error {
	if netns == "" {
		return Probe(ctx, url)
	}
	c := &http.Client{
		Timeout: ProbeTimeout,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialIn(ctx, netns, network, addr)
			}},
	}
	_, err := probe(ctx, c, url)
	return err
}

// dialIn connects to addr (an IP:port) from the network namespace at
// netns: a socket belongs to the namespace of the thread that made it,
// and keeps it.
func dialIn(ctx context.Context, netns, network, addr string) (conn net.Conn, err error) {
	err = InNetNS(netns, func() error {
		var d net.Dialer
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// InNetNS runs fn on a thread of its own inside the network namespace at
// netns (this process's own when netns is empty); what fn opens there
// (a socket, a listener) stays in that namespace. The thread goes back
// to its own namespace afterwards; one that cannot is never unlocked,
// so it ends with its goroutine.
func InNetNS(netns string, fn func() error) error {
	if netns == "" {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		left, err := inNetNSLocked(netns, fn)
		if left {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

func inNetNSLocked(netns string, fn func() error) (left bool, err error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return true, err
	}
	defer own.Close()
	target, err := os.Open(netns)
	if err != nil {
		return true, fmt.Errorf("network namespace %s: %w", netns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return true, fmt.Errorf("enter network namespace %s: %w", netns, err)
	}
	err = fn()
	left = unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil
	return left, err
}

// ProbeBody is Probe that returns the start of the body on 200 OK.
func ProbeBody(ctx context.Context, url string) ([]byte, error) {
	return probe(ctx, insecureLoopback, url)
}

func probe(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyLimit))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// EndpointVersion is the gitVersion that the API server at base
// (https://host:port, that one server, not a load balancer in front of
// several) reports on /version, which anyone may read.
func EndpointVersion(ctx context.Context, base string) (string, error) {
	v, err := EndpointVersionInfo(ctx, base)
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// EndpointVersionInfo is all that API server reports on /version: with
// its gitVersion, the version it emulates (compatibility versions).
func EndpointVersionInfo(ctx context.Context, base string) (apimachineryversion.Info, error) {
	var v apimachineryversion.Info
	body, err := ProbeBody(ctx, strings.TrimSuffix(base, "/")+"/version")
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("%s/version: %w", base, err)
	}
	return v, nil
}

// Emulates is the MAJOR.MINOR version v emulates, "" when it emulates
// none but its own.
func Emulates(v apimachineryversion.Info) string {
	if v.EmulationMinor == "" || (v.EmulationMajor == v.Major && v.EmulationMinor == v.Minor) {
		return ""
	}
	return v.EmulationMajor + "." + v.EmulationMinor
}

// buildInfo is the metric every Kubernetes component exposes with its
// version (component-base's kubernetes_build_info), whose git_version
// label MetricsVersion reads.
var buildInfo = regexp.MustCompile(`(?m)^kubernetes_build_info\{[^}]*\bgit_version="([^"]+)"`)

// BuildInfoVersion is the git_version of kubernetes_build_info in a
// component's /metrics.
func BuildInfoVersion(metrics []byte) (string, error) {
	m := buildInfo.FindSubmatch(metrics)
	if m == nil {
		return "", fmt.Errorf("no kubernetes_build_info with a git_version among its metrics")
	}
	return string(m[1]), nil
}

// MetricsVersion is the gitVersion the component serving at base
// (https://host:port) reports in its kubernetes_build_info metric, read
// with kubeconfig's credentials: the controller-manager's and the
// scheduler's secure ports serve no /version. With netns, base is asked
// from inside that network namespace (kubeadm's controllers, bound to a
// node's loopback), where the component serves its own self-signed
// certificate (kubeadm gives it none): the server is not checked, the
// client certificate still says who asks.
func MetricsVersion(ctx context.Context, kubeconfig, base, netns string, timeout time.Duration) (string, error) {
	opts := []Option{WithHost(base), WithTimeout(timeout)}
	if netns != "" {
		opts = append(opts, func(c *rest.Config) {
			c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialIn(ctx, netns, network, addr)
			}
			c.Insecure, c.CAData, c.CAFile = true, nil, ""
		})
	}
	cs, err := Client(kubeconfig, opts...)
	if err != nil {
		return "", err
	}
	metrics, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("%s/metrics: %w", base, err)
	}
	v, err := BuildInfoVersion(metrics)
	if err != nil {
		return "", fmt.Errorf("%s/metrics: %w", base, err)
	}
	return v, nil
}

// ServerVersion is the API server's gitVersion, through discovery.
func ServerVersion(cs kubernetes.Interface) (string, error) {
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// MirrorPodName is the name the kubelet gives the mirror pod of static
// pod pod on node nodeName.
func MirrorPodName(pod, nodeName string) string { return pod + "-" + nodeName }

// Transient says a request may succeed when made again because the API
// server, not the request, failed: it went away or restarts (a refused,
// reset or cut connection, a network timeout), or it answered that it
// cannot serve now (503, 504, 500, 429). A server whose certificate this
// client refuses, or a name that does not resolve, is no such failure:
// the same request fails the same way, so waiting only hides why.
func Transient(err error) bool {
	if final(err) {
		return false
	}
	var ne net.Error
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

// final says no retry changes err: this client refused the server's
// certificate (an unknown authority, another host's name, an expired or
// invalid certificate), or the server's host name does not resolve.
func final(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		dns      *net.DNSError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		(errors.As(err, &dns) && dns.IsNotFound)
}
