package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// DefaultRegistryAddr is the embedded registry `devk registry serve` (and
// `devk up`) runs.
const DefaultRegistryAddr = "127.0.0.1:5000"

// How long devk waits for a registry. A registry that takes the
// connection and then never answers fails the command instead of hanging
// it.
const (
	// DefaultTimeout bounds the wait for response headers once a request
	// is sent, and the whole of a HEAD, a manifest fetch, a tag or a
	// catalog listing.
	DefaultTimeout = 30 * time.Second
	// DefaultPushTimeout bounds one image push, blobs and manifest: a
	// registry that stops reading an upload halfway is not waited for
	// longer than this.
	DefaultPushTimeout = 10 * time.Minute
)

// DefaultRegistry is $DEVK_REGISTRY, else DefaultRegistryAddr.
func DefaultRegistry() string {
	if r := os.Getenv("DEVK_REGISTRY"); r != "" {
		return r
	}
	return DefaultRegistryAddr
}

// RemoteOptions say how to reach registries.
type RemoteOptions struct {
	// Insecure allows plain HTTP to registries that are not on loopback
	// (loopback registries get it without asking). HTTPS certificates are
	// verified either way.
	Insecure bool
	// Keychain finds credentials; nil means docker's (config.json and
	// credential helpers), then devk's registry credential
	// ($DEVK_HOME/registry-credential) for a registry on loopback that the
	// running user serves (see CredentialKeychain).
	Keychain authn.Keychain
	// Transport, when set, replaces the default HTTP transport (tests);
	// Timeout then bounds only the calls as a whole, not each request.
	Transport http.RoundTripper
	// Timeout is how long to wait for a registry's answer; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// PushTimeout is how long one image push may take; zero means
	// DefaultPushTimeout.
	PushTimeout time.Duration
}

// Remote talks to one registry (the one images are pushed to) and pulls
// base images from any.
type Remote struct {
	// Addr is host[:port][/path prefix], as the user gave it.
	Addr string
	o    RemoteOptions
	tr   http.RoundTripper
	push *remote.Pusher
}

// NewRemote prepares a client for the registry at addr. An http:// in
// front asks for plain HTTP, which only a loopback registry gets without
// Insecure; https:// changes nothing.
func NewRemote(addr string, o RemoteOptions) (*Remote, error) {
	given := addr
	addr = strings.TrimSuffix(addr, "/")
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		switch addr = rest; strings.ToLower(scheme) {
		case "https":
		case "http":
			if host, _, _ := strings.Cut(rest, "/"); !o.Insecure && !IsLoopback(host) {
				return nil, fmt.Errorf("--registry / DEVK_REGISTRY %s: %w", given, errPlainHTTP)
			}
		default:
			return nil, fmt.Errorf("--registry %q: unknown scheme %s:// (use HOST[:PORT][/PREFIX], e.g. 127.0.0.1:5000)", given, scheme)
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("no registry given: pass --registry HOST[:PORT] or set DEVK_REGISTRY")
	}
	host, _, _ := strings.Cut(addr, "/")
	if _, err := name.NewRegistry(host, name.StrictValidation); err != nil {
		return nil, fmt.Errorf("--registry %q: %w (use HOST[:PORT][/PREFIX], e.g. 127.0.0.1:5000)", addr, err)
	}
	if o.Keychain == nil {
		o.Keychain = defaultKeychain()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.PushTimeout <= 0 {
		o.PushTimeout = DefaultPushTimeout
	}
	base := o.Transport
	if base == nil {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = o.Timeout
		t.TLSHandshakeTimeout = min(t.TLSHandshakeTimeout, o.Timeout)
		base = t
	}
	r := &Remote{Addr: addr, o: o, tr: &plainHTTPPolicy{next: base, insecure: o.Insecure}}
	var err error
	if r.push, err = remote.NewPusher(r.options()...); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Remote) options(extra ...remote.Option) []remote.Option {
	return append([]remote.Option{remote.WithAuthFromKeychain(r.o.Keychain), remote.WithTransport(r.tr)}, extra...)
}

// nameOptions allow plain HTTP for a loopback registry, or any with
// --insecure.
func (r *Remote) nameOptions(registryHost string) []name.Option {
	if r.o.Insecure || IsLoopback(registryHost) {
		return []name.Option{name.Insecure}
	}
	return nil
}

// Repository is <registry>/<image>.
func (r *Remote) Repository(image string) (name.Repository, error) {
	host, _, _ := strings.Cut(r.Addr, "/")
	repo, err := name.NewRepository(r.Addr+"/"+image, r.nameOptions(host)...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("repository %s/%s: %w", r.Addr, image, err)
	}
	return repo, nil
}

// ParseReference parses a reference to any registry with this client's
// plain-HTTP rules.
func (r *Remote) ParseReference(ref string) (name.Reference, error) {
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%q is not an image reference: %w", ref, err)
	}
	return name.ParseReference(ref, r.nameOptions(parsed.Context().RegistryStr())...)
}

