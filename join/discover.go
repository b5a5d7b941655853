package join

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"

	"github.com/devk/devk/internal/kube"
)

const (
	// DefaultTimeout bounds Discover when ctx has no deadline. The
	// controller-manager's bootstrapsigner signs cluster-info within a
	// second of a token appearing; what takes longer is an API server
	// still starting, or a token the cluster does not know, which no
	// wait mends (kubeadm waits 5 minutes: its control plane may be a
	// machine still booting).
	DefaultTimeout = time.Minute
	// discoveryInterval is how often Discover asks again while cluster-info
	// is unreachable or not signed for the token.
	discoveryInterval = time.Second
)

// Discovery is what a joining node learns and trusts: the control-plane
// endpoint the cluster names and its CA.
type Discovery struct {
	// Server is the API server URL in cluster-info (the control-plane
	// endpoint: a load balancer once there is one).
	Server string
	// CAPEM is the cluster's CA bundle (PEM), one of which matched a pin.
	CAPEM []byte
}

var (
	// ErrNotSigned is a cluster-info without a signature for the token.
	ErrNotSigned = errors.New("cluster-info is not signed for this token")
	// ErrBadSignature is a signature that the token's secret did not make.
	ErrBadSignature = errors.New("cluster-info's signature does not match the token")
)

// Discover learns the cluster behind endpoint (host:port of an API
// server) as kubeadm's token discovery does. It reads ConfigMap
// kube-public/cluster-info anonymously without trusting the server's
// certificate yet, checks the kubeconfig in it against its detached JWS
// signature jws-kubeconfig-<token ID> (HS256 keyed by the token's
// secret: only a holder of the token can have made it, and the
// controller-manager's bootstrapsigner makes it for every token usable
// for signing), and checks the kubeconfig's CA against pins. It then
// reads cluster-info again, trusting only that CA, and requires the same
// kubeconfig. It waits (while ctx lasts, else DefaultTimeout) for an API
// server that does not answer yet and for a signature not there yet.
func Discover(ctx context.Context, endpoint string, token Token, pins []Pin) (Discovery, error) {
	if _, _, err := net.SplitHostPort(endpoint); err != nil {
		return Discovery{}, fmt.Errorf("API server endpoint %q: want host:port, such as 10.250.0.2:6443", endpoint)
	}
	if len(pins) == 0 {
		return Discovery{}, CheckPins(nil, nil)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	server := "https://" + endpoint
	untrusted, err := fetchClusterInfo(ctx, &rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, token)
	if err != nil {
		return Discovery{}, err
	}
	d, err := verifyClusterInfo(untrusted.Data, token, pins)
	if err != nil {
		return Discovery{}, fmt.Errorf("cluster-info from %s: %w", endpoint, err)
	}
	trusted, err := fetchClusterInfo(ctx, &rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{CAData: d.CAPEM}}, token)
	if err != nil {
		return Discovery{}, fmt.Errorf("cluster-info again, trusting only the pinned CA: %w", err)
	}
	if trusted.Data[bootstrapapi.KubeConfigKey] != untrusted.Data[bootstrapapi.KubeConfigKey] {
		return Discovery{}, fmt.Errorf("%s served a different cluster-info once its certificate was checked against the pinned CA: something between you and it answered the first request; do not join through it", endpoint)
	}
	return d, nil
}

// fetchClusterInfo reads cluster-info through cfg, anonymously, until it
// has a signature for token. An error of the server's certificate is not
// waited out.
func fetchClusterInfo(ctx context.Context, cfg *rest.Config, token Token) (*corev1.ConfigMap, error) {
	cs, err := kube.ClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var cm *corev1.ConfigMap
	var last error
	err = wait.PollUntilContextCancel(ctx, discoveryInterval, true, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		var verr *tls.CertificateVerificationError
		switch {
		case errors.As(err, &verr):
			return false, fmt.Errorf("the API server's certificate: %w", err)
		case err != nil:
			// A read at the deadline (cut short by it, or refused by
			// the client's rate limiter as it would pass it) says
			// nothing of the server: the reason stays the last one.
			if last == nil || !lastChance(ctx) {
				last = getError(cfg.Host, err)
			}
			return false, nil
		}
		if err := signedFor(got.Data, token); err != nil {
			last = err
			return false, nil
		}
		cm = got
		return true, nil
	})
	if err == nil {
		return cm, nil
	}
	if wait.Interrupted(err) && last != nil && !errors.Is(ctx.Err(), context.Canceled) {
		return nil, fmt.Errorf("%w (gave up waiting)", last)
	}
	return nil, err
}

