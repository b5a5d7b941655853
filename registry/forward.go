package registry

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/devk/devk/image"
)

// forwardDialTimeout bounds the connection to the registry behind a
// forwarder.
const forwardDialTimeout = 5 * time.Second

// ForwardOptions configure Forward.
type ForwardOptions struct {
	// Addr is host:port to listen on: a devk cluster's bridge address.
	Addr string
	// To is the registry relayed to; it must be on loopback.
	To string
	// Device, when set, is the only network device connections are
	// taken from (SO_BINDTODEVICE): the cluster's bridge. Linux takes a
	// packet for any of the host's addresses on any interface, so
	// without it a LAN neighbour routing the bridge's subnet via this
	// host reaches the forwarder.
	Device string
	// Allow is the network clients may come from (the cluster's node
	// subnet); the host's own addresses are always allowed. A connection
	// from anywhere else is closed unanswered.
	Allow *net.IPNet
	// Log receives a line per refused connection or request when set.
	Log *log.Logger
	// Ready is called with the address listened on once connections
	// are accepted.
	Ready func(addr string)
}

// Forward serves pulls (GET and HEAD) on o.Addr from the registry at
// o.To until ctx ends, and answers anything else 405 UNSUPPORTED: a
// devk node is a network namespace, which cannot reach the host's
// loopback; the cluster's forwarder on its bridge address lets the
// node's containerd pull from the registry on 127.0.0.1 by the same
// image names and digests, and nothing on the bridge can push through
// it.
func Forward(ctx context.Context, o ForwardOptions) error {
	host, _, err := net.SplitHostPort(o.To)
	if err != nil {
		return fmt.Errorf("--to %q: want HOST:PORT: %w", o.To, err)
	}
	if !image.IsLoopback(host) {
		return fmt.Errorf("--to %q: a forwarder relays to a registry on loopback only (127.0.0.1, ::1, localhost)", o.To)
	}
	logger := o.Log
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	lc := net.ListenConfig{Control: bindToDevice(o.Device)}
	ln, err := lc.Listen(ctx, "tcp", o.Addr)
	if err != nil {
		if o.Device != "" {
			return fmt.Errorf("listen on %s, device %s: %w", o.Addr, o.Device, err)
		}
		return fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	ln = &sourceFilter{Listener: ln, allow: o.Allow, log: logger}
	return serveUntilDone(ctx, pullOnly(o.To, logger), ln, logger, o.Ready, "registry forwarder on "+o.Addr)
}

// bindToDevice is a ListenConfig.Control binding the socket to device
// (none when empty).
func bindToDevice(device string) func(network, address string, c syscall.RawConn) error {
	if device == "" {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, device)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("bind to device %s: %w", device, serr)
		}
		return nil
	}
}

// pullOnly relays GET and HEAD to the registry at to, with no
// credentials, and refuses (and logs) every other method.
func pullOnly(to string, logger *log.Logger) http.Handler {
	target := &url.URL{Scheme: "http", Host: to}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization")
		},
		Transport: &http.Transport{
			Proxy:                 nil, // the registry is on loopback: never through a proxy
			DialContext:           (&net.Dialer{Timeout: forwardDialTimeout}).DialContext,
			ResponseHeaderTimeout: readHeaderTimeout,
			MaxIdleConnsPerHost:   16,
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			logger.Printf("refused %s %s from %s: the forwarder serves pulls only", req.Method, req.URL.Path, req.RemoteAddr)
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "UNSUPPORTED",
				fmt.Sprintf("the registry forwarder on a devk cluster's bridge serves pulls only (GET, HEAD), not %s: push to the registry on %s with devk", req.Method, to))
			return
		}
		proxy.ServeHTTP(w, req)
	})
}

// sourceFilter closes, unanswered, connections from outside allow and
// the host's own addresses.
type sourceFilter struct {
	net.Listener
	allow *net.IPNet
	log   *log.Logger
}

func (l *sourceFilter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ip := remoteIP(c); ip != nil && ((l.allow != nil && l.allow.Contains(ip)) || isLocalAddress(ip)) {
			return c, nil
		}
		l.log.Printf("refused a connection from %s: outside the cluster's node subnet %v and the host's addresses", c.RemoteAddr(), l.allow)
		c.Close()
	}
}

func remoteIP(c net.Conn) net.IP {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if v4 := a.IP.To4(); v4 != nil {
			return v4
		}
		return a.IP
	}
	return nil
}

// isLocalAddress reports whether ip is one of this host's addresses (in
// this network namespace), loopback included.
func isLocalAddress(ip net.IP) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