// Push writes the image under ref: blobs the registry lacks first, the
// manifest last, so an interrupted push leaves nothing under the tag and
// running it again uploads only what is missing.
func (r *Remote) Push(ctx context.Context, ref name.Reference, img v1.Image) error {
	ctx, cancel := withTimeout(ctx, r.o.PushTimeout, "take the push")
	defer cancel()
	if err := r.push.Push(ctx, ref, img); err != nil {
		return r.explainFor(ctx, ref.Context().RegistryStr(), err)
	}
	return nil
}

// PushTagged pushes img to repository repo of r's registry under tag (a
// name for people) and returns the reference a runtime pulls it by:
// <registry>/<repo>@sha256:….
func (r *Remote) PushTagged(ctx context.Context, repo, tag string, img v1.Image) (string, error) {
	rp, err := r.Repository(repo)
	if err != nil {
		return "", err
	}
	if err := r.Push(ctx, rp.Tag(tag), img); err != nil {
		return "", err
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return rp.Name() + "@" + d.String(), nil
}

// Head is the descriptor the registry has for ref; ErrNotFound (wrapped)
// when it has none.
func (r *Remote) Head(ctx context.Context, ref name.Reference) (*v1.Descriptor, error) {
	ctx, cancel := withTimeout(ctx, r.o.Timeout, "answer")
	defer cancel()
	d, err := remote.Head(ref, r.options(remote.WithContext(ctx))...)
	if err != nil {
		if IsNotFound(err) {
			return nil, fmt.Errorf("%s: %w", ref, ErrNotFound)
		}
		return nil, r.explainFor(ctx, ref.Context().RegistryStr(), err)
	}
	return d, nil
}

// Tag points tag at the manifest (image or index) the registry has
// under from, in from's repository or another of the same registry:
// nothing is uploaded but the manifest.
func (r *Remote) Tag(ctx context.Context, from name.Reference, tag name.Tag) error {
	ctx, cancel := withTimeout(ctx, r.o.PushTimeout, "take the push")
	defer cancel()
	desc, err := remote.Get(from, r.options(remote.WithContext(ctx))...)
	if err != nil {
		if IsNotFound(err) {
			return fmt.Errorf("%s: %w", from, ErrNotFound)
		}
		return r.explainFor(ctx, from.Context().RegistryStr(), err)
	}
	if err := remote.Tag(tag, desc, r.options(remote.WithContext(ctx))...); err != nil {
		return r.explainFor(ctx, tag.RegistryStr(), err)
	}
	return nil
}

// Image pulls the image's manifest and config (layers lazily) for the
// platform, choosing from an index when ref names one.
func (r *Remote) Image(ctx context.Context, ref string, plat v1.Platform) (v1.Image, error) {
	parsed, err := r.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	// The image reads its layers later, with the context it is given
	// now: the time limit must end when this call returns, leaving the
	// context alive (until ctx ends).
	ctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(r.o.Timeout, func() { cancel(&timeoutError{after: r.o.Timeout, what: "answer"}) })
	img, err := remote.Image(parsed, r.options(remote.WithContext(ctx), remote.WithPlatform(plat))...)
	if !timer.Stop() && err == nil {
		err = context.Cause(ctx) // in time, but its layers can no longer be read
	}
	if err != nil {
		err = r.explainFor(ctx, parsed.Context().RegistryStr(), err)
		cancel(err)
		return nil, err
	}
	return img, nil
}

// Catalog lists the registry's repositories (without the path prefix).
func (r *Remote) Catalog(ctx context.Context) ([]string, error) {
	host, _, _ := strings.Cut(r.Addr, "/")
	reg, err := name.NewRegistry(host, r.nameOptions(host)...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx, r.o.Timeout, "answer")
	defer cancel()
	repos, err := remote.Catalog(ctx, reg, r.options()...)
	if err != nil {
		return nil, r.explainFor(ctx, r.Addr, err)
	}
	return repos, nil
}

// Tags lists a repository's tags.
func (r *Remote) Tags(ctx context.Context, repo name.Repository) ([]string, error) {
	ctx, cancel := withTimeout(ctx, r.o.Timeout, "answer")
	defer cancel()
	tags, err := remote.List(repo, r.options(remote.WithContext(ctx))...)
	if err != nil {
		if IsNotFound(err) {
			return nil, nil
		}
		return nil, r.explainFor(ctx, repo.RegistryStr(), err)
	}
	return tags, nil
}

// ErrTimeout is a registry that did not answer, or take a push, in time.
var ErrTimeout = errors.New("registry timed out")

// timeoutError is the cause of a call's context ending at its limit.
type timeoutError struct {
	after time.Duration
	what  string // "answer", "take the push"
}

func (e *timeoutError) Error() string        { return fmt.Sprintf("did not %s within %s", e.what, e.after) }
func (e *timeoutError) Is(target error) bool { return target == ErrTimeout }

func (e *timeoutError) explain(host string, err error) error {
	return &explained{
		err: fmt.Errorf("%w: %w", e, err),
		msg: fmt.Sprintf("registry %s %s: is it overloaded or stuck? check it, or pass another --registry / DEVK_REGISTRY", host, e),
	}
}

// withTimeout bounds one registry call; explainFor tells its expiry from
// the caller's context ending.
func withTimeout(ctx context.Context, d time.Duration, what string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, &timeoutError{after: d, what: what})
}

