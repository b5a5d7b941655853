// Package certshare hands a joining control-plane node the certificates
// and keys every control-plane node shares, as kubeadm's upload-certs and
// download-certs phases do (cmd/kubeadm/app/phases/copycerts): each file
// encrypted with AES-256-GCM under a certificate key, in Secret
// kube-system/kubeadm-certs, owned by a short-lived bootstrap token so
// that the controller-manager's tokencleaner deletes it with the token,
// and readable by the bootstrappers' group, which the joining node's
// bootstrap token is in. The format is kubeadm's: a Secret Upload makes
// is one `kubeadm join --control-plane --certificate-key` downloads, and
// Download reads one `kubeadm init phase upload-certs` made.
package certshare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	bootstrapsecrets "k8s.io/cluster-bootstrap/util/secrets"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/pki"
)

// kubeadm's names, which both sides of a join must agree on.
const (
	// Namespace and SecretName are where the encrypted files are
	// (kubeadm's KubeadmCertsSecret).
	Namespace  = metav1.NamespaceSystem
	SecretName = "kubeadm-certs"
	// RBACName names the Role and the RoleBinding that let
	// BootstrappersGroup get the Secret (kubeadm's
	// KubeadmCertsClusterRoleName, a Role despite the name).
	RBACName = "kubeadm:" + SecretName
	// BootstrappersGroup is the group a joining node's bootstrap token
	// authenticates in (its auth-extra-groups; kubeadm's
	// NodeBootstrapTokenAuthGroup).
	BootstrappersGroup = "system:bootstrappers:kubeadm:default-node-token"
	// TokenTTL is how long the token that owns the Secret lives, and so
	// the Secret (kubeadm's DefaultCertTokenDuration): long enough to
	// join the nodes, short enough that the keys do not linger in the
	// API. The caller makes the token; Upload refuses one that never
	// expires.
	TokenTTL = 2 * time.Hour
)

// Directory and file modes of what Download writes, as kubeadm's
// keyutil.WriteKey and certutil.WriteCert write them.
const (
	dirPerm  os.FileMode = 0o755
	keyPerm  os.FileMode = 0o600
	certPerm os.FileMode = 0o644
)

// frontProxyCAName is the front-proxy CA under the pki dir (pki.Specs).
const frontProxyCAName = "front-proxy-ca"

var (
	// ErrNoSecret is a cluster without Secret kube-system/kubeadm-certs:
	// never uploaded, or deleted with its token.
	ErrNoSecret = errors.New("no Secret " + Namespace + "/" + SecretName)
	// ErrAltered is a Secret some of whose values do not decrypt with
	// the key the others decrypt with.
	ErrAltered = errors.New("values of Secret " + Namespace + "/" + SecretName + " were altered")
	// ErrDiffers is a file under the pki dir that holds other bytes than
	// the cluster's: Download replaces none of them.
	ErrDiffers = errors.New("refusing to overwrite files that differ from the cluster's shared certificates and keys")
)

// kind is what a shared file holds, which says how it is checked and
// its mode.
type kind int

const (
	certificate kind = iota
	privateKey
	publicKey
)

// sharedFile is one file every control-plane node has the same of.
type sharedFile struct {
	// name is its path under the pki dir, kubeadm's ("etcd/ca.crt").
	name string
	kind kind
	// mayLack marks a CA's key, which an external CA keeps to itself:
	// kubeadm uploads it empty and writes nothing for it.
	mayLack bool
}

// sharedFiles is what kubeadm's certsToTransfer shares with a local etcd,
// each key before its certificate: Download writes in this order, so a
// crash leaves a key without its certificate (which pki.Check rejects and
// a second Download completes), never a certificate without its key.
var sharedFiles = func() []sharedFile {
	var out []sharedFile
	for _, ca := range []string{pki.CAName, frontProxyCAName, layout.EtcdCAName} {
		out = append(out,
			sharedFile{name: pki.KeyPath("", ca), kind: privateKey, mayLack: true},
			sharedFile{name: pki.CertPath("", ca), kind: certificate})
	}
	return append(out,
		sharedFile{name: pki.SAKeyName, kind: privateKey},
		sharedFile{name: pki.SAPubName, kind: publicKey})
}()

