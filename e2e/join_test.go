//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/join"
	"github.com/devk/devk/pki"
)

// TestJoinDiscovery runs a joining node's discovery against the shared
// cluster's real API server: cluster-info as devk up wrote it and the
// controller-manager's bootstrapsigner signed it, the token devk up made.
func TestJoinDiscovery(t *testing.T) {
	c := Cluster(t)
	cfg, paths, err := layout.Open(c.Home, "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(paths.BootstrapToken())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := join.ParseToken(string(data))
	if err != nil {
		t.Fatal(err)
	}
	caFile := pki.CertPath(paths.FirstNode().PKI(), pki.CAName)
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cas, err := certutil.ParseCertsPEM(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	pin := join.PinOf(cas[0])
	// The pin is the one kubeadm's docs compute with openssl.
	out, err := exec.Command("sh", "-c", "openssl x509 -pubkey -noout -in "+caFile+" | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex").Output()
	if err != nil {
		t.Fatalf("openssl: %v", err)
	}
	if f := strings.Fields(string(out)); len(f) == 0 || "sha256:"+f[len(f)-1] != pin.String() {
		t.Fatalf("the CA's pin is %s, openssl says %q", pin, out)
	}
	endpoint := net.JoinHostPort(cfg.FirstNode().IP, strconv.Itoa(cfg.Ports.APIServer))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t0 := time.Now()
	d, err := join.Discover(ctx, endpoint, tok, []join.Pin{pin})
	if err != nil {
		t.Fatalf("discovery with the right token and pin: %v", err)
	}
	t.Logf("discovered %s in %s", d.Server, time.Since(t0).Round(time.Millisecond))
	if d.Server != cfg.APIServerURL() || !bytes.Equal(d.CAPEM, caPEM) {
		t.Fatalf("discovered server %s and a CA of %d bytes, want %s and %s", d.Server, len(d.CAPEM), cfg.APIServerURL(), caFile)
	}

	// The bootstrap kubeconfig authenticates as the token, whose group
	// may post the node's CSR: what the kubelet's TLS bootstrap does.
	kc, err := join.BootstrapKubeconfig(d.Server, d.CAPEM, tok)
	if err != nil {
		t.Fatal(err)
	}
	kcFile := filepath.Join(t.TempDir(), "bootstrap-kubelet.conf")
	if err := os.WriteFile(kcFile, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	cs, err := kube.Client(kcFile)
	if err != nil {
		t.Fatal(err)
	}
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the bootstrap kubeconfig: %v", err)
	}
	if u := who.Status.UserInfo; u.Username != "system:bootstrap:"+tok.ID || !strings.Contains(strings.Join(u.Groups, ","), "system:bootstrappers:kubeadm:default-node-token") {
		t.Fatalf("the bootstrap kubeconfig authenticates as %+v", u)
	}
	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Verb: "create"},
	}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Allowed {
		t.Fatalf("may the bootstrap token create a CSR? %+v, %v", review.Status, err)
	}

	t.Run("wrong pin", func(t *testing.T) {
		other, err := join.ParsePin("sha256:" + strings.Repeat("0", 64))
		if err != nil {
			t.Fatal(err)
		}
		_, err = join.Discover(ctx, endpoint, tok, []join.Pin{other})
		if !errors.Is(err, join.ErrPinMismatch) || !strings.Contains(err.Error(), pin.String()) {
			t.Fatalf("discovery with a wrong pin: %v; want ErrPinMismatch naming the CA's hash %s", err, pin)
		}
		t.Log(err)
	})
	t.Run("wrong secret", func(t *testing.T) {
		bad := join.Token{ID: tok.ID, Secret: strings.Repeat("x", len(tok.Secret))}
		_, err := join.Discover(ctx, endpoint, bad, []join.Pin{pin})
		if !errors.Is(err, join.ErrBadSignature) || !strings.Contains(err.Error(), "secret is wrong") {
			t.Fatalf("discovery with a wrong secret: %v; want ErrBadSignature", err)
		}
		t.Log(err)
	})
	t.Run("unknown token", func(t *testing.T) {
		unknown := join.Token{ID: "zzzzzz", Secret: tok.Secret}
		if unknown.ID == tok.ID {
			unknown.ID = "yyyyyy"
		}
		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := join.Discover(short, endpoint, unknown, []join.Pin{pin})
		if !errors.Is(err, join.ErrNotSigned) || !strings.Contains(err.Error(), "signed for tokens "+tok.ID) {
			t.Fatalf("discovery with a token the cluster does not have: %v; want ErrNotSigned naming the token it is signed for, %s", err, tok.ID)
		}
		t.Log(err)
	})
}
