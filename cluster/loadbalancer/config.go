// Package loadbalancer is the HAProxy in front of a cluster's API servers
// when it has more than one control-plane node, as kind runs it: TCP
// passthrough (each client does TLS with an API server itself), every
// server health-checked on its /readyz over TLS, one config file devk
// renders, HAProxy run in master-worker mode under internal/supervise and
// reloaded with SIGUSR2, and its runtime API on a unix socket for taking
// a server out (drain, maint) and back (ready) around a swap.
//
// It is written for HAProxy 2.6, Debian bookworm's /usr/sbin/haproxy.
package loadbalancer

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The proxies' names in haproxy.cfg: the runtime API names a server as
// BackendName/<server>.
const (
	FrontendName = "apiserver"
	BackendName  = "apiservers"
)

// Balance is HAProxy's load-balancing algorithm for the API servers.
type Balance string

const (
	// RoundRobin gives each new connection to the next server in turn.
	RoundRobin Balance = "roundrobin"
	// LeastConn gives it to the server with the fewest connections: with
	// long watches, the one a restarted server's clients did not all
	// come back to.
	LeastConn Balance = "leastconn"
)

// Backend is one API server behind the load balancer.
type Backend struct {
	// Name is the server's name in HAProxy (the node's name).
	Name string
	// Address is the API server's IP:port.
	Address string
}

// Config is what haproxy.cfg is made from.
type Config struct {
	// Frontend is the IP:port the load balancer listens on.
	Frontend string
	// Backends are the API servers, at least one; the file lists them by
	// name, so their order here does not matter.
	Backends []Backend
	// StatsSocket is the path of the runtime API's unix socket (admin
	// level, mode 600). HAProxy 2.6 takes at most 97 bytes: it says so
	// itself when the config is checked.
	StatsSocket string
	// StateFile, when set, is where servers' states (drain, maint, and
	// whether their checks pass) are kept across a reload: LB.Reload
	// saves them there first, and the new worker starts from them, so a
	// server taken out stays out.
	StateFile string
	// Balance is RoundRobin when empty.
	Balance Balance

	// Interface, when set, is the only network device the frontend takes
	// connections from (`bind … interface`, SO_BINDTODEVICE). Linux
	// accepts a packet for a local address on any interface, so without
	// it a neighbour that routes the frontend's subnet to this machine
	// reaches the frontend. The machine's own connections to the
	// frontend's address (kubectl on the host, devk) arrive as from the
	// device that has the address, so they still do (tried with HAProxy
	// 2.6 on Linux 6.18).
	Interface string
	// Sources, when set, are the only client addresses served: a
	// connection from any other is closed as soon as it is accepted.
	Sources []netip.Prefix
	// User and Group, when set, are who HAProxy's workers run as
	// (HAProxy binds its sockets as root first); Chroot, when set, is the
	// empty directory they are confined to.
	User, Group string
	Chroot      string
}

// Unprivileged is who a cluster's HAProxy workers run as: Debian's
// nobody and nogroup, which own no files.
const (
	UnprivilegedUser  = "nobody"
	UnprivilegedGroup = "nogroup"
)

// interfaceName is a Linux network device's name as HAProxy's config
// can carry it (at most 15 bytes, no '/', space or quote).
var interfaceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)

// accountName is a user's or group's name as Debian's adduser allows.
var accountName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// serverName is what HAProxy accepts as a proxy or server name (letters,
// digits, '-', '_', '.', ':'); devk's node names are DNS labels, inside it.
var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// Validate checks c field by field, before anything is written.
func (c Config) Validate() error {
	if _, err := parseAddr(c.Frontend); err != nil {
		return fmt.Errorf("load balancer frontend: %w", err)
	}
	if len(c.Backends) == 0 {
		return fmt.Errorf("load balancer: no backends: give at least one API server (name and IP:port)")
	}
	seen := map[string]bool{}
	for _, b := range c.Backends {
		if !serverName.MatchString(b.Name) {
			return fmt.Errorf("load balancer backend %q: not a server name: use letters, digits, '-', '_', '.' or ':' (the node's name)", b.Name)
		}
		if seen[b.Name] {
			return fmt.Errorf("load balancer backend %q: named twice: give each API server its own name", b.Name)
		}
		seen[b.Name] = true
		if _, err := parseAddr(b.Address); err != nil {
			return fmt.Errorf("load balancer backend %q: %w", b.Name, err)
		}
	}
	if err := checkPath("stats socket", c.StatsSocket, true); err != nil {
		return err
	}
	if err := checkPath("state file", c.StateFile, false); err != nil {
		return err
	}
	if c.Interface != "" && !interfaceName.MatchString(c.Interface) {
		return fmt.Errorf("load balancer interface %q: not a network device's name (at most 15 letters, digits, '-', '_' or '.')", c.Interface)
	}
	for _, p := range c.Sources {
		if !p.IsValid() || p != p.Masked() {
			return fmt.Errorf("load balancer source %s: give a network's address and prefix length, such as 10.250.0.0/24", p)
		}
	}
	for what, name := range map[string]string{"user": c.User, "group": c.Group} {
		if name != "" && !accountName.MatchString(name) {
			return fmt.Errorf("load balancer %s %q: not a user or group name", what, name)
		}
	}
	if err := checkPath("chroot", c.Chroot, false); err != nil {
		return err
	}
	switch c.Balance {
	case "", RoundRobin, LeastConn:
	default:
		return fmt.Errorf("load balancer: balance %q: use %q or %q", c.Balance, RoundRobin, LeastConn)
	}
	return nil
}

