package join

import (
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// The names in a bootstrap kubeconfig, kubeadm's.
const (
	bootstrapCluster = "kubernetes"
	bootstrapUser    = "tls-bootstrap-token-user"
)

// BootstrapKubeconfig is the kubelet's --bootstrap-kubeconfig: the
// server and CA discovery found, and the bootstrap token as the
// credential. With it the kubelet posts a CSR for its client certificate
// (the token's group may, by the ClusterRoleBinding
// kubeadm:kubelet-bootstrap), the controller-manager's csrapproving
// controller approves it (kubeadm:node-autoapprove-bootstrap) and its
// csrsigning controller signs it with the cluster CA; the kubelet then
// writes its --kubeconfig and uses the certificate from then on. It
// holds the token's secret: write it 0600.
func BootstrapKubeconfig(server string, caPEM []byte, token Token) ([]byte, error) {
	if u, err := url.Parse(server); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("bootstrap kubeconfig: server %q is not an https URL", server)
	}
	if _, err := certutil.ParseCertsPEM(caPEM); err != nil {
		return nil, fmt.Errorf("bootstrap kubeconfig: the CA: %w", err)
	}
	if !bootstraputil.IsValidBootstrapToken(token.String()) {
		return nil, fmt.Errorf("bootstrap kubeconfig: %w", ErrBadToken)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[bootstrapCluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[bootstrapUser] = &clientcmdapi.AuthInfo{Token: token.String()}
	name := bootstrapUser + "@" + bootstrapCluster
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: bootstrapCluster, AuthInfo: bootstrapUser}
	cfg.CurrentContext = name
	return clientcmd.Write(*cfg)
}
