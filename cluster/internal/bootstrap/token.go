// Package bootstrap makes in the API what kubeadm's upload-config,
// mark-control-plane and bootstrap-token phases make: the devk-config
// ConfigMap and admin.conf's binding to cluster-admin, a control-plane
// node's label and taint, the bootstrap token with the RBAC that lets its
// holders join, and the cluster-info ConfigMap they discover the cluster
// from. Its functions take a clientset and explicit values; cluster's
// phases call them.
package bootstrap

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	bootstrapsecrets "k8s.io/cluster-bootstrap/util/secrets"

	"github.com/devk/devk/internal/kube"
)

const (
	// NodeBootstrappersGroup is the group a bootstrap token's holder
	// authenticates in, as kubeadm's default node token.
	NodeBootstrappersGroup = "system:bootstrappers:kubeadm:default-node-token"
	tokenDescription       = "devk bootstrap token for joining nodes"

	// TokenTTL is a new bootstrap token's life; one with less than
	// TokenMinLeft left is replaced.
	TokenTTL     = 24 * time.Hour
	TokenMinLeft = time.Hour
)

// Token is a bootstrap token and when it expires.
type Token struct {
	ID, Secret string
	Expires    time.Time
}

// reusableToken finds devk's bootstrap token among the Secrets, if one has
// more than TokenMinLeft left.
func reusableToken(secrets []corev1.Secret, now time.Time) (Token, bool) {
	for _, s := range secrets {
		if bootstrapsecrets.GetData(&s, bootstrapapi.BootstrapTokenDescriptionKey) != tokenDescription {
			continue
		}
		id := bootstrapsecrets.GetData(&s, bootstrapapi.BootstrapTokenIDKey)
		secret := bootstrapsecrets.GetData(&s, bootstrapapi.BootstrapTokenSecretKey)
		left, expired := bootstrapsecrets.GetExpiration(&s, now)
		if expired || left <= TokenMinLeft || !bootstraputil.IsValidBootstrapToken(bootstraputil.TokenFromIDAndSecret(id, secret)) {
			continue
		}
		return Token{ID: id, Secret: secret, Expires: now.Add(left)}, true
	}
	return Token{}, false
}

// NewToken makes a token that expires TokenTTL from now.
func NewToken(now time.Time) (Token, error) {
	tok, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return Token{}, err
	}
	m := bootstraputil.BootstrapTokenRegexp.FindStringSubmatch(tok)
	if m == nil {
		return Token{}, fmt.Errorf("generated bootstrap token has an unexpected form")
	}
	return Token{ID: m[1], Secret: m[2], Expires: now.Add(TokenTTL)}, nil
}

// secret is the token's Secret as kubeadm makes it, for authentication
// (joining nodes) and signing (cluster-info).
func (t Token) secret() *corev1ac.SecretApplyConfiguration {
	return t.SecretFor(tokenDescription, map[string][]byte{
		bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
		bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
		bootstrapapi.BootstrapTokenExtraGroupsKey:      []byte(NodeBootstrappersGroup),
	})
}

// SecretFor is the token's Secret with its description and usages.
func (t Token) SecretFor(description string, usages map[string][]byte) *corev1ac.SecretApplyConfiguration {
	data := map[string][]byte{
		bootstrapapi.BootstrapTokenDescriptionKey: []byte(description),
		bootstrapapi.BootstrapTokenIDKey:          []byte(t.ID),
		bootstrapapi.BootstrapTokenSecretKey:      []byte(t.Secret),
		bootstrapapi.BootstrapTokenExpirationKey:  []byte(t.Expires.UTC().Format(time.RFC3339)),
	}
	maps.Copy(data, usages)
	return corev1ac.Secret(bootstraputil.BootstrapTokenSecretName(t.ID), metav1.NamespaceSystem).
		WithType(bootstrapapi.SecretTypeBootstrapToken).WithData(data)
}

// EnsureToken applies devk's bootstrap token: the one in the API while
// it has more than TokenMinLeft left, else a new one. It reports whether
// it wrote the Secret.
func EnsureToken(ctx context.Context, cs kubernetes.Interface, now time.Time) (Token, bool, error) {
	list, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstrapapi.SecretTypeBootstrapToken)})
	if err != nil {
		return Token{}, false, fmt.Errorf("list bootstrap tokens: %w", err)
	}
	tok, ok := reusableToken(list.Items, now)
	if !ok {
		if tok, err = NewToken(now); err != nil {
			return Token{}, false, err
		}
	}
	name := bootstraputil.BootstrapTokenSecretName(tok.ID)
	changed, err := kube.Apply(ctx, cs.CoreV1().Secrets(metav1.NamespaceSystem), name, tok.secret())
	if err != nil {
		return Token{}, false, fmt.Errorf("the bootstrap token: %w", err)
	}
	return tok, changed, nil
}

// ApplyNodeRBAC binds what lets a token's holders post node CSRs and get
// them approved, and auto-approves node certificate rotation, as kubeadm
// does; it returns how many bindings it wrote.
func ApplyNodeRBAC(ctx context.Context, cs kubernetes.Interface) (int, error) {
	bindings := []struct {
		name, role string
		subject    *rbacv1ac.SubjectApplyConfiguration
	}{
		{"kubeadm:kubelet-bootstrap", "system:node-bootstrapper", kube.Group(NodeBootstrappersGroup)},
		{"kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", kube.Group(NodeBootstrappersGroup)},
		{"kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", kube.Group("system:nodes")},
	}
	n := 0
	for _, b := range bindings {
		changed, err := kube.ApplyClusterRoleBinding(ctx, cs, b.name, b.role, b.subject)
		if err != nil {
			return n, fmt.Errorf("RBAC %s: %w", b.name, err)
		}
		if changed {
			n++
		}
	}
	return n, nil
}
