package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// forwardDialTimeout bounds the connection to the registry behind a
// forwarder.
const forwardDialTimeout = 5 * time.Second

// ForwardOptions configure Forward.
type ForwardOptions struct {
	// Addr is host:port to listen on: a devk cluster's bridge address.
	Addr string
	// To is the registry relayed to; it must be on loopback.
	To string
	// Ready is called with the address listened on once connections
	// are accepted.
	Ready func(addr string)
}

// Forward relays every TCP connection accepted on o.Addr to the registry
// at o.To until ctx ends. A devk node is a network namespace, which
// cannot reach the host's loopback; the cluster's forwarder on its
// bridge address lets the node's containerd pull from the registry on
// 127.0.0.1 by the same image names and digests.
func Forward(ctx context.Context, o ForwardOptions) error {
	host, _, err := net.SplitHostPort(o.To)
	if err != nil {
		return fmt.Errorf("--to %q: want HOST:PORT: %w", o.To, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--to %q: a forwarder relays to a registry on loopback only (127.0.0.1, ::1, localhost)", o.To)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			relay(ctx, conn, o.To)
		}()
	}
}

// relay copies both ways between a client and the registry, each
// direction's end passed on as a half-close.
func relay(ctx context.Context, client net.Conn, to string) {
	defer client.Close()
	d := net.Dialer{Timeout: forwardDialTimeout}
	up, err := d.DialContext(ctx, "tcp", to)
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { client.Close(); up.Close() })
	defer stop()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Add(2)
	go pipe(up, client)
	go pipe(client, up)
	wg.Wait()
}