// Shared reports whether pkiDir already holds every file the upload
// shares, byte for byte as fromDir holds them (a control-plane node's
// pki dir that a download filled before): a join then has nothing to
// download, and need not upload.
func Shared(fromDir, pkiDir string) bool {
	for _, f := range sharedFiles {
		want, err := os.ReadFile(filepath.Join(fromDir, f.name))
		if err != nil {
			return false
		}
		got, err := os.ReadFile(filepath.Join(pkiDir, f.name))
		if err != nil || !bytes.Equal(got, want) {
			return false
		}
	}
	return true
}

// dataKey is the file's key in the Secret: its name with "/" as "-"
// ("etcd-ca.crt"), as kubeadm's certOrKeyNameToSecretName.
func (f sharedFile) dataKey() string { return strings.ReplaceAll(filepath.ToSlash(f.name), "/", "-") }

func (f sharedFile) perm() os.FileMode {
	if f.kind == privateKey {
		return keyPerm
	}
	return certPerm
}

// check says whether b is what f holds, by the parsers kubeadm's
// download tells keys from certificates with, so that what one side
// accepts the other does too.
func (f sharedFile) check(b []byte) error {
	var err error
	var what string
	switch f.kind {
	case certificate:
		what = "PEM certificate"
		_, err = certutil.ParseCertsPEM(b)
	case privateKey:
		what = "PEM private key"
		_, err = keyutil.ParsePrivateKeyPEM(b)
	case publicKey:
		what = "PEM public key"
		_, err = keyutil.ParsePublicKeysPEM(b)
	}
	if err != nil {
		return fmt.Errorf("not a %s: %w", what, err)
	}
	return nil
}

// Upload is kubeadm's upload-certs: it encrypts the shared certificates
// and keys under pkiDir (a control-plane node's) with certificateKey,
// stores them in Secret kube-system/kubeadm-certs owned by the bootstrap
// token tokenID (which the caller made, living TokenTTL: the Secret goes
// with it), and lets BootstrappersGroup get that Secret. A Secret already
// there is replaced whole. Every file is read and checked before the
// cluster is written to.
func Upload(ctx context.Context, cs kubernetes.Interface, pkiDir, certificateKey, tokenID string) error {
	key, err := ParseCertificateKey(certificateKey)
	if err != nil {
		return err
	}
	owner, err := tokenOwner(ctx, cs, tokenID, time.Now())
	if err != nil {
		return err
	}
	data, err := readShared(pkiDir, key)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: Namespace, OwnerReferences: []metav1.OwnerReference{owner}},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
	if err := createOrReplace(ctx, cs, secret); err != nil {
		return fmt.Errorf("write Secret %s/%s: %w", Namespace, SecretName, err)
	}
	return applyRBAC(ctx, cs)
}

// tokenOwner is the owner reference to the bootstrap token's Secret, as
// kubeadm makes it (a controller reference that blocks the owner's
// deletion until the garbage collector has deleted the certificates).
// The token must be one the tokencleaner will delete: a bootstrap token
// that has an expiration, not yet passed.
func tokenOwner(ctx context.Context, cs kubernetes.Interface, tokenID string, now time.Time) (metav1.OwnerReference, error) {
	if !bootstraputil.IsValidBootstrapTokenID(tokenID) {
		return metav1.OwnerReference{}, fmt.Errorf("bootstrap token ID %q: want the 6 characters of a-z and 0-9 before the token's dot", tokenID)
	}
	name := bootstraputil.BootstrapTokenSecretName(tokenID)
	tok, err := cs.CoreV1().Secrets(Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return metav1.OwnerReference{}, fmt.Errorf("bootstrap token %s, which is to own Secret %s/%s, does not exist (no Secret %s/%s): make it first, expiring in %s as kubeadm's does", tokenID, Namespace, SecretName, Namespace, name, TokenTTL)
	case err != nil:
		return metav1.OwnerReference{}, fmt.Errorf("read bootstrap token Secret %s/%s: %w", Namespace, name, err)
	}
	if tok.Type != bootstrapapi.SecretTypeBootstrapToken {
		return metav1.OwnerReference{}, fmt.Errorf("bootstrap token Secret %s/%s is of type %q, not %q: the tokencleaner deletes only bootstrap tokens, so the certificates it owned would never be deleted; give a bootstrap token's ID", Namespace, name, tok.Type, bootstrapapi.SecretTypeBootstrapToken)
	}
	if bootstrapsecrets.GetData(tok, bootstrapapi.BootstrapTokenExpirationKey) == "" {
		return metav1.OwnerReference{}, fmt.Errorf("bootstrap token %s never expires, so the encrypted keys it owned would stay in the cluster for ever: make a token that expires (kubeadm's lives %s)", tokenID, TokenTTL)
	}
	if _, expired := bootstrapsecrets.GetExpiration(tok, now); expired {
		return metav1.OwnerReference{}, fmt.Errorf("bootstrap token %s has expired (or its expiration does not parse): the tokencleaner deletes it, and the certificates with it; make a new one", tokenID)
	}
	return *metav1.NewControllerRef(tok, corev1.SchemeGroupVersion.WithKind("Secret")), nil
}

