package preflight

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/devk/devk/registry"
)

// Listener is a process holding a TCP port.
type Listener struct {
	Port    int
	PID     int
	Command string
	// Cluster is the devk cluster the process belongs to, when its
	// command line names a cluster directory.
	Cluster string
}

var clusterDirRE = regexp.MustCompile(`/clusters/([a-z0-9][a-z0-9-]*)/`)

// RegistryPort checks that the port of the registry up is to start at
// addr (host:port) is free, or held by a registry that answers there.
func RegistryPort(ctx context.Context, addr string) *Problem {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	p, _ := strconv.Atoi(portStr)
	if l, busy := listenerOn(p, nil); busy && !registry.Answers(ctx, addr) {
		pp := portProblem(l, "the registry")
		return &pp
	}
	return nil
}

// portProblem is the problem of port l.Port, which user needs, being
// held by l.
func portProblem(l Listener, user string) Problem {
	who := "another process"
	if l.PID > 0 {
		who = fmt.Sprintf("pid %d (%s)", l.PID, l.Command)
	}
	fix := "stop it, then run devk up again"
	if l.Cluster != "" {
		fix = fmt.Sprintf("it belongs to devk cluster %q: `devk down --name %s` first", l.Cluster, l.Cluster)
	}
	return Problem{"ports", fmt.Sprintf("port %d (%s) is in use by %s", l.Port, user, who), fix}
}

// parseProcNetTCP returns the socket inodes listening on port in the
// contents of /proc/net/tcp or /proc/net/tcp6 that a server binding ip
// would collide with: a listener on ip itself or on the wildcard address.
// A nil ip matches every listener.
func parseProcNetTCP(data string, port int, ip net.IP) []string {
	var inodes []string
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] == "sl" {
			continue
		}
		// f[1] is local "ADDR:PORT" in hex, f[3] the state (0A = LISTEN).
		if f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		if ip != nil {
			addr := procNetIP(f[1][:i])
			if addr == nil || !(addr.IsUnspecified() || addr.Equal(ip)) {
				continue
			}
		}
		inodes = append(inodes, f[9])
	}
	return inodes
}

// procNetIP decodes an address of /proc/net/tcp{,6}: 32-bit words in
// host (little-endian) order.
func procNetIP(h string) net.IP {
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil
	}
	out := make(net.IP, len(b))
	for w := 0; w < len(b); w += 4 {
		out[w], out[w+1], out[w+2], out[w+3] = b[w+3], b[w+2], b[w+1], b[w]
	}
	return out
}

// listenerOn reports the process listening on TCP port in a way that
// collides with binding ip (nil: any listener); pid 0 if the socket's
// owner is not visible.
func listenerOn(port int, ip net.IP) (Listener, bool) {
	var inodes []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err == nil {
			inodes = append(inodes, parseProcNetTCP(string(data), port, ip)...)
		}
	}
	if len(inodes) == 0 {
		return Listener{}, false
	}
	want := map[string]bool{}
	for _, in := range inodes {
		want["socket:["+in+"]"] = true
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, fdDir := range procs {
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err == nil && want[link] {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(fdDir)))
				cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(fdDir), "cmdline"))
				c := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
				l := Listener{Port: port, PID: pid, Command: c}
				if m := clusterDirRE.FindStringSubmatch(c); m != nil {
					l.Cluster = m[1]
				}
				if len(c) > 60 {
					l.Command = c[:60] + "…"
				}
				return l, true
			}
		}
	}
	return Listener{Port: port}, true
}
