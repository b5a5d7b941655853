package cri

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestTailLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	var b strings.Builder
	for _, l := range []string{
		"2026-11-29T18:00:00.000000001Z stderr F I1129 starting",
		"2026-11-29T18:00:00.000000002Z stdout F listening",
		"2026-11-29T18:00:00.000000003Z stderr P partial ",
		"2026-11-29T18:00:00.000000004Z stderr F E1129 failed: bind: address in use",
		"a line without the CRI prefix",
	} {
		b.WriteString(l + "\n")
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
	got, err := TailLog(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"partial ", "E1129 failed: bind: address in use", "a line without the CRI prefix"}
	if !slices.Equal(got, want) {
		t.Fatalf("TailLog = %q, want %q", got, want)
	}
	if _, err := TailLog(filepath.Join(t.TempDir(), "none"), 3); err == nil {
		t.Fatal("a missing log read without error")
	}
}

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
