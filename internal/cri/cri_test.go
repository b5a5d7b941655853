package cri

import (
	"context"
	"fmt"
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

// imageServer has the images of has (by reference); a pull is counted
// and fails, as a pull from a registry that is gone does.
type imageServer struct {
	runtimeapi.UnimplementedImageServiceServer
	has   map[string]string
	pulls []string
}

func (s *imageServer) ImageStatus(_ context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	if id, ok := s.has[r.Image.Image]; ok {
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: id}}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (s *imageServer) PullImage(_ context.Context, r *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	s.pulls = append(s.pulls, r.Image.Image)
	return nil, fmt.Errorf("dial tcp 127.0.0.1:5098: connection refused")
}

// TestPullPresent: an image by digest the runtime has is not pulled (a
// loaded image's registry is gone); by tag, or missing, it is.
func TestPullPresent(t *testing.T) {
	ctx := context.Background()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	loaded := "127.0.0.1:5098/kube-apiserver@sha256:" + strings.Repeat("a", 64)
	fake := &imageServer{has: map[string]string{loaded: "sha256:id", "r/pause:3.10": "sha256:p"}}
	srv := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(srv, fake)
	go srv.Serve(ln)
	defer srv.Stop()
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if id, err := c.PullImage(ctx, loaded); err != nil || id != "sha256:id" {
		t.Errorf("a present image by digest: %q, %v", id, err)
	}
	for _, ref := range []string{"r/pause:3.10", "127.0.0.1:5098/kube-apiserver@sha256:" + strings.Repeat("b", 64)} {
		if _, err := c.PullImage(ctx, ref); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s: %v, want the pull's error", ref, err)
		}
	}
	if len(fake.pulls) != 2 {
		t.Errorf("pulls %v, want the tag and the missing digest", fake.pulls)
	}
}
