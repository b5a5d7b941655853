//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/testutil"
)

// neighbourDialTimeout bounds one connection attempt of the LAN
// neighbour (a refused one ends at once; a dropped one waits this long).
const neighbourDialTimeout = 2 * time.Second

// neighbourNet is the test's own link between the host and the
// neighbour: a /30 of the benchmarking range (RFC 2544), host end first.
const (
	neighbourHostAddr = "198.18.251.1"
	neighbourPeerAddr = "198.18.251.2"
	neighbourPrefix   = "/30"
)

// checkLANNeighbour plays another machine on the host's LAN that routes
// the cluster's node subnet to the host (`ip route add <subnet> via
// <host>`): a network namespace of the test's own, joined to the host by
// a veth with test-owned addresses. It reaches the host (a listener on
// the host's end of the veth answers it), but no devk listener on the
// bridge address: not HAProxy's frontend, not the registry forwarder,
// and (the host does not forward) no node. The host and the nodes still
// reach both. etcd's metrics are on each node's own loopback, not its
// address. Everything the test made is removed when it ends.
func checkLANNeighbour(t *testing.T, ctx context.Context, cfg layout.Config) {
	if out, _ := exec.Command("ip", "-4", "-o", "addr", "show", "to", "198.18.251.0/24").Output(); len(out) > 0 {
		t.Fatalf("the host has an address in 198.18.251.0/24 already (%s): the test's link would collide", strings.TrimSpace(string(out)))
	}
	id := os.Getpid() % 100000
	peer, hostEnd := fmt.Sprintf("lanpeer%d", id), fmt.Sprintf("lanh%d", id)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", peer)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", peer).Run() })
	run("ip", "link", "add", hostEnd, "type", "veth", "peer", "name", "eth0", "netns", peer)
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostEnd).Run() })
	run("ip", "addr", "add", neighbourHostAddr+neighbourPrefix, "dev", hostEnd)
	run("ip", "link", "set", hostEnd, "up")
	run("ip", "-n", peer, "link", "set", "lo", "up")
	run("ip", "-n", peer, "addr", "add", neighbourPeerAddr+neighbourPrefix, "dev", "eth0")
	run("ip", "-n", peer, "link", "set", "eth0", "up")
	run("ip", "-n", peer, "route", "add", cfg.Network.Subnet, "via", neighbourHostAddr)
	peerNS := filepath.Join(layout.NetNSDir, peer)

	// The neighbour reaches the host at all: a listener on the host's
	// end of the test's veth answers it (so what fails below fails for
	// the listener's sake, not the link's).
	l, err := net.Listen("tcp", net.JoinHostPort(neighbourHostAddr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	testutil.CloseEach(l)
	if err := testutil.DialIn(peerNS, l.Addr().String(), neighbourDialTimeout); err != nil {
		t.Fatalf("the neighbour cannot reach the host's end of its link at %s: %v", l.Addr(), err)
	}

	_, regPort, _ := net.SplitHostPort(cfg.Registry)
	haproxy := net.JoinHostPort(cfg.Network.HostIP, strconv.Itoa(cfg.Ports.APIServer))
	forwarder := net.JoinHostPort(cfg.Network.HostIP, regPort)
	listeners := map[string]string{"HAProxy's frontend": haproxy}
	if cfg.OwnRegistry {
		listeners["the registry forwarder"] = forwarder
	}
	for what, addr := range listeners {
		if err := testutil.DialIn(peerNS, addr, neighbourDialTimeout); err == nil {
			t.Errorf("the LAN neighbour connected to %s at %s", what, addr)
		}
		if err := testutil.DialIn("", addr, neighbourDialTimeout); err != nil {
			t.Errorf("the host cannot connect to %s at %s: %v", what, addr, err)
		}
		for _, n := range cfg.Network.Nodes {
			if err := testutil.DialIn(n.NetNSPath(), addr, neighbourDialTimeout); err != nil {
				t.Errorf("node %s cannot connect to %s at %s: %v", n.Name, what, addr, err)
			}
		}
	}
	forwarding, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	for _, n := range cfg.Network.Nodes {
		addr := net.JoinHostPort(n.IP, strconv.Itoa(cfg.Ports.APIServer))
		err := testutil.DialIn(peerNS, addr, neighbourDialTimeout)
		switch {
		case strings.TrimSpace(string(forwarding)) != "0":
			t.Logf("the host forwards (ip_forward %s): whether the neighbour reaches node %s at %s is the host's firewall's business (%v)", strings.TrimSpace(string(forwarding)), n.Name, addr, err)
		case err == nil:
			t.Errorf("the LAN neighbour connected to node %s's API server at %s", n.Name, addr)
		}
	}

	// etcd's metrics and /health: on the node's loopback, not its address.
	for _, n := range cfg.Network.Nodes {
		if !n.IsControlPlane() {
			continue
		}
		metrics := strconv.Itoa(cfg.Ports.EtcdMetrics)
		if err := testutil.DialIn("", net.JoinHostPort(n.IP, metrics), neighbourDialTimeout); err == nil {
			t.Errorf("etcd's metrics answer on node %s's address %s", n.Name, n.IP)
		}
		if err := kube.ProbeIn(ctx, n.NetNSPath(), "http://"+net.JoinHostPort("127.0.0.1", metrics)+"/health"); err != nil {
			t.Errorf("etcd's /health on node %s's loopback: %v", n.Name, err)
		}
	}
}
