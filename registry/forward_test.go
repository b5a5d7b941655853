package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/devk/devk/internal/syncbuf"
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

// startForward runs a forwarder until the test ends and returns its
// address.
func startForward(t *testing.T, o ForwardOptions) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	o.Ready = func(a string) { ready <- a }
	go func() { done <- Forward(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Forward after cancel: %v", err)
		}
	})
	select {
	case a := <-ready:
		return a
	case err := <-done:
		t.Fatalf("Forward: %v", err)
	}
	return ""
}

// TestForwardPullsOnly: through the forwarder only GET and HEAD reach
// the registry; every write is answered 405 UNSUPPORTED, with devk's
// credential too, and changes nothing.
func TestForwardPullsOnly(t *testing.T) {
	addr := serve(t, t.TempDir())
	img := randomImage(t)
	want := push(t, addr+"/fwd/img:1", img)
	var logged syncbuf.Buffer
	fwd := startForward(t, ForwardOptions{Addr: "127.0.0.1:0", To: addr, Log: log.New(&logged, "", 0)})
	manifest, _ := img.RawManifest()
	mt, _ := img.MediaType()
	for _, w := range []struct{ method, path, body string }{
		{http.MethodPut, "/v2/fwd/img/manifests/1", string(manifest)},
		{http.MethodPost, "/v2/fwd/img/blobs/uploads/", ""},
		{http.MethodPatch, "/v2/fwd/img/blobs/uploads/1", "x"},
		{http.MethodDelete, "/v2/fwd/img/manifests/1", ""},
		{http.MethodOptions, "/v2/", ""},
	} {
		for _, auth := range []func(*http.Request){nil, withCredentialFunc} {
			code, e := request(t, w.method, "http://"+fwd+w.path, strings.NewReader(w.body), func(r *http.Request) {
				r.Header.Set("Content-Type", string(mt))
				if auth != nil {
					auth(r)
				}
			})
			if code != http.StatusMethodNotAllowed || len(e.Errors) != 1 || e.Errors[0].Code != "UNSUPPORTED" || !strings.Contains(e.Errors[0].Message, "pulls only") {
				t.Errorf("%s %s through the forwarder (credential %v): %d %+v, want 405 UNSUPPORTED", w.method, w.path, auth != nil, code, e)
			}
		}
	}
	if !strings.Contains(logged.String(), "refused PUT /v2/fwd/img/manifests/1 from 127.0.0.1:") {
		t.Errorf("the forwarder's log does not name the refused PUT:\n%s", logged.String())
	}
	// A go-containerregistry push through it, with the credential: refused.
	ref, _ := name.ParseReference(fwd+"/fwd/img:1", name.Insecure)
	if err := remote.Write(ref, randomImage(t), testAuth(), remote.WithRetryBackoff(remote.Backoff{Steps: 1})); err == nil {
		t.Fatal("a push through the forwarder went through")
	}
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		if code, _ := request(t, m, "http://"+fwd+"/v2/fwd/img/manifests/1", nil, nil); code != http.StatusOK {
			t.Errorf("%s through the forwarder: %d", m, code)
		}
	}
	if d, err := remote.Head(ref); err != nil || d.Digest != want {
		t.Fatalf("the tag through the forwarder: %v, %v; pushed %s", d, err, want)
	}
}

