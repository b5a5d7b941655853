package kube

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"golang.org/x/net/http/httpproxy"

	"github.com/devk/devk/internal/execx"
)

// With `sudo -E`, devk and the daemons it starts inherit the user's
// HTTPS_PROXY and HTTP_PROXY; traffic to a cluster (its nodes, the load
// balancer, the registry's forwarder on the bridge) must never go to
// that proxy, which cannot reach this machine's bridges. Two ways, one
// rule each: a daemon is told through NO_PROXY (NoProxyEnv, with the
// cluster's networks and names, layout.Config.NoProxy); devk's own
// clients (client-go's rest configs, the registry probe) go direct to
// any address on a network this machine is on (Proxy).

// proxyVars name a proxy, in the spellings Go's net/http reads.
var proxyVars = []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"}

// noProxyVars are the two spellings of NO_PROXY; Go reads the upper
// case first, curl and others the lower.
var noProxyVars = []string{"NO_PROXY", "no_proxy"}

// lookup is environ's value of the first of names set there.
func lookup(environ []string, names ...string) string {
	for _, n := range names {
		if v := execx.Getenv(environ, n); v != "" {
			return v
		}
	}
	return ""
}

// ProxySet says whether environ names a proxy.
func ProxySet(environ []string) bool {
	return slices.ContainsFunc(proxyVars, func(n string) bool { return lookup(environ, n) != "" })
}

// noProxy is environ's NO_PROXY (either spelling) followed by hosts,
// each once.
func noProxy(environ, hosts []string) string {
	var out []string
	for _, h := range slices.Concat(strings.Split(lookup(environ, noProxyVars...), ","), hosts) {
		if h = strings.TrimSpace(h); h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return strings.Join(out, ",")
}

// NoProxyEnv is what a daemon devk starts gets on top of environ so that
// its traffic to hosts (CIDRs, names, addresses) goes direct: NO_PROXY
// and no_proxy, each environ's own value followed by hosts. It is nil
// when environ names no proxy: then there is nothing to go around.
func NoProxyEnv(environ, hosts []string) []string {
	if !ProxySet(environ) {
		return nil
	}
	v := noProxy(environ, hosts)
	return []string{noProxyVars[0] + "=" + v, noProxyVars[1] + "=" + v}
}

// Proxy is the proxy of devk's own HTTP clients: the environment's (as
// http.ProxyFromEnvironment reads it, once a process), except that
// loopback and every network this machine has an address on (a devk
// cluster's bridge, a kubeadm node's own address) are reached directly.
// A transport asks at each request, so the machine's networks are not
// read at each: only when a request would go to the proxy are they read
// again (up makes a bridge as it goes).
func Proxy(req *http.Request) (*url.URL, error) {
	return envProxy().proxyFor(req.URL)
}

var envProxy = sync.OnceValue(func() *localDirect {
	return &localDirect{proxy: httpproxy.FromEnvironment().ProxyFunc()}
})

// localDirect is proxy but for this machine's networks.
type localDirect struct {
	proxy func(*url.URL) (*url.URL, error)
	mu    sync.Mutex
	// nets are this machine's networks as last read.
	nets []*net.IPNet
}

func (d *localDirect) proxyFor(u *url.URL) (*url.URL, error) {
	proxy, err := d.proxy(u)
	if proxy == nil || err != nil {
		return proxy, err
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && d.local(ip) {
		return nil, nil
	}
	return proxy, nil
}

// local says whether ip is on one of this machine's networks, reading
// them again when the last read had none that holds it.
func (d *localDirect) local(ip net.IP) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	holds := func() bool { return slices.ContainsFunc(d.nets, func(n *net.IPNet) bool { return n.Contains(ip) }) }
	if holds() {
		return true
	}
	d.nets = localNetworks()
	return holds()
}

// localNetworks are the networks of this machine's addresses (of the
// calling thread's network namespace).
func localNetworks() []*net.IPNet {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []*net.IPNet
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n)
		}
	}
	return out
}
