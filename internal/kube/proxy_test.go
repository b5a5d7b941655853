package kube

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
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

// TestProxy: with a proxy set, devk's clients go direct to loopback and
// to every network this machine has an address on, and through the
// proxy elsewhere. Only the decision is tested: nothing is dialled.
func TestProxy(t *testing.T) {
	const proxy = "http://proxy.invalid:3128"
	t.Setenv("HTTPS_PROXY", proxy)
	t.Setenv("HTTP_PROXY", proxy)
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	var local net.IP
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
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
		want := proxy
		for _, n := range localNetworks() {
			if _, ipn, _ := net.ParseCIDR(n); ipn.Contains(net.ParseIP(ip)) {
				want = ""
			}
		}
		cases["https://"+ip+":6443/"] = want
	}
	for u, want := range cases {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		got, err := Proxy(req)
		if err != nil {
			t.Fatal(err)
		}
		if gotS := ""; got != nil {
			gotS = got.String()
			if gotS != want {
				t.Errorf("Proxy(%s) = %s; want %q", u, gotS, want)
			}
		} else if want != "" {
			t.Errorf("Proxy(%s) = direct; want %s", u, want)
		}
	}
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