// TestForwardOnlyFromTheBridge plays a cluster's node and a LAN
// neighbour with two network namespaces of its own: the node (on the
// device the forwarder is bound to, from the node subnet) pulls; the
// node from an address outside the subnet, and the neighbour that routes
// the subnet via this host, are refused, while a forwarder bound to no
// device would answer the neighbour.
func TestForwardOnlyFromTheBridge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "nsenter", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	addr := serve(t, t.TempDir())
	push(t, addr+"/fwd/img:1", randomImage(t))

	b := make([]byte, 2)
	rand.Read(b)
	r := int(b[0]) &^ 1 // even: 10.253.r.0/23 is the node side
	id := hex.EncodeToString(b)
	node, lan := "dkt-fwd-n"+id, "dkt-fwd-l"+id
	nodeVeth, lanVeth := "dktn"+id, "dktl"+id
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", node).Run()
		exec.Command("ip", "netns", "del", lan).Run()
		exec.Command("ip", "link", "del", nodeVeth).Run()
		exec.Command("ip", "link", "del", lanVeth).Run()
	})
	hostIP := fmt.Sprintf("10.253.%d.1", r)
	inside, outside := fmt.Sprintf("10.253.%d.2", r), fmt.Sprintf("10.253.%d.2", r+1)
	lanHost, lanIP := fmt.Sprintf("10.254.%d.1", r), fmt.Sprintf("10.254.%d.2", r)
	for _, cmd := range [][]string{
		{"ip", "netns", "add", node},
		{"ip", "netns", "add", lan},
		{"ip", "link", "add", nodeVeth, "type", "veth", "peer", "name", "eth0", "netns", node},
		{"ip", "link", "add", lanVeth, "type", "veth", "peer", "name", "eth0", "netns", lan},
		{"ip", "addr", "add", hostIP + "/23", "dev", nodeVeth},
		{"ip", "addr", "add", lanHost + "/24", "dev", lanVeth},
		{"ip", "link", "set", nodeVeth, "up"},
		{"ip", "link", "set", lanVeth, "up"},
		{"ip", "-n", node, "addr", "add", inside + "/23", "dev", "eth0"},
		{"ip", "-n", node, "addr", "add", outside + "/23", "dev", "eth0"},
		{"ip", "-n", node, "link", "set", "eth0", "up"},
		{"ip", "-n", lan, "addr", "add", lanIP + "/24", "dev", "eth0"},
		{"ip", "-n", lan, "link", "set", "eth0", "up"},
		// The neighbour routes the node subnet via this host.
		{"ip", "-n", lan, "route", "add", fmt.Sprintf("10.253.%d.0/23", r), "via", lanHost},
	} {
		run(cmd...)
	}
	_, subnet, _ := net.ParseCIDR(fmt.Sprintf("10.253.%d.0/24", r))
	fwd := startForward(t, ForwardOptions{Addr: hostIP + ":0", To: addr, Device: nodeVeth, Allow: subnet})
	// curl answers the HTTP status, or 000 when the connection failed.
	curl := func(ns, method, from, url string) string {
		args := []string{"--net=/run/netns/" + ns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "3", "-X", method}
		if from != "" {
			args = append(args, "--interface", from)
		}
		out, _ := exec.Command("nsenter", append(args, url)...).Output()
		return string(out)
	}
	url := "http://" + fwd + "/v2/fwd/img/manifests/1"
	if got := curl(node, "GET", "", url); got != "200" {
		t.Errorf("the node's pull: %s, want 200", got)
	}
	if got := curl(node, "HEAD", "", url); got != "200" {
		t.Errorf("the node's HEAD: %s, want 200", got)
	}
	if got := curl(node, "PUT", "", url); got != "405" {
		t.Errorf("the node's PUT: %s, want 405", got)
	}
	if got := curl(node, "GET", outside, url); got != "000" {
		t.Errorf("from %s, outside the node subnet %s: %s, want the connection closed", outside, subnet, got)
	}
	// The control: with its subnet allowed, that address gets in, so it
	// was the source check that closed the connection.
	_, wide, _ := net.ParseCIDR(hostIP + "/23")
	widened := startForward(t, ForwardOptions{Addr: hostIP + ":0", To: addr, Device: nodeVeth, Allow: wide})
	if got := curl(node, "GET", outside, "http://"+widened+"/v2/fwd/img/manifests/1"); got != "200" {
		t.Errorf("the control: from %s to a forwarder allowing %s: %s, want 200: the test does not show what the source check stops", outside, wide, got)
	}
	if got := curl(lan, "GET", "", url); got != "000" {
		t.Errorf("the LAN neighbour: %s, want no connection", got)
	}
	// The host itself still can (up checks the forwarder so): its
	// packets to its own address are taken by the bound socket.
	if out, _ := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "3", url).Output(); string(out) != "200" {
		t.Errorf("from the host itself: %s, want 200", out)
	}

	// The device binding alone stops the neighbour: allowed by source,
	// it still cannot connect; bound to no device (the control), it
	// would get in.
	_, lanNet, _ := net.ParseCIDR(lanIP + "/24")
	bound := startForward(t, ForwardOptions{Addr: hostIP + ":0", To: addr, Device: nodeVeth, Allow: lanNet})
	if got := curl(lan, "GET", "", "http://"+bound+"/v2/fwd/img/manifests/1"); got != "000" {
		t.Errorf("the LAN neighbour, its subnet allowed, to a forwarder bound to %s: %s, want no connection", nodeVeth, got)
	}
	open := startForward(t, ForwardOptions{Addr: hostIP + ":0", To: addr, Allow: lanNet})
	if got := curl(lan, "GET", "", "http://"+open+"/v2/fwd/img/manifests/1"); got != "200" {
		t.Errorf("the control (no device): the neighbour got %s, want 200: the test does not show what the device binding stops", got)
	}
}
