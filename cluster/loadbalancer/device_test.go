package loadbalancer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/devk/devk/internal/kube"
)

// deviceDialTimeout bounds one connection attempt in TestOnlyItsDevice
// (a refused one ends at once).
const deviceDialTimeout = 2 * time.Second

// TestOnlyItsDevice runs a cluster's HAProxy where a cluster has it, in
// network namespaces of the test's own: a "host" with a bridge (the
// frontend's address on it), a "node" on the bridge running the API
// server's stand-in, and a LAN "neighbour" joined to the host by a veth,
// routing the bridge's subnet via the host (which does not forward).
// The host itself and the node are served; the neighbour cannot even
// connect. Without the device binding it connects but is cut by the
// source rule; without either it is served: each layer holds alone.
func TestOnlyItsDevice(t *testing.T) {
	requireHAProxy(t)
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces need root: run the tests as root, as CI does")
	}
	id := os.Getpid() % 100000
	host, node, peer := fmt.Sprintf("devk-lbh-%d", id), fmt.Sprintf("devk-lbn-%d", id), fmt.Sprintf("devk-lbl-%d", id)
	const bridge = "dkb-lbtest"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{host, node, peer} {
		run("ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run("ip", "-n", ns, "link", "set", "lo", "up")
	}
	run("ip", "-n", host, "link", "add", bridge, "type", "bridge")
	run("ip", "-n", host, "addr", "add", "10.99.7.1/24", "dev", bridge)
	run("ip", "-n", host, "link", "set", bridge, "up")
	run("ip", "-n", host, "link", "add", "dkvlbtest", "type", "veth", "peer", "name", "eth0", "netns", node)
	run("ip", "-n", host, "link", "set", "dkvlbtest", "master", bridge, "up")
	run("ip", "-n", node, "addr", "add", "10.99.7.2/24", "dev", "eth0")
	run("ip", "-n", node, "link", "set", "eth0", "up")
	run("ip", "-n", host, "link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", peer)
	run("ip", "-n", host, "addr", "add", "198.18.252.1/30", "dev", "lan0")
	run("ip", "-n", host, "link", "set", "lan0", "up")
	run("ip", "-n", peer, "addr", "add", "198.18.252.2/30", "dev", "eth0")
	run("ip", "-n", peer, "link", "set", "eth0", "up")
	run("ip", "-n", peer, "route", "add", "10.99.7.0/24", "via", "198.18.252.1")
	nsPath := func(ns string) string { return filepath.Join("/run/netns", ns) }

	// The API server's stand-in, in the node.
	var l net.Listener
	if err := kube.InNetNS(nsPath(node), func() (err error) { l, err = net.Listen("tcp", "10.99.7.2:0"); return err }); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)

	// This goroutine is the host from here on: HAProxy is started (forked)
	// and dialled from this thread, which is never unlocked and so ends
	// with the test.
	runtime.LockOSThread()
	if err := setns(nsPath(host)); err != nil {
		t.Fatal(err)
	}
	lb := newLB(t)
	lb.Config.Frontend = "10.99.7.1:6443"
	lb.Config.Backends = []Backend{{Name: "node", Address: l.Addr().String()}}
	lb.Config.Interface = bridge
	lb.Config.Sources = []netip.Prefix{netip.MustParsePrefix("10.99.7.0/24")}
	apply(t, lb, Started)
	waitStatus(t, lb, "node", "UP")

	// served says whether a TLS handshake through the frontend reaches
	// the stand-in from ns ("": the host, this thread); connected whether
	// a listener took the connection at all (a rejecting HAProxy resets
	// it at once, at times before the dial returns).
	served := func(ns string) (connected bool, err error) {
		dial := func() error {
			c, err := net.DialTimeout("tcp", lb.Config.Frontend, deviceDialTimeout)
			if errors.Is(err, syscall.ECONNRESET) {
				connected = true
			}
			if err != nil {
				return err
			}
			defer c.Close()
			connected = true
			c.SetDeadline(time.Now().Add(deviceDialTimeout))
			return tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
		}
		if ns == "" {
			return connected, dial()
		}
		return connected, kube.InNetNS(nsPath(ns), dial)
	}
	for _, step := range []struct {
		name                     string
		iface                    string
		sources                  []netip.Prefix
		peerConnects, peerServed bool
	}{
		{"device and sources", bridge, lb.Config.Sources, false, false},
		{"sources only", "", lb.Config.Sources, true, false},
		{"neither", "", nil, true, true},
		// A cluster's HAProxy from before the binding takes it up on reload.
		{"device again", bridge, lb.Config.Sources, false, false},
	} {
		t.Run(step.name, func(t *testing.T) {
			lb.Config.Interface, lb.Config.Sources = step.iface, step.sources
			if _, err := lb.Apply(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, who := range []string{"", node} {
				if _, err := served(who); err != nil {
					t.Errorf("%q is not served: %v", who, err)
				}
			}
			connected, err := served(peer)
			if connected != step.peerConnects || (err == nil) != step.peerServed {
				t.Errorf("the neighbour: connected %v, served %v (%v); want connected %v, served %v", connected, err == nil, err, step.peerConnects, step.peerServed)
			}
		})
	}
}

func setns(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}