// lastChance says ctx ends before the next read would start.
func lastChance(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && time.Until(dl) < discoveryInterval
}

// getError says what a failed read of cluster-info means.
func getError(server string, err error) error {
	const what = "read ConfigMap kube-public/cluster-info anonymously from %s: %w"
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf(what+" (the cluster was not made for joining: `devk up`'s bootstrap-token phase makes it)", server, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf(what+" (anonymous users may not read it: the Role and RoleBinding kube-public/kubeadm:bootstrap-signer-clusterinfo that `devk up`'s bootstrap-token phase makes are missing)", server, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf(what+" (the API server refuses anonymous requests: it needs --anonymous-auth=true, its default)", server, err)
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return fmt.Errorf(what+" (is the API server up and the endpoint right?)", server, err)
	}
	return fmt.Errorf(what, server, err)
}

// signedFor checks that cluster-info has a kubeconfig and a signature for
// token, whatever the signature says.
func signedFor(data map[string]string, token Token) error {
	if data[bootstrapapi.KubeConfigKey] == "" {
		return fmt.Errorf("cluster-info has no %s key: the cluster was not made for joining (`devk up`'s bootstrap-token phase writes it)", bootstrapapi.KubeConfigKey)
	}
	if data[bootstrapapi.JWSSignatureKeyPrefix+token.ID] != "" {
		return nil
	}
	var ids []string
	for k := range data {
		if id, ok := strings.CutPrefix(k, bootstrapapi.JWSSignatureKeyPrefix); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	signed := "no token at all: is the controller-manager running with the bootstrapsigner controller (--controllers=*,bootstrapsigner,tokencleaner)?"
	if len(ids) > 0 {
		signed = "tokens " + strings.Join(ids, ", ")
	}
	return fmt.Errorf("%w %s (it is signed for %s): the token does not exist in the cluster, has expired, or is not for signing (usage-bootstrap-signing); take the current one from the cluster's bootstrap-token file (`devk up` makes a new one when less than an hour is left)",
		ErrNotSigned, token.ID, signed)
}

// verifyClusterInfo checks cluster-info's data against the token's
// signature and the CA against pins, and reads the server and CA.
func verifyClusterInfo(data map[string]string, token Token, pins []Pin) (Discovery, error) {
	if err := signedFor(data, token); err != nil {
		return Discovery{}, err
	}
	kubeconfig := data[bootstrapapi.KubeConfigKey]
	if !jws.DetachedTokenIsValid(data[bootstrapapi.JWSSignatureKeyPrefix+token.ID], kubeconfig, token.ID, token.Secret) {
		return Discovery{}, fmt.Errorf("%w %s: the token's secret is wrong (take the token from the cluster's bootstrap-token file), or the server is not the cluster it claims to be", ErrBadSignature, token.ID)
	}
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return Discovery{}, fmt.Errorf("its kubeconfig: %w", err)
	}
	if len(cfg.Clusters) != 1 {
		return Discovery{}, fmt.Errorf("its kubeconfig names %d clusters, want 1", len(cfg.Clusters))
	}
	var d Discovery
	for _, c := range cfg.Clusters {
		d = Discovery{Server: c.Server, CAPEM: c.CertificateAuthorityData}
	}
	if u, err := url.Parse(d.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		return Discovery{}, fmt.Errorf("its kubeconfig's server %q is not an https URL", d.Server)
	}
	certs, err := certutil.ParseCertsPEM(d.CAPEM)
	if err != nil {
		return Discovery{}, fmt.Errorf("its kubeconfig's CA: %w", err)
	}
	if err := CheckPins(certs, pins); err != nil {
		return Discovery{}, err
	}
	return d, nil
}
