package etcdwatch

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/etcdwatch/etcdtest"
	"github.com/devk/devk/internal/progress"
)

// testEtcd is one embedded etcd shared by the integration tests of this
// package; tests that compact history start their own.
var testEtcd *etcdtest.Server

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		// fuzz workers only run FuzzDecode, which needs no etcd
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "etcdwatch-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testEtcd, err = etcdtest.Start(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	testEtcd.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helperEnv makes the test binary act as the command `devk etcd diff`
// runs: it writes to etcd like kubectl would, then exits.
const helperEnv = "ETCDWATCH_TEST_HELPER"

// helperMain: ETCDWATCH_TEST_HELPER=<endpoint>, then one argument per
// write: put-configmap:<key>, put-service:<key>:<port>, delete:<key>,
// exit:<code>.
func helperMain() int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv(helperEnv)}, DialTimeout: etcdtest.DialTimeout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer cli.Close()
	ctx := context.Background()
	fmt.Println("helper: writing to etcd")
	for _, a := range os.Args[1:] {
		op, arg, _ := strings.Cut(a, ":")
		switch op {
		case "put-configmap":
			ns, name := nsName(arg)
			_, err = cli.Put(ctx, arg, string(etcdtest.MustEncode(etcdtest.ConfigMap(ns, name, 1))))
		case "put-service":
			key, port, _ := strings.Cut(arg, ":")
			ns, name := nsName(key)
			svc := etcdtest.Service(ns, name, 3) // as loadNamespace wrote it
			fmt.Sscan(port, &svc.Spec.Ports[0].Port)
			_, err = cli.Put(ctx, key, string(etcdtest.MustEncode(svc)))
		case "delete":
			_, err = cli.Delete(ctx, arg)
		case "exit":
			var code int
			fmt.Sscan(arg, &code)
			return code
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	return 0
}

// nsName takes namespace and name from the end of a key.
func nsName(key string) (string, string) {
	parts := strings.Split(key, "/")
	return parts[len(parts)-2], parts[len(parts)-1]
}

// helperCommand is the command line that runs this binary as the helper.
func helperCommand(args ...string) []string {
	return append([]string{os.Args[0]}, args...)
}

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := testEtcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func conn() ConnOptions {
	return ConnOptions{Endpoints: []string{testEtcd.Endpoint}, Home: "/nonexistent", KubeadmDir: "/nonexistent"}
}

func put(t *testing.T, cli *clientv3.Client, key string, value []byte) int64 {
	t.Helper()
	resp, err := cli.Put(context.Background(), key, string(value))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func del(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Delete(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func rev(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), "\x00", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// How long and how often waitFor looks.
const (
	waitTimeout  = 20 * time.Second
	waitInterval = 10 * time.Millisecond
)

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), waitInterval, waitTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// notes records a reporter's Infof lines.
type notes struct {
	mu    sync.Mutex
	lines []string
}

func (n *notes) Start(string)                       {}
func (n *notes) Done(string, time.Duration, string) {}
func (n *notes) Fail(string, time.Duration, error)  {}
func (n *notes) Skip(string, string)                {}
func (n *notes) Debugf(string, ...any)              {}
func (n *notes) Progress(string, progress.Status)   {}
func (n *notes) Infof(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lines = append(n.lines, fmt.Sprintf(format, args...))
}

func (n *notes) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.Join(n.lines, "\n")
}
