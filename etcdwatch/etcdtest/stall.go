package etcdtest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// http2Preface opens every HTTP/2 (gRPC) client connection.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frameHeaders is the HTTP/2 frame type that opens a stream: one per
// gRPC call from the client.
const frameHeaders = 0x1

// StallAfterT puts a TCP proxy in front of endpoint (an http:// client
// URL) that forwards the first calls gRPC clients make and then goes
// silent: from the client's call number calls+1 on, it forwards nothing
// more, in either direction, but keeps every connection open, as an etcd
// that hangs (stopped, overloaded, partitioned) does. It returns the
// proxy's client URL; the proxy stops when the test ends.
func StallAfterT(t testing.TB, endpoint string, calls int) string {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{target: u.Host, calls: calls, stalled: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		p.closeAll()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.serve(c)
			}()
		}
	}()
	return "http://" + l.Addr().String()
}

type stallProxy struct {
	target string
	calls  int

	mu      sync.Mutex
	seen    int // client calls (HTTP/2 HEADERS frames) forwarded
	conns   []net.Conn
	stalled chan struct{} // closed when the proxy stops answering
	once    sync.Once
}

func (p *stallProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *stallProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// call counts one client call and reports whether it may pass.
func (p *stallProxy) call() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen >= p.calls {
		p.once.Do(func() { close(p.stalled) })
		return false
	}
	p.seen++
	return true
}

func (p *stallProxy) serve(client net.Conn) {
	p.track(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.track(server)
	go func() {
		// server to client: bytes as they come, until the stall
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			select {
			case <-p.stalled:
				return
			default:
			}
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				client.Close()
				return
			}
		}
	}()
	// client to server: frame by frame, counting the calls
	if err := p.forwardFrames(client, server); err != nil && !errors.Is(err, net.ErrClosed) {
		server.Close()
	}
}

// forwardFrames copies the client's HTTP/2 frames to the server until a
// call the proxy does not let through, then holds the connection open.
// A client that does not speak HTTP/2 (a bare TCP check) is forwarded as
// it is.
func (p *stallProxy) forwardFrames(client, server net.Conn) error {
	preface := make([]byte, len(http2Preface))
	n, err := io.ReadFull(client, preface)
	if _, werr := server.Write(preface[:n]); werr != nil || err != nil {
		return err
	}
	if string(preface) != http2Preface {
		_, err := io.Copy(server, client)
		return err
	}
	var header [9]byte
	for {
		if _, err := io.ReadFull(client, header[:]); err != nil {
			return err
		}
		length := int(binary.BigEndian.Uint32(append([]byte{0}, header[:3]...)))
		payload := make([]byte, length)
		if _, err := io.ReadFull(client, payload); err != nil {
			return err
		}
		if header[3] == frameHeaders && !p.call() {
			_, err := io.Copy(io.Discard, client) // silent until the client gives up
			return err
		}
		if _, err := server.Write(append(header[:], payload...)); err != nil {
			return err
		}
	}
}