func parseAddr(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("address %q is not IP:port: give an IP address and a port, such as 10.250.0.2:6443", s)
	}
	return ap, nil
}

// checkPath refuses what haproxy.cfg's words cannot carry unquoted (a
// space splits a word, '#' starts a comment, '\' and quotes escape).
func checkPath(what, path string, required bool) error {
	switch {
	case path == "" && !required:
		return nil
	case path == "":
		return fmt.Errorf("load balancer: no %s path: give one", what)
	case !filepath.IsAbs(path):
		return fmt.Errorf("load balancer %s %q: give an absolute path", what, path)
	case strings.ContainsAny(path, " \t\r\n#\\'\""):
		return fmt.Errorf("load balancer %s %q: a path with spaces, '#', '\\' or quotes cannot go into haproxy.cfg: choose another directory", what, path)
	}
	return nil
}

// Render is haproxy.cfg for c. The same Config gives the same bytes
// whatever the order of its backends, so an unchanged cluster never
// reloads HAProxy.
func (c Config) Render() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	balance := cmp.Or(c.Balance, RoundRobin)
	backends := slices.Clone(c.Backends)
	slices.SortFunc(backends, func(a, b Backend) int { return strings.Compare(a.Name, b.Name) })
	frontend, _ := parseAddr(c.Frontend)

	var b bytes.Buffer
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# written by devk for HAProxy 2.6; rewritten whenever the control-plane nodes change")
	line("global")
	// No daemon: devk's supervisor runs it (-W -db) and keeps its stdout
	// and stderr in its log file, where the logs go too. HAProxy also
	// prints its warnings there itself, so a server going down shows
	// twice. The master stays root (it binds the sockets again on a
	// reload and reads the state file); the workers, which talk to
	// clients, drop to User and Group inside Chroot.
	line("    log stderr format raw local0")
	if c.User != "" {
		line("    user %s", c.User)
	}
	if c.Group != "" {
		line("    group %s", c.Group)
	}
	if c.Chroot != "" {
		line("    chroot %s", c.Chroot)
	}
	line("    stats socket %s mode 600 level admin", c.StatsSocket)
	line("    stats timeout %s", duration(statsTimeout))
	if c.StateFile != "" {
		line("    server-state-file %s", c.StateFile)
	}
	line("")
	line("defaults")
	line("    log global")
	line("    mode tcp")
	// Log only the connections that failed (refused, timed out, cut): a
	// cluster's clients connect all the time and the log is a file.
	line("    option tcplog")
	line("    option dontlognull")
	line("    option dontlog-normal")
	if c.StateFile != "" {
		line("    load-server-state-from-file global")
	}
	line("    timeout connect %s", duration(ConnectTimeout))
	line("    timeout client %s", duration(IdleTimeout))
	line("    timeout server %s", duration(IdleTimeout))
	line("    timeout check %s", duration(CheckTimeout))
	line("")
	line("frontend %s", FrontendName)
	if c.Interface != "" {
		line("    bind %s interface %s", frontend, c.Interface)
	} else {
		line("    bind %s", frontend)
	}
	if len(c.Sources) > 0 {
		var srcs []string
		for _, p := range c.Sources {
			srcs = append(srcs, p.String())
		}
		line("    tcp-request connection reject unless { src %s }", strings.Join(srcs, " "))
	}
	line("    default_backend %s", BackendName)
	line("")
	line("backend %s", BackendName)
	line("    balance %s", balance)
	// The check is HTTPS on the API server's own port ("check-ssl"),
	// without verifying its certificate ("verify none": anonymous /readyz
	// is public, and the check proves readiness, not identity; clients
	// verify the API server themselves through the TCP passthrough).
	line("    option httpchk")
	line("    http-check send meth GET uri /readyz")
	line("    http-check expect status 200")
	for _, s := range backends {
		addr, _ := parseAddr(s.Address)
		line("    server %s %s check check-ssl verify none inter %s fall %d rise %d",
			s.Name, addr, duration(CheckInterval), CheckFall, CheckRise)
	}
	return b.Bytes(), nil
}

// duration is d in HAProxy's time format, in the largest unit that holds
// it exactly.
func duration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	default:
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
}