// ErrNotFound is a manifest or repository the registry does not have.
var ErrNotFound = errors.New("not in the registry")

// IsNotFound reports a registry's 404 (unknown manifest, name or blob).
func IsNotFound(err error) bool {
	if errors.Is(err, ErrNotFound) {
		return true
	}
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// explainFor says what a failed call to the registry at addr, made with
// ctx, means and what to do.
func (r *Remote) explainFor(ctx context.Context, addr string, err error) error {
	host, _, _ := strings.Cut(addr, "/")
	var te *transport.Error
	var tooLong *timeoutError
	var netErr net.Error
	switch {
	case errors.As(context.Cause(ctx), &tooLong):
		return tooLong.explain(host, err)
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
		return err // the caller's context ended
	case errors.As(err, &netErr) && netErr.Timeout():
		// The transport's wait for response headers, a TLS handshake or
		// a dial (net/http's header timeout also says it Is
		// context.DeadlineExceeded, though no context ended).
		return (&timeoutError{after: r.o.Timeout, what: "answer"}).explain(host, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		// go-containerregistry's own text repeats the refusal per
		// scheme tried; the cause stays reachable through Unwrap.
		if IsLoopback(host) {
			return &explained{err: err, msg: fmt.Sprintf("no registry is listening on %s (connection refused): start one with `devk registry serve --addr %s` (or `devk up`), or pass --registry / DEVK_REGISTRY", host, host)}
		}
		return &explained{err: err, msg: fmt.Sprintf("registry %s refused the connection: is it running? pass another with --registry / DEVK_REGISTRY", host)}
	case errors.Is(err, errPlainHTTP):
		return fmt.Errorf("registry %s: %w", host, err)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("registry %s speaks plain HTTP: pass --insecure to allow it: %w", host, err)
	case errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) && IsLoopback(host):
		// devk's own registry says what to do in its message.
		return fmt.Errorf("registry %s refused the request (HTTP %d): %w", host, te.StatusCode, err)
	case errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden):
		return fmt.Errorf("registry %s refused the credentials (HTTP %d): log in (docker login / crane auth login %s): %w", host, te.StatusCode, host, err)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return fmt.Errorf("registry host %s not found: check the name: %w", host, err)
	}
	return fmt.Errorf("registry %s: %w", host, err)
}

// explained is an error whose message replaces its cause's (still
// reachable with errors.Is and errors.As).
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// IsLoopback reports whether a registry host[:port] is on this machine's
// loopback interface.
func IsLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var errPlainHTTP = errors.New("refusing plain HTTP to a registry that is not on loopback: pass --insecure to allow it")

// plainHTTPPolicy lets plain HTTP through only to loopback, or anywhere
// with --insecure. go-containerregistry would also fall back to HTTP for
// private (RFC 1918) addresses, which devk does not do unasked.
type plainHTTPPolicy struct {
	next     http.RoundTripper
	insecure bool
}

func (p *plainHTTPPolicy) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !p.insecure && !IsLoopback(req.URL.Host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errPlainHTTP
	}
	return p.next.RoundTrip(req)
}
