package cri

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// versionServer answers the CRI's Version, over gRPC on a unix socket as
// containerd does (the unit tests cannot run containerd).
type versionServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (versionServer) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "0"}, nil
}

func TestAnswers(t *testing.T) {
	ctx := context.Background()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	if err := Answers(ctx, sock); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("nothing on the socket: %v", err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, versionServer{})
	go srv.Serve(ln)
	defer srv.Stop()
	if err := Answers(ctx, sock); err != nil {
		t.Errorf("a runtime answers on %s: %v", sock, err)
	}
}
