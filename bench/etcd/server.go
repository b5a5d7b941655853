package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/devk/devk/etcdwatch/etcdtest"
)

const (
	// endpointLine starts the line the -serve child prints once etcd
	// serves.
	endpointLine = "ENDPOINT "
	// stopGrace is how long the child may take to stop once its stdin
	// closes, before it is killed.
	stopGrace = 20 * time.Second
	// dialTimeout is the bench's own clients' (not devk's).
	dialTimeout = 5 * time.Second
	// maxRecvMsgSize lets the dump-and-diff read a page of large values.
	maxRecvMsgSize = 256 << 20
)

// serveEtcd runs until stdin closes.
func serveEtcd(dir string, preload int) error {
	srv, err := etcdtest.Start(dir)
	if err != nil {
		return err
	}
	defer srv.Close()
	if preload > 0 {
		cli, err := newClient(srv.Endpoint)
		if err != nil {
			return err
		}
		err = etcdtest.Put(context.Background(), cli, etcdtest.Objects(preload))
		cli.Close()
		if err != nil {
			return err
		}
	}
	fmt.Println(endpointLine + srv.Endpoint)
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// server is etcd in a child process.
type server struct {
	endpoint string
	cmd      *exec.Cmd
	stdin    io.Closer
}

func startServer(dir string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-serve", dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, endpointLine) {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("etcd child did not start: %q %v", line, err)
	}
	return &server{endpoint: strings.TrimSpace(strings.TrimPrefix(line, endpointLine)), cmd: cmd, stdin: stdin}, nil
}

func (s *server) stop() {
	s.stdin.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopGrace):
		s.cmd.Process.Kill()
		<-done
	}
}

func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: dialTimeout, Logger: zap.NewNop(), MaxCallRecvMsgSize: maxRecvMsgSize})
}

func currentRev(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}
