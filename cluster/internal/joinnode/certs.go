package joinnode

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/join/certshare"
)

// certKeyTokenDescription marks the short-lived token that owns Secret
// kubeadm-certs, as kubeadm describes its own.
const certKeyTokenDescription = "Proxy for managing TTL for the kubeadm-certs secret"

// ShareCerts is kubeadm's upload-certs then download-certs: devk is on
// both sides of the join, so it uploads the shared certificates in from
// with the cluster's admin client cs and a certificate key of this join
// only, then downloads them into to as the joining node does, with its
// bootstrap kubeconfig alone (each request bounded by requestTimeout).
// It returns the files it wrote.
func ShareCerts(ctx context.Context, cs kubernetes.Interface, from, to, bootstrapKubeconfig string, requestTimeout time.Duration) ([]string, error) {
	key, err := certshare.NewCertificateKey()
	if err != nil {
		return nil, err
	}
	tok, err := bootstrap.NewToken(time.Now())
	if err != nil {
		return nil, err
	}
	tok.Expires = time.Now().Add(certshare.TokenTTL)
	// No usages: it only owns the Secret, so that tokencleaner deletes
	// both when it expires, as kubeadm's does.
	owner := tok.SecretFor(certKeyTokenDescription, nil)
	if _, err := kube.Apply(ctx, cs.CoreV1().Secrets(metav1.NamespaceSystem), bootstraputil.BootstrapTokenSecretName(tok.ID), owner); err != nil {
		return nil, fmt.Errorf("the token that owns the uploaded certificates: %w", err)
	}
	if err := certshare.Upload(ctx, cs, from, key, tok.ID); err != nil {
		return nil, fmt.Errorf("upload-certs: %w", err)
	}
	bs, err := kube.Client(bootstrapKubeconfig, kube.WithTimeout(requestTimeout))
	if err != nil {
		return nil, fmt.Errorf("the node's bootstrap kubeconfig: %w (run the discovery phase again)", err)
	}
	written, err := certshare.Download(ctx, bs, key, to)
	if err != nil {
		return nil, fmt.Errorf("download-certs: %w", err)
	}
	return written, nil
}
