// Package holdport holds a static pod's listening address (the API
// server's) over its hand-over, so that its clients' connections wait
// instead of being refused.
package holdport

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/staticpod"
)

// How it works.
//
// With one API server on the node, its clients' requests fail while it
// is replaced (connection refused), and each client backs off: the
// kubelet's pod watch most of all (0.8 s doubling), which keeps the new
// mirror pod from the kubelet for seconds after the new API server is
// ready. devk's API servers bind with SO_REUSEPORT
// (staticpod.PortSharingFlag), so a swap binds the same address too,
// before it stops the old one, and accepts nothing: connections made
// while no API server runs wait in that socket's accept queue. Once the
// new API server listens beside it, the swap closes it, and the node's
// net.ipv4.tcp_migrate_req = 1 moves the waiting connections to the new
// API server's queue: to its clients the API server was slow, not gone.
// A swap killed meanwhile closes the socket with its process, and the
// waiting connections move on or are refused as they would have been.

const (
	// portPoll is how often a hold looks for the new API server's
	// listener.
	portPoll = 20 * time.Millisecond
	// holdBacklog is the accept queue a hold offers.
	holdBacklog = 4096
	// tcpListen is the LISTEN state in /proc/net/tcp.
	tcpListen = "0A"
)

// portHold is an address held over a hand-over.
type Hold struct {
	ln      net.Listener
	tcp     *os.File // the node's /proc/net/tcp
	port    string   // hex, as /proc/net/tcp writes it
	inode   string   // the held socket's, as /proc/net/tcp writes it
	once    sync.Once
	waited  int // connections queued when it was let go
	stopped chan struct{}
}

// Holdable is the address to hold ("" and why not when there is none):
// container of both manifests (current, next) shares its port
// (staticpod.PortSharingFlag) on one --bind-address and --secure-port,
// and the node's network namespace netns migrates queued connections.
func Holdable(netns, container string, current, next []byte) (addr, why string) {
	if netns == "" {
		return "", "not a node devk made (no network namespace of its own)"
	}
	var flags []map[string]string
	for _, data := range [][]byte{current, next} {
		pod, err := staticpod.Parse(data)
		if err != nil {
			return "", err.Error()
		}
		f := staticpod.Flags(pod, container)
		if f[staticpod.PortSharingFlag] != "true" {
			return "", "--" + staticpod.PortSharingFlag + " is not true in both manifests"
		}
		flags = append(flags, f)
	}
	host, port := flags[0]["bind-address"], flags[0]["secure-port"]
	if host == "" || port == "" || host != flags[1]["bind-address"] || port != flags[1]["secure-port"] {
		return "", "the manifests do not give one --bind-address and --secure-port"
	}
	migrate := ""
	err := kube.InNetNS(netns, func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req")
		migrate = strings.TrimSpace(string(b))
		return err
	})
	if err != nil || migrate != "1" {
		return "", fmt.Sprintf("the node's net.ipv4.tcp_migrate_req is %q (%v): `devk up` sets it", migrate, err)
	}
	return net.JoinHostPort(host, port), ""
}

// Start binds addr in netns with SO_REUSEPORT and listens, accepting
// nothing.
func Start(ctx context.Context, netns, addr string) (*Hold, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	h := &Hold{port: fmt.Sprintf("%04X", p), stopped: make(chan struct{})}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	err = kube.InNetNS(netns, func() error {
		// Go's listen(2) backlog is the host's somaxconn; a bound
		// socket listened on again takes the larger backlog.
		ln, err := lc.Listen(ctx, "tcp4", addr)
		if err != nil {
			return err
		}
		h.ln = ln
		raw, err := ln.(*net.TCPListener).SyscallConn()
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := raw.Control(func(fd uintptr) {
			_ = unix.Listen(int(fd), holdBacklog)
			_ = unix.Fstat(int(fd), &st)
		}); err != nil {
			return err
		}
		h.inode = strconv.FormatUint(st.Ino, 10)
		h.tcp, err = os.Open("/proc/thread-self/net/tcp")
		return err
	})
	if err != nil {
		if h.ln != nil {
			h.ln.Close()
		}
		return nil, fmt.Errorf("hold %s: %w", addr, err)
	}
	return h, nil
}

// Watch lets go of the hold once another socket listens on its port (the
// new API server), or when ctx ends.
func (h *Hold) Watch(ctx context.Context) {
	if h == nil {
		return
	}
	go func() {
		t := time.NewTicker(portPoll)
		defer t.Stop()
		for {
			if listeners, _ := h.listeners(); listeners >= 2 {
				h.Release()
				return
			}
			select {
			case <-ctx.Done():
				h.Release()
				return
			case <-h.stopped:
				return
			case <-t.C:
			}
		}
	}()
}

// Release lets go of the address (once): the connections waiting on it
// move to the new API server's queue. It returns how many waited.
func (h *Hold) Release() int {
	if h == nil {
		return 0
	}
	h.once.Do(func() {
		_, h.waited = h.listeners()
		h.ln.Close()
		h.tcp.Close()
		close(h.stopped)
	})
	return h.waited
}

// listeners counts the sockets listening on the held port in the node,
// and says how many connections wait in the hold's accept queue.
func (h *Hold) listeners() (listeners, queued int) {
	if _, err := h.tcp.Seek(0, io.SeekStart); err != nil {
		return 0, 0
	}
	data, err := io.ReadAll(h.tcp)
	if err != nil {
		return 0, 0
	}
	return countListeners(data, h.port, h.inode)
}

// countListeners reads /proc/net/tcp (data): the sockets listening on
// port (hex), and the connections queued to be accepted on the one of
// inode (a LISTEN socket's rx_queue is its accept queue).
func countListeners(data []byte, port, inode string) (listeners, queued int) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:when
		// retrnsmt uid timeout inode …
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != tcpListen || !strings.HasSuffix(f[1], ":"+port) {
			continue
		}
		listeners++
		if _, rx, ok := strings.Cut(f[4], ":"); ok && f[9] == inode {
			if n, err := strconv.ParseUint(rx, 16, 32); err == nil {
				queued += int(n)
			}
		}
	}
	return listeners, queued
}
