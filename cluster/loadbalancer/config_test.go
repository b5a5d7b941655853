package loadbalancer

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testConfig() Config {
	return Config{
		Frontend:    "10.250.0.1:6443",
		StatsSocket: "/devk/clusters/ha/haproxy/run/haproxy.sock",
		Backends: []Backend{
			{Name: "ha-2", Address: "10.250.0.4:6443"},
			{Name: "ha", Address: "10.250.0.2:6443"},
			{Name: "ha-1", Address: "10.250.0.3:6443"},
		},
	}
}

const wantConfig = `# written by devk for HAProxy 2.6; rewritten whenever the control-plane nodes change
global
    log stderr format raw local0
    stats socket /devk/clusters/ha/haproxy/run/haproxy.sock mode 600 level admin
    stats timeout 30s

defaults
    log global
    mode tcp
    option tcplog
    option dontlognull
    option dontlog-normal
    timeout connect 5s
    timeout client 15m
    timeout server 15m
    timeout check 2s

frontend apiserver
    bind 10.250.0.1:6443
    default_backend apiservers

backend apiservers
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz
    http-check expect status 200
    server ha 10.250.0.2:6443 check check-ssl verify none inter 1s fall 2 rise 1
    server ha-1 10.250.0.3:6443 check check-ssl verify none inter 1s fall 2 rise 1
    server ha-2 10.250.0.4:6443 check check-ssl verify none inter 1s fall 2 rise 1
`

func TestRender(t *testing.T) {
	got, err := testConfig().Render()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != wantConfig {
		t.Errorf("Render =\n%s\nwant\n%s", got, wantConfig)
	}

	// The backends' order does not change a byte.
	c := testConfig()
	c.Backends[0], c.Backends[2] = c.Backends[2], c.Backends[0]
	if again, _ := c.Render(); string(again) != string(got) {
		t.Errorf("reordered backends rendered differently:\n%s", again)
	}

	// The confinement adds its lines: the bind on the device, the
	// sources, the workers' user, group and chroot.
	c.Interface, c.User, c.Group, c.Chroot = "dkb-ha", "nobody", "nogroup", "/devk/clusters/ha/haproxy/empty"
	c.Sources = []netip.Prefix{netip.MustParsePrefix("10.250.0.0/24")}
	confined, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\n    user nobody\n    group nogroup\n    chroot /devk/clusters/ha/haproxy/empty\n",
		"\n    bind 10.250.0.1:6443 interface dkb-ha\n    tcp-request connection reject unless { src 10.250.0.0/24 }\n    default_backend apiservers\n",
	} {
		if !strings.Contains(string(confined), want) {
			t.Errorf("rendered config lacks %q:\n%s", want, confined)
		}
	}

	// The state file and leastconn add their lines.
	c.StateFile = "/devk/clusters/ha/haproxy/servers.state"
	c.Balance = LeastConn
	with, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\n    server-state-file /devk/clusters/ha/haproxy/servers.state\n",
		"\n    load-server-state-from-file global\n",
		"\n    balance leastconn\n",
	} {
		if !strings.Contains(string(with), want) {
			t.Errorf("rendered config lacks %q:\n%s", want, with)
		}
	}
}

// TestRenderedConfigIsValid: what Render makes, HAProxy 2.6 takes, with
// no warning (IPv6 included).
func TestRenderedConfigIsValid(t *testing.T) {
	requireHAProxy(t)
	dir := t.TempDir()
	for name, c := range map[string]Config{
		"ipv4": testConfig(),
		"confined": {
			Frontend: "127.0.0.1:6443", StatsSocket: filepath.Join(dir, "c.sock"), Backends: []Backend{{Name: "a", Address: "127.0.0.1:16443"}},
			Interface: "lo", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.250.0.0/24")},
			User: UnprivilegedUser, Group: UnprivilegedGroup, Chroot: dir,
		},
		"ipv6 and state": {
			Frontend: "[::1]:6443", StatsSocket: filepath.Join(dir, "s.sock"), StateFile: filepath.Join(dir, "state"),
			Balance: LeastConn, Backends: []Backend{{Name: "a", Address: "[fd00::2]:6443"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := c.Render()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "haproxy.cfg")
			os.WriteFile(path, data, 0o644)
			if c.StateFile != "" {
				os.WriteFile(c.StateFile, []byte("1\n"), 0o600)
			}
			out, err := runHAProxy(context.Background(), "-c", "-f", path)
			if err != nil {
				t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, data)
			}
			if strings.Contains(out, "WARNING") {
				t.Errorf("haproxy -c warns:\n%s", out)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"frontend not IP:port", func(c *Config) { c.Frontend = "localhost:6443" }, `frontend: address "localhost:6443" is not IP:port`},
		{"frontend port 0", func(c *Config) { c.Frontend = "127.0.0.1:0" }, "is not IP:port"},
		{"no backends", func(c *Config) { c.Backends = nil }, "no backends: give at least one"},
		{"backend address", func(c *Config) { c.Backends[1].Address = "10.250.0.2" }, `backend "ha": address "10.250.0.2" is not IP:port`},
		{"backend name", func(c *Config) { c.Backends[0].Name = "a/b" }, `backend "a/b": not a server name`},
		{"empty name", func(c *Config) { c.Backends[0].Name = "" }, "not a server name"},
		{"duplicate name", func(c *Config) { c.Backends[0].Name = "ha" }, `backend "ha": named twice`},
		{"no socket", func(c *Config) { c.StatsSocket = "" }, "no stats socket path"},
		{"relative socket", func(c *Config) { c.StatsSocket = "run/haproxy.sock" }, "give an absolute path"},
		{"socket with space", func(c *Config) { c.StatsSocket = "/my dir/haproxy.sock" }, "cannot go into haproxy.cfg"},
		{"state file with #", func(c *Config) { c.StateFile = "/x#/state" }, "cannot go into haproxy.cfg"},
		{"balance", func(c *Config) { c.Balance = "source" }, `balance "source": use "roundrobin" or "leastconn"`},
		{"interface too long", func(c *Config) { c.Interface = "dkb-averylongname" }, `interface "dkb-averylongname": not a network device's name`},
		{"interface with space", func(c *Config) { c.Interface = "eth0 tfo" }, "not a network device's name"},
		{"source not a network", func(c *Config) { c.Sources = []netip.Prefix{netip.MustParsePrefix("10.250.0.1/24")} }, "source 10.250.0.1/24: give a network's address"},
		{"source zero", func(c *Config) { c.Sources = []netip.Prefix{{}} }, "give a network's address"},
		{"user", func(c *Config) { c.User = "root nobody" }, `user "root nobody": not a user or group name`},
		{"group", func(c *Config) { c.Group = "Staff" }, `group "Staff": not a user or group name`},
		{"relative chroot", func(c *Config) { c.Chroot = "empty" }, "load balancer chroot \"empty\": give an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			tc.change(&c)
			_, err := c.Render()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Render = %v; want an error with %q", err, tc.want)
			}
		})
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[string]string{"2h": "2h", "15m": "15m", "90s": "90s", "1500ms": "1500ms", "1s": "1s"} {
		dur, _ := time.ParseDuration(d)
		if got := duration(dur); got != want {
			t.Errorf("duration(%s) = %s; want %s", d, got, want)
		}
	}
}
