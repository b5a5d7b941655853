package joinnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"k8s.io/client-go/kubernetes"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/devk/devk/cluster/internal/bootstrap"
)

// certificateKeyBytes is the length of upload-certs' key (AES-256), as
// kubeadm's own.
const certificateKeyBytes = 32

// KubeadmCredentials are what `kubeadm join` authenticates a new node
// with, on a cluster kubeadm bootstrapped: devk's bootstrap token (made,
// or reused while it has time left; kubeadm's RBAC admits its group),
// the pin of the cluster CA in caFile, and for a control-plane node a new
// certificate key for upload-certs.
type KubeadmCredentials struct {
	Token          string
	CAPins         []string
	CertificateKey string
}

// NewKubeadmCredentials makes a joining node's credentials.
func NewKubeadmCredentials(ctx context.Context, cs kubernetes.Interface, caFile string, controlPlane bool) (KubeadmCredentials, error) {
	var k KubeadmCredentials
	tok, _, err := bootstrap.EnsureToken(ctx, cs, time.Now())
	if err != nil {
		return k, err
	}
	k.Token = bootstraputil.TokenFromIDAndSecret(tok.ID, tok.Secret)
	pins, err := Pins(nil, caFile)
	if err != nil {
		return k, err
	}
	k.CAPins = []string{pins[0].String()}
	if controlPlane {
		key := make([]byte, certificateKeyBytes)
		if _, err := rand.Read(key); err != nil {
			return k, err
		}
		k.CertificateKey = hex.EncodeToString(key)
	}
	return k, nil
}