// readShared reads, checks and encrypts every shared file: the Secret's
// data. A CA key that is missing (an external CA's) is sent empty, as
// kubeadm sends it; any other missing file is an error.
func readShared(pkiDir string, key Key) (map[string][]byte, error) {
	data := make(map[string][]byte, len(sharedFiles))
	for _, f := range sharedFiles {
		path := filepath.Join(pkiDir, f.name)
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && f.mayLack:
			data[f.dataKey()] = []byte{}
			continue
		case err != nil:
			return nil, fmt.Errorf("read %s: %w (uploading needs a control-plane node's pki dir: its CAs and the service-account key pair)", path, err)
		}
		if err := f.check(b); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if data[f.dataKey()], err = encrypt(key, b); err != nil {
			return nil, fmt.Errorf("encrypt %s: %w", path, err)
		}
	}
	return data, nil
}

// createOrReplace writes s whole, as kubeadm's CreateOrUpdate does. Not a
// server-side apply: apply merges, so an owner reference or data key that
// another manager set (kubeadm's own upload, with an earlier token's
// controller reference) would stay beside ours, and two controller
// references are refused; the Secret must be exactly this upload.
func createOrReplace(ctx context.Context, cs kubernetes.Interface, s *corev1.Secret) error {
	secrets := cs.CoreV1().Secrets(s.Namespace)
	_, err := secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: kube.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: kube.FieldManager})
	}
	return err
}

// applyRBAC lets BootstrappersGroup get the Secret and nothing else: the
// joining node reads it with its bootstrap token before it has any other
// credential.
func applyRBAC(ctx context.Context, cs kubernetes.Interface) error {
	role := rbacv1ac.Role(RBACName, Namespace).WithRules(rbacv1ac.PolicyRule().
		WithVerbs("get").WithAPIGroups("").WithResources("secrets").WithResourceNames(SecretName))
	if _, err := kube.Apply(ctx, cs.RbacV1().Roles(Namespace), RBACName, role); err != nil {
		return fmt.Errorf("apply Role %s/%s: %w", Namespace, RBACName, err)
	}
	binding := rbacv1ac.RoleBinding(RBACName, Namespace).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(RBACName)).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.GroupKind).WithAPIGroup(rbacv1.GroupName).WithName(BootstrappersGroup))
	if _, err := kube.Apply(ctx, cs.RbacV1().RoleBindings(Namespace), RBACName, binding); err != nil {
		return fmt.Errorf("apply RoleBinding %s/%s: %w", Namespace, RBACName, err)
	}
	return nil
}

// Download is kubeadm's download-certs: it reads Secret
// kube-system/kubeadm-certs (one get, which is all the bootstrappers'
// Role allows, so cs may be the joining node's bootstrap-token client),
// decrypts every value with certificateKey and writes the files under
// pkiDir at kubeadm's paths, private keys 0600 and the rest 0644, each
// atomically. Everything is decrypted and checked, and every file already
// there compared, before anything is written: a wrong key, an altered
// value or a file that differs (ErrDiffers) leaves pkiDir as it was. A
// file that already holds the same bytes is kept. It returns the paths
// it wrote.
func Download(ctx context.Context, cs kubernetes.Interface, certificateKey, pkiDir string) ([]string, error) {
	key, err := ParseCertificateKey(certificateKey)
	if err != nil {
		return nil, err
	}
	secret, err := cs.CoreV1().Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: it is deleted with the bootstrap token that owns it (kubeadm's lives %s); upload the certificates again on a control-plane node (kubeadm: `kubeadm init phase upload-certs --upload-certs`) and use the key that upload prints", ErrNoSecret, TokenTTL)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("read Secret %s/%s: %w (the Role and RoleBinding %s/%s the upload makes let group %s get it: is the token in that group, by its auth-extra-groups?)", Namespace, SecretName, err, Namespace, RBACName, BootstrappersGroup)
	case err != nil:
		return nil, fmt.Errorf("read Secret %s/%s: %w", Namespace, SecretName, err)
	}
	files, err := openAll(secret.Data, key)
	if err != nil {
		return nil, err
	}
	todo, err := toWrite(pkiDir, files)
	if err != nil {
		return nil, err
	}
	var written []string
	for _, w := range todo {
		if err := os.MkdirAll(filepath.Dir(w.path), dirPerm); err != nil {
			return written, err
		}
		if err := atomicfile.Write(w.path, w.data, w.perm, ""); err != nil {
			return written, err
		}
		written = append(written, w.path)
	}
	return written, nil
}

