// Package etcdtest runs a real etcd in-process (go.etcd.io/etcd/server/v3/embed)
// on loopback and fills it with objects encoded the way kube-apiserver
// stores them (k8s\x00 + protobuf through the Kubernetes scheme; JSON for
// CustomResourceDefinitions and APIServices), for etcdwatch's tests and
// benchmarks.
package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

const (
	// readyTimeout bounds an embedded etcd's start.
	readyTimeout = 60 * time.Second
	// DialTimeout is a test client's.
	DialTimeout = 5 * time.Second
)

// Server is an embedded single-member etcd on 127.0.0.1.
type Server struct {
	// Endpoint is the client URL, http://127.0.0.1:<port>.
	Endpoint string
	etcd     *embed.Etcd
}

// TLS names the PEM files of an etcd that serves clients over TLS and
// requires client certificates signed by CA, as kubeadm's etcd does.
type TLS struct {
	CA, Cert, Key string
}

// StartT starts an etcd of the test's own and a client of it, both closed
// when the test ends.
func StartT(t testing.TB) (*Server, *clientv3.Client) {
	t.Helper()
	srv, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

// Start runs etcd with its data under dir (which must exist),
// on free loopback ports. Fsync is off: test data need not survive a crash.
func Start(dir string) (*Server, error) { return StartTLS(dir, nil) }

// StartTLS is Start with client TLS when tlsFiles is set.
func StartTLS(dir string, tlsFiles *TLS) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		// a fresh data dir per attempt: a failed start may leave a WAL
		s, err := start(filepath.Join(dir, fmt.Sprintf("etcd-%d", attempt)), tlsFiles)
		if err == nil {
			return s, nil
		}
		// a port picked as free can be taken before etcd binds it
		lastErr = err
	}
	return nil, lastErr
}

func start(dir string, tlsFiles *TLS) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	if tlsFiles != nil {
		client.Scheme = "https"
	}
	cfg := embed.NewConfig()
	if tlsFiles != nil {
		cfg.ClientTLSInfo.CertFile = tlsFiles.Cert
		cfg.ClientTLSInfo.KeyFile = tlsFiles.Key
		cfg.ClientTLSInfo.TrustedCAFile = tlsFiles.CA
		cfg.ClientTLSInfo.ClientCertAuth = true
	}
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(readyTimeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s not ready after %s", dir, readyTimeout)
	}
	return &Server{Endpoint: client.String(), etcd: e}, nil
}

// Close stops etcd.
func (s *Server) Close() { s.etcd.Close() }

// Client connects to the server.
func (s *Server) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: DialTimeout, Logger: zap.NewNop()})
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Encode encodes obj as kube-apiserver stores the objects of its own
// types: "k8s\x00" followed by a protobuf runtime.Unknown holding
// apiVersion, kind and the object. The object's apiVersion and kind are
// filled from the scheme. A CustomResourceDefinition or an APIService
// encodes too, as a client writing protobuf would; the API server itself
// stores those as JSON (EncodeStored).
func Encode(obj runtime.Object) ([]byte, error) {
	gvk, s, err := kindOf(obj)
	if err != nil {
		return nil, err
	}
	obj = obj.DeepCopyObject()
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	var b bytes.Buffer
	if err := protobuf.NewSerializer(s, s).Encode(obj, &b); err != nil {
		return nil, fmt.Errorf("encode %T: %w", obj, err)
	}
	return b.Bytes(), nil
}

// MustEncode is Encode for fixtures that are known to encode.
func MustEncode(obj runtime.Object) []byte {
	return mustBytes(Encode(obj))
}

// mustBytes is b, or a panic with err: fixtures are known to encode.
func mustBytes(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Put stores objects under their keys in transactions of up to 128 puts
// (etcd's default --max-txn-ops), as fast loading for large fixtures.
func Put(ctx context.Context, cli *clientv3.Client, kvs map[string][]byte) error {
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("load %d keys: %w", len(ops), err)
		}
		ops = ops[:0]
		return nil
	}
	for k, v := range kvs {
		ops = append(ops, clientv3.OpPut(k, string(v)))
		if len(ops) == 128 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
