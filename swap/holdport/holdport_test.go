package holdport

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/devk/devk/internal/kube"
)

func TestCountListeners(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0200FA0A:192B 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0200FA0A:192B 00000000:0000 0A 00000000:00000001 00:00000000 00000000     0        0 1002 1 0000000000000000 100 0 0 10 0
   2: 0200FA0A:192B 0300FA0A:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1004 1 0000000000000000 100 0 0 10 0
`
	if l, q := countListeners([]byte(tcp), "192B", "1001"); l != 2 || q != 3 {
		t.Errorf("port 6443 (192B), held by inode 1001: %d listeners, %d queued; want 2 and 3", l, q)
	}
	if l, q := countListeners([]byte(tcp), "0CEA", "1001"); l != 1 || q != 0 {
		t.Errorf("port 3306: %d listeners, %d queued; want 1 and 0", l, q)
	}
}

func TestHoldable(t *testing.T) {
	manifest := func(flags ...string) []byte {
		return []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, namespace: kube-system}\nspec:\n  containers:\n  - name: kube-apiserver\n    image: x\n    command: [kube-apiserver, " + strings.Join(flags, ", ") + "]\n")
	}
	sharing := manifest("--bind-address=10.250.0.2", "--secure-port=6443", "--permit-port-sharing=true")
	for _, tc := range []struct {
		name          string
		netns         string
		current, next []byte
		want          string
	}{
		{"no namespace of devk's", "", sharing, sharing, "not a node devk made"},
		{"the old one does not share", "/run/netns/x", manifest("--bind-address=10.250.0.2", "--secure-port=6443"), sharing, "--permit-port-sharing is not true in both"},
		{"the new one does not share", "/run/netns/x", sharing, manifest("--bind-address=10.250.0.2", "--secure-port=6443", "--permit-port-sharing=false"), "--permit-port-sharing is not true in both"},
		{"another port", "/run/netns/x", sharing, manifest("--bind-address=10.250.0.2", "--secure-port=7443", "--permit-port-sharing=true"), "one --bind-address and --secure-port"},
		{"no such namespace", "/run/netns/devk-no-such-ns", sharing, sharing, "tcp_migrate_req"},
	} {
		if addr, why := Holdable(tc.netns, "kube-apiserver", tc.current, tc.next); addr != "" || !strings.Contains(why, tc.want) {
			t.Errorf("%s: %q, %q; want none, because %q", tc.name, addr, why, tc.want)
		}
	}
}

// TestHoldMovesWaitingConnections: in a network namespace of the
// test's own (tcp_migrate_req on, as devk's nodes have it), an "API
// server" listening with SO_REUSEPORT is held, stopped, and connections
// made meanwhile wait on the hold; a new one listens beside it, the hold
// lets go by itself, and every waiting connection is the new one's, its
// bytes intact.
func TestHoldMovesWaitingConnections(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a network namespace of its own")
	}
	ns := "devk-hold-" + strconv.Itoa(os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", ns, "link", "set", "lo", "up")
	ip("netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_migrate_req=1")
	path := "/run/netns/" + ns
	const addr = "127.0.0.1:6443"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
	}}
	listen := func() net.Listener {
		t.Helper()
		var ln net.Listener
		if err := kube.InNetNS(path, func() (err error) { ln, err = lc.Listen(ctx, "tcp4", addr); return err }); err != nil {
			t.Fatal(err)
		}
		return ln
	}
	old := listen()
	h, err := Start(ctx, path, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	old.Close()
	const waiting = 5
	var conns []net.Conn
	for i := range waiting {
		if err := kube.InNetNS(path, func() error {
			c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
			if err == nil {
				_, err = fmt.Fprintf(c, "request %d\n", i)
				conns = append(conns, c)
			}
			return err
		}); err != nil {
			t.Fatalf("connection %d while only the hold listens: %v (refused: the hold does not hold)", i, err)
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if l, q := h.listeners(); l != 1 || q != waiting {
		t.Fatalf("before the new one listens: %d listeners, %d waiting on the hold; want 1 and %d", l, q, waiting)
	}
	h.Watch(ctx)
	next := listen()
	defer next.Close()
	select {
	case <-h.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the hold did not let go once the new listener was there")
	}
	if h.waited != waiting {
		t.Errorf("the hold says %d connections waited on it, want %d", h.waited, waiting)
	}
	got := map[string]bool{}
	for range waiting {
		next.(*net.TCPListener).SetDeadline(time.Now().Add(3 * time.Second))
		c, err := next.Accept()
		if err != nil {
			t.Fatalf("the new listener has %d of the %d waiting connections: %v", len(got), waiting, err)
		}
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		got[strings.TrimSpace(string(buf[:n]))] = true
		c.Close()
	}
	for i := range waiting {
		if !got[fmt.Sprintf("request %d", i)] {
			t.Errorf("request %d did not reach the new listener: %v", i, got)
		}
	}
}