// plain is a shared file and its decrypted content.
type plain struct {
	sharedFile
	data []byte
}

// openAll decrypts and checks every shared file's value. An empty value
// of a CA key (an external CA's) is left out; any other missing or empty
// value is an error. When some values do not decrypt, the error is
// ErrWrongKey if none does, else ErrAltered naming them.
func openAll(data map[string][]byte, key Key) ([]plain, error) {
	var missing, failed []string
	var out []plain
	wrongKey := 0
	for _, f := range sharedFiles {
		v, ok := data[f.dataKey()]
		switch {
		case !ok:
			missing = append(missing, f.dataKey())
			continue
		case len(v) == 0 && f.mayLack:
			continue
		case len(v) == 0:
			missing = append(missing, f.dataKey()+" (empty)")
			continue
		}
		b, err := decrypt(key, v)
		switch {
		case errors.Is(err, ErrWrongKey):
			wrongKey++
			failed = append(failed, f.dataKey()+" (GCM authentication failed)")
			continue
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s (%v)", f.dataKey(), err))
			continue
		}
		out = append(out, plain{f, b})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("incomplete Secret %s/%s: it lacks %s, so it was not uploaded from a control-plane node with a local etcd; upload the certificates again from one", Namespace, SecretName, strings.Join(missing, ", "))
	}
	if len(out) == 0 && wrongKey == len(failed) {
		return nil, fmt.Errorf("decrypt Secret %s/%s: %w: use the key the upload printed (each upload replaces the Secret, under the key it was given)", Namespace, SecretName, ErrWrongKey)
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("%w: not decrypting: %s; the others decrypt with this key, so the Secret was changed after the upload; upload the certificates again", ErrAltered, strings.Join(failed, ", "))
	}
	for _, p := range out {
		if err := p.check(p.data); err != nil {
			return nil, fmt.Errorf("%s in Secret %s/%s: %w; upload the certificates again from a control-plane node", p.dataKey(), Namespace, SecretName, err)
		}
	}
	return out, nil
}

// write is one file Download is to write.
type write struct {
	path string
	data []byte
	perm os.FileMode
}

// toWrite compares files with what is under pkiDir: a file missing, or
// the same but with another mode, is to be written; one that holds other
// bytes fails the whole download (ErrDiffers, naming every such file).
func toWrite(pkiDir string, files []plain) ([]write, error) {
	var todo []write
	var differ []string
	for _, f := range files {
		w := write{path: filepath.Join(pkiDir, f.name), data: f.data, perm: f.perm()}
		have, err := os.ReadFile(w.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			todo = append(todo, w)
			continue
		case err != nil:
			return nil, fmt.Errorf("read %s to compare it with the cluster's: %w", w.path, err)
		}
		if !bytes.Equal(have, w.data) {
			differ = append(differ, w.path)
			continue
		}
		fi, err := os.Stat(w.path)
		if err != nil {
			return nil, err
		}
		if fi.Mode().Perm() != w.perm {
			todo = append(todo, w)
		}
	}
	if len(differ) > 0 {
		return nil, fmt.Errorf("%w: %s: not the cluster's (another cluster's, or from before its CAs were made again), and replacing them would pull certificates and keys from under what on this node uses them; remove them if they are stale, then download again", ErrDiffers, strings.Join(differ, ", "))
	}
	return todo, nil
}
