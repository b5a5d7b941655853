package registry

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestForward pulls an image through a forwarder, as a node's containerd
// does: same bytes, same digest.
func TestForward(t *testing.T) {
	addr := serve(t, t.TempDir())
	img := randomImage(t)
	want := push(t, addr+"/fwd/img:1", img)

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Forward(ctx, ForwardOptions{Addr: "127.0.0.1:0", To: addr, Ready: func(a string) { ready <- a }})
	}()
	fwd := <-ready
	for range 3 { // several connections, one after another
		ref, err := name.ParseReference(fwd+"/fwd/img:1", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Image(ref)
		if err != nil {
			t.Fatalf("pull through the forwarder: %v", err)
		}
		d, err := got.Digest()
		if err != nil || d != want {
			t.Fatalf("digest through the forwarder %v (%v), want %v", d, err, want)
		}
		if _, err := got.RawConfigFile(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Forward after cancel: %v", err)
	}
}

func TestForwardRefusesNonLoopbackTarget(t *testing.T) {
	for _, to := range []string{"192.0.2.1:5000", "example.com:5000", "5000"} {
		err := Forward(context.Background(), ForwardOptions{Addr: "127.0.0.1:0", To: to})
		if err == nil || !strings.Contains(err.Error(), "--to") {
			t.Errorf("Forward to %s: %v, want a refusal", to, err)
		}
	}
}
