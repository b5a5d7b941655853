// Package kubeconfig writes the kubeconfigs of a control-plane node's
// components (admin.conf, kubelet.conf, controller-manager.conf ...), each
// with a client certificate the cluster CA signs, and merges the cluster's
// admin context into the user's own kubeconfig (see user.go). It is
// kubeadm's phases/kubeconfig, with devk's checks for what it may reuse.
package kubeconfig

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// Component is a component's kubeconfig: the file, the cluster it points
// at, and the user its client certificate names.
type Component struct {
	// Path is the file, <name>.conf.
	Path string
	// ClusterName and Server are the cluster's entry (layout.Config's Name
	// and APIServerURL).
	ClusterName, Server string
	// PKIDir holds the cluster CA (ca.crt, ca.key), which the kubeconfig
	// trusts and which signs its client certificate.
	PKIDir string
	// Spec is its user: the certificate's common name and organizations.
	Spec pki.KubeconfigSpec
	// Validity is the client certificate's life (0: pki's default).
	Validity time.Duration
}

// Ensure writes k's kubeconfig unless the file already points at k's
// server, trusts the cluster CA and holds a client certificate for k's
// user that the CA signed and that is not expiring: kubeconfig/<name>.
// A kubeconfig whose certificate is expiring is kept, when
// controlPlaneRunning, for certs-expiry to renew under the running
// control plane.
func Ensure(k Component, controlPlaneRunning bool) (phase.Outcome, error) {
	caPEM, err := os.ReadFile(pki.CertPath(k.PKIDir, pki.CAName))
	if err != nil {
		return phase.Done, fmt.Errorf("read the cluster CA: %w (run `devk up phase certs/ca`)", err)
	}
	// kubelet-finalize points kubelet.conf at the kubelet's rotating
	// client certificate file; that one is kept as it is.
	err = check(k.Path, k.Server, caPEM, func(certPEM []byte) error {
		return pki.CheckClientCert(k.PKIDir, pki.CAName, certPEM, k.Spec.CommonName, k.Spec.Organization, time.Now(), k.Validity)
	})
	if err == nil {
		return phase.Unchanged("reused"), nil
	}
	if errors.Is(err, pki.ErrExpiring) && controlPlaneRunning {
		return phase.Unchanged("expiring; left to certs-expiry"), nil
	}
	certPEM, keyPEM, err := pki.ClientCert(k.PKIDir, pki.CAName, k.Spec.CommonName, k.Spec.Organization, time.Now(), k.Validity)
	if err != nil {
		return phase.Done, err
	}
	data, err := Bytes(k.ClusterName, k.Server, caPEM, k.Spec.CommonName, certPEM, keyPEM)
	if err != nil {
		return phase.Done, err
	}
	if _, err := atomicfile.WriteIfChanged(k.Path, data, 0o600, ""); err != nil {
		return phase.Done, err
	}
	return phase.Changed("written"), nil
}

// Bytes is a kubeconfig with one cluster, user and context.
func Bytes(clusterName, server string, caPEM []byte, user string, certPEM, keyPEM []byte) ([]byte, error) {
	ctxName := user + "@" + clusterName
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[ctxName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = ctxName
	return clientcmd.Write(*cfg)
}

// check reports whether path is a kubeconfig for server, trusting
// caPEM, whose client certificate passes checkCert and matches its key.
func check(path, server string, caPEM []byte, checkCert func([]byte) error) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil {
		return errors.New("no current context")
	}
	cl, ai := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	if cl == nil || ai == nil {
		return errors.New("incomplete context")
	}
	if cl.Server != server || !bytes.Equal(cl.CertificateAuthorityData, caPEM) {
		return errors.New("other server or CA")
	}
	certPEM, keyPEM := ai.ClientCertificateData, ai.ClientKeyData
	if ai.ClientCertificate != "" {
		if certPEM, err = os.ReadFile(ai.ClientCertificate); err != nil {
			return err
		}
	}
	if ai.ClientKey != "" {
		if keyPEM, err = os.ReadFile(ai.ClientKey); err != nil {
			return err
		}
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return err
	}
	return checkCert(certPEM)
}
