package join

import (
	"errors"
	"fmt"
	"strings"

	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// Token is a bootstrap token: its ID is public (it names the Secret
// bootstrap-token-<id> and the cluster-info signature jws-kubeconfig-<id>),
// its secret is not.
type Token struct {
	ID, Secret string
}

// ErrBadToken is what ParseToken's errors are (errors.Is).
var ErrBadToken = errors.New("bad bootstrap token")

// ParseToken reads "<id>.<secret>" (6 and 16 characters of [a-z0-9]), as
// kubeadm's --token takes it; surrounding space (a file's newline) is
// dropped. The error does not repeat the token, which is a credential.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if !bootstraputil.IsValidBootstrapToken(s) {
		return Token{}, fmt.Errorf("%w: want <6 characters>.<16 characters> of a-z and 0-9 (the cluster's bootstrap-token file holds it)", ErrBadToken)
	}
	id, secret, _ := strings.Cut(s, ".")
	return Token{ID: id, Secret: secret}, nil
}

// String is the token as kubeadm writes it; it holds the secret.
func (t Token) String() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }
