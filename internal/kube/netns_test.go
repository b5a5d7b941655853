package kube

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProbeIn: a health endpoint on the loopback of a network namespace
// (a node's, here one the test makes) answers ProbeIn, and the same URL
// on this machine's own loopback does not.
func TestProbeIn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("making a network namespace needs root: run the tests as root, as CI does")
	}
	name := fmt.Sprintf("devk-kubetest-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ns := filepath.Join("/run/netns", name)
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v\n%s", err, out)
	}
	l := listenIn(t, ns)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + l.Addr().String() + "/health"

	ctx := context.Background()
	for range 3 { // the dial's thread leaves the namespace: again and again
		if err := ProbeIn(ctx, ns, url); err != nil {
			t.Fatalf("ProbeIn(%s) = %v; want it to answer", url, err)
		}
	}
	if err := Probe(ctx, url); err == nil {
		t.Errorf("Probe(%s) from this machine's loopback answered; want only the namespace's to", url)
	}
	if err := ProbeIn(ctx, filepath.Join("/run/netns", name+"-none"), url); err == nil {
		t.Errorf("ProbeIn of a namespace that does not exist answered")
	}
}

// listenIn listens on 127.0.0.1 of the network namespace at ns.
func listenIn(t *testing.T, ns string) net.Listener {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread stays in ns and ends with this goroutine (no unlock).
		runtime.LockOSThread()
		f, err := os.Open(ns)
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{nil, err}
			return
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		done <- result{l, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.l
}
