package kube

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpproxy"
)

func TestNoProxyEnv(t *testing.T) {
	hosts := []string{"10.250.0.0/24", "10.244.0.0/16", "devk-control-plane", "10.250.0.2"}
	if env := NoProxyEnv([]string{"PATH=/bin", "NO_PROXY=corp.example"}, hosts); env != nil {
		t.Errorf("no proxy set, yet NoProxyEnv = %v; want nothing", env)
	}
	for _, tc := range []struct {
		name    string
		environ []string
		want    string
	}{
		{"upper case", []string{"HTTPS_PROXY=http://proxy:3128", "NO_PROXY=corp.example, 10.250.0.0/24"},
			"corp.example,10.250.0.0/24,10.244.0.0/16,devk-control-plane,10.250.0.2"},
		{"lower case", []string{"http_proxy=http://proxy:3128", "no_proxy=.corp.example"},
			".corp.example,10.250.0.0/24,10.244.0.0/16,devk-control-plane,10.250.0.2"},
		{"none before", []string{"HTTP_PROXY=http://proxy:3128"}, "10.250.0.0/24,10.244.0.0/16,devk-control-plane,10.250.0.2"},
		{"the last one counts", []string{"HTTPS_PROXY=http://proxy:3128", "NO_PROXY=old", "NO_PROXY=new"}, "new,10.250.0.0/24,10.244.0.0/16,devk-control-plane,10.250.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NoProxyEnv(tc.environ, hosts)
			if want := []string{"NO_PROXY=" + tc.want, "no_proxy=" + tc.want}; !slices.Equal(got, want) {
				t.Errorf("NoProxyEnv = %q; want %q", got, want)
			}
		})
	}
}

// testProxy is a proxy the tests' requests are never sent to.
const testProxy = "http://proxy.invalid:3128"

// decide is d's answer for rawURL as a string ("" for direct).
func decide(t *testing.T, d *localDirect, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.proxyFor(u)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		return ""
	}
	return got.String()
}

// TestProxy: with a proxy set, devk's clients go direct to loopback and
// to every network this machine has an address on, and through the
// proxy elsewhere. Only the decision is tested: nothing is dialled.
func TestProxy(t *testing.T) {
	d := &localDirect{proxy: (&httpproxy.Config{HTTPSProxy: testProxy, HTTPProxy: testProxy}).ProxyFunc()}
	var local net.IP
	for _, n := range localNetworks() {
		if !n.IP.IsLoopback() && n.IP.To4() != nil {
			local = n.IP
		}
	}
	cases := map[string]string{
		"https://127.0.0.1:6443/readyz": "",
		"http://localhost:5000/v2/":     "",
	}
	if local != nil {
		// An address of this machine's, as a devk node's is on the
		// bridge's network.
		cases["https://"+net.JoinHostPort(local.String(), "6443")+"/"] = ""
	}
	// The documentation networks: one this machine is not on goes
	// through the proxy, one it is on (a test machine may be) does not.
	for _, ip := range []string{"192.0.2.77", "198.51.100.7", "203.0.113.7"} {
		want := testProxy
		for _, n := range localNetworks() {
			if n.Contains(net.ParseIP(ip)) {
				want = ""
			}
		}
		cases["https://"+ip+":6443/"] = want
	}
	for u, want := range cases {
		if got := decide(t, d, u); got != want {
			t.Errorf("proxy for %s = %q; want %q (\"\" is direct)", u, got, want)
		}
	}
}

// TestProxyNewNetwork: a network that appears after the first request
// (the bridge up makes as it goes) is reached directly from then on;
// one already known is not read again at each request. In a network
// namespace of the test's own, whose addresses are the machine's to
// localNetworks there.
func TestProxyNewNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("making a network namespace needs root: run the tests as root, as CI does")
	}
	name := fmt.Sprintf("devk-proxytest-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	d := &localDirect{proxy: (&httpproxy.Config{HTTPSProxy: testProxy}).ProxyFunc()}
	const node = "https://192.0.2.2:6443/"
	in := func(want string) {
		t.Helper()
		var got string
		if err := InNetNS(filepath.Join("/run/netns", name), func() error { got = decide(t, d, node); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("proxy for %s = %q; want %q (\"\" is direct)", node, got, want)
		}
	}
	in(testProxy)
	ip("-n", name, "link", "add", "br0", "type", "bridge")
	ip("-n", name, "addr", "add", "192.0.2.1/24", "dev", "br0")
	in("")
	// Known now: no read, so its going away is not seen either.
	ip("-n", name, "link", "del", "br0")
	in("")
}

// TestClientProxy: a client gets Proxy only when the environment names
// a proxy (so that client-go shares its transport otherwise).
func TestClientProxy(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.250.0.1:6443"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
	for _, v := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		t.Setenv(v, "")
	}
	cfg, err := restConfig(kubeconfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Proxy != nil {
		t.Error("no proxy set, yet the client has a Proxy function")
	}
	t.Setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
	if cfg, err = restConfig(kubeconfig, nil); err != nil || cfg.Proxy == nil {
		t.Errorf("HTTPS_PROXY set, yet the client has no Proxy function (%v)", err)
	}
}
