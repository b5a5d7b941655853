package certshare

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/pki"
)

// kubeadm's files and their Secret keys (copycerts.go certsToTransfer and
// certOrKeyNameToSecretName, constants.go), written out here rather than
// taken from the code under test.
var kubeadmFiles = map[string]string{
	"ca.crt":             "ca.crt",
	"ca.key":             "ca.key",
	"front-proxy-ca.crt": "front-proxy-ca.crt",
	"front-proxy-ca.key": "front-proxy-ca.key",
	"etcd-ca.crt":        "etcd/ca.crt",
	"etcd-ca.key":        "etcd/ca.key",
	"sa.key":             "sa.key",
	"sa.pub":             "sa.pub",
}

var privateKeys = []string{"ca.key", "front-proxy-ca.key", "etcd/ca.key", "sa.key"}

const (
	testTokenID  = "abcdef"
	testTokenUID = types.UID("0b6e0c33-5a3e-4d7e-9a61-0c0b1a5e3f10")
)

// testPKI is a control-plane node's shared files: the three CAs and the
// service-account key pair, made by pki as `devk up` makes them.
func testPKI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	for _, s := range pki.Specs(pki.Config{NodeName: "cp"}) {
		if !s.IsCA() {
			continue
		}
		if _, err := pki.Ensure(dir, s, now, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pki.EnsureSA(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tokenSecret is a bootstrap token's Secret as kubeadm's upload-certs
// makes its proxy token (no usages: it only carries the TTL).
func tokenSecret(id string, uid types.UID, expiration string) *corev1.Secret {
	data := map[string][]byte{
		bootstrapapi.BootstrapTokenIDKey:     []byte(id),
		bootstrapapi.BootstrapTokenSecretKey: []byte("0123456789abcdef"),
	}
	if expiration != "" {
		data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(expiration)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstrapapi.BootstrapTokenSecretPrefix + id, Namespace: metav1.NamespaceSystem, UID: uid},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data:       data,
	}
}

func inTwoHours() string { return time.Now().Add(TokenTTL).UTC().Format(time.RFC3339) }

func newKey(t *testing.T) (string, Key) {
	t.Helper()
	s, err := NewCertificateKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseCertificateKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, k
}

// uploaded is a fake cluster with the token and the certificates of a
// new testPKI uploaded under a new key.
func uploaded(t *testing.T) (cs *fake.Clientset, src, key string) {
	t.Helper()
	src = testPKI(t)
	key, _ = newKey(t)
	cs = fake.NewClientset(tokenSecret(testTokenID, testTokenUID, inTwoHours()))
	if err := Upload(context.Background(), cs, src, key, testTokenID); err != nil {
		t.Fatal(err)
	}
	return cs, src, key
}

func getCertsSecret(t *testing.T, cs *fake.Clientset) *corev1.Secret {
	t.Helper()
	s, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Get(context.Background(), "kubeadm-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// kubeadmDecrypt and kubeadmEncrypt are kubeadm's util/crypto
// DecryptBytes and EncryptBytes written out again, apart from the code
// under test: what one side writes the other reads.
func kubeadmDecrypt(t *testing.T, data []byte, key Key) []byte {
	t.Helper()
	gcm := kubeadmGCM(t, key)
	if len(data) < gcm.NonceSize() {
		t.Fatalf("value of %d bytes: shorter than the nonce", len(data))
	}
	out, err := gcm.Open(nil, data[:gcm.NonceSize()], data[gcm.NonceSize():], nil)
	if err != nil {
		t.Fatalf("kubeadm's construction does not decrypt the value: %v", err)
	}
	return out
}

func kubeadmEncrypt(t *testing.T, data []byte, key Key) []byte {
	t.Helper()
	gcm := kubeadmGCM(t, key)
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	return gcm.Seal(nonce, nonce, data, nil)
}

// kubeadmGCM is the AES-GCM both of kubeadm's functions use.
func kubeadmGCM(t *testing.T, key Key) cipher.AEAD {
	t.Helper()
	block, err := aes.NewCipher(key[:])
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	return gcm
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	cs, src, key := uploaded(t)
	dst := filepath.Join(t.TempDir(), "pki")
	if Shared(src, dst) {
		t.Error("an empty pki dir has the shared files")
	}

	written, err := Download(ctx, cs, key, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != len(kubeadmFiles) {
		t.Errorf("wrote %d files, want %d: %v", len(written), len(kubeadmFiles), written)
	}
	for _, name := range kubeadmFiles {
		want, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: downloaded %d bytes (%v), want the uploader's %d", name, len(got), err, len(want))
		}
		fi, err := os.Stat(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		wantPerm := os.FileMode(0o644)
		if slices.Contains(privateKeys, name) {
			wantPerm = 0o600
		}
		if fi.Mode().Perm() != wantPerm {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), wantPerm)
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "etcd")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("etcd dir: %v %v, want mode 0755", fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dst, "*tmp*")); len(left) > 0 {
		t.Errorf("temp files left: %v", left)
	}

	if !Shared(src, dst) {
		t.Error("after the download, the node lacks the shared files")
	}
	// One byte of one file changed: no longer the cluster's.
	sa := filepath.Join(dst, "sa.pub")
	orig, _ := os.ReadFile(sa)
	os.WriteFile(sa, append(append([]byte{}, orig...), '\n'), 0o644)
	if Shared(src, dst) {
		t.Error("a changed sa.pub counts as shared")
	}
	os.WriteFile(sa, orig, 0o644)

	// The same files again: nothing to write.
	if written, err := Download(ctx, cs, key, dst); err != nil || len(written) != 0 {
		t.Errorf("a second download wrote %v (%v), want nothing", written, err)
	}

	// A new upload under another key and token replaces the Secret whole;
	// the node's files are the same, so a download keeps them.
	key2, _ := newKey(t)
	if _, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, tokenSecret("zyxwvu", "uid-2", inTwoHours()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Upload(ctx, cs, src, key2, "zyxwvu"); err != nil {
		t.Fatalf("upload again: %v", err)
	}
	s := getCertsSecret(t, cs)
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Name != "bootstrap-token-zyxwvu" {
		t.Errorf("owners after a new upload: %+v, want only the new token", s.OwnerReferences)
	}
	if _, err := Download(ctx, cs, key, dst); !errors.Is(err, ErrWrongKey) {
		t.Errorf("the first key after a new upload: %v, want ErrWrongKey", err)
	}
	if written, err := Download(ctx, cs, key2, dst); err != nil || len(written) != 0 {
		t.Errorf("download with the new key wrote %v (%v), want nothing", written, err)
	}
}

func TestSecretShape(t *testing.T) {
	ctx := context.Background()
	cs, src, keyHex := uploaded(t)
	key, _ := ParseCertificateKey(keyHex)
	s := getCertsSecret(t, cs)

	if s.Namespace != "kube-system" || s.Name != "kubeadm-certs" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("Secret %s/%s of type %q, want kube-system/kubeadm-certs, Opaque", s.Namespace, s.Name, s.Type)
	}
	if got, want := slices.Sorted(maps.Keys(s.Data)), slices.Sorted(maps.Keys(kubeadmFiles)); !slices.Equal(got, want) {
		t.Errorf("data keys %v, want kubeadm's %v", got, want)
	}
	for dataKey, name := range kubeadmFiles {
		file, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		v := s.Data[dataKey]
		if bytes.Contains(v, []byte("-----BEGIN")) || bytes.Contains(v, file[len(file)/2:]) {
			t.Errorf("%s is stored in plaintext", dataKey)
		}
		if len(v) != 12+len(file)+16 {
			t.Errorf("%s is %d bytes, want nonce, ciphertext and tag: %d", dataKey, len(v), 12+len(file)+16)
		}
		if got := kubeadmDecrypt(t, v, key); !bytes.Equal(got, file) {
			t.Errorf("%s decrypts to other bytes than %s", dataKey, name)
		}
	}

	wantOwner := metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: "bootstrap-token-" + testTokenID, UID: testTokenUID,
		Controller: new(true), BlockOwnerDeletion: new(true)}
	if len(s.OwnerReferences) != 1 || !ownerEqual(s.OwnerReferences[0], wantOwner) {
		t.Errorf("owner references %+v, want only %+v (so that the tokencleaner's deletion of the token deletes it)", s.OwnerReferences, wantOwner)
	}

	role, err := cs.RbacV1().Roles("kube-system").Get(ctx, "kubeadm:kubeadm-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantRules := []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"kubeadm-certs"}}}
	if !equalJSONish(role.Rules, wantRules) {
		t.Errorf("Role rules %+v, want %+v", role.Rules, wantRules)
	}
	rb, err := cs.RbacV1().RoleBindings("kube-system").Get(ctx, "kubeadm:kubeadm-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantRef := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "kubeadm:kubeadm-certs"}
	wantSubjects := []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "system:bootstrappers:kubeadm:default-node-token"}}
	if rb.RoleRef != wantRef || !slices.Equal(rb.Subjects, wantSubjects) {
		t.Errorf("RoleBinding %+v → %+v, want %+v → %+v", rb.Subjects, rb.RoleRef, wantSubjects, wantRef)
	}
}

func ownerEqual(a, b metav1.OwnerReference) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		a.Controller != nil && b.Controller != nil && *a.Controller == *b.Controller &&
		a.BlockOwnerDeletion != nil && b.BlockOwnerDeletion != nil && *a.BlockOwnerDeletion == *b.BlockOwnerDeletion
}

func equalJSONish(a, b []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacv1.PolicyRule) bool {
		return slices.Equal(x.Verbs, y.Verbs) && slices.Equal(x.APIGroups, y.APIGroups) &&
			slices.Equal(x.Resources, y.Resources) && slices.Equal(x.ResourceNames, y.ResourceNames) && len(x.NonResourceURLs) == 0
	})
}

// TestUploadReplacesKubeadmsSecret: a Secret kubeadm uploaded earlier
// (its own token as controller, an external etcd's keys) is replaced
// whole, not merged with.
func TestUploadReplacesKubeadmsSecret(t *testing.T) {
	ctx := context.Background()
	old := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-certs", Namespace: "kube-system", Labels: map[string]string{"old": "yes"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: "bootstrap-token-oldold", UID: "old", Controller: new(true)}}},
		Data: map[string][]byte{"external-etcd-ca.crt": []byte("x"), "ca.crt": []byte("y")},
	}
	cs := fake.NewClientset(tokenSecret(testTokenID, testTokenUID, inTwoHours()), old)
	key, _ := newKey(t)
	if err := Upload(ctx, cs, testPKI(t), key, testTokenID); err != nil {
		t.Fatal(err)
	}
	s := getCertsSecret(t, cs)
	if _, ok := s.Data["external-etcd-ca.crt"]; ok || len(s.Data) != len(kubeadmFiles) || len(s.Labels) != 0 {
		t.Errorf("data keys %v, labels %v: want exactly this upload's", slices.Sorted(maps.Keys(s.Data)), s.Labels)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != testTokenUID {
		t.Errorf("owner references %+v, want only the new token", s.OwnerReferences)
	}
}

// TestExternalCA: a node whose CA keys are an external CA's uploads them
// empty, as kubeadm does, and a download writes none.
func TestExternalCA(t *testing.T) {
	ctx := context.Background()
	src := testPKI(t)
	for _, k := range []string{"ca.key", "front-proxy-ca.key", "etcd/ca.key"} {
		if err := os.Remove(filepath.Join(src, k)); err != nil {
			t.Fatal(err)
		}
	}
	cs := fake.NewClientset(tokenSecret(testTokenID, testTokenUID, inTwoHours()))
	key, _ := newKey(t)
	if err := Upload(ctx, cs, src, key, testTokenID); err != nil {
		t.Fatal(err)
	}
	s := getCertsSecret(t, cs)
	for _, k := range []string{"ca.key", "front-proxy-ca.key", "etcd-ca.key"} {
		if v, ok := s.Data[k]; !ok || len(v) != 0 {
			t.Errorf("%s: present %v, %d bytes; want present and empty", k, ok, len(v))
		}
	}
	dst := t.TempDir()
	written, err := Download(ctx, cs, key, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != len(kubeadmFiles)-3 {
		t.Errorf("wrote %v, want every file but the three CA keys", written)
	}
	if _, err := os.Stat(filepath.Join(dst, "ca.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ca.key written for an external CA: %v", err)
	}
}

// TestDownloadKubeadmsSecret reads a Secret made as kubeadm's upload-certs
// makes it, by its construction written out in this test.
func TestDownloadKubeadmsSecret(t *testing.T) {
	src := testPKI(t)
	keyHex, key := newKey(t)
	data := map[string][]byte{}
	for dataKey, name := range kubeadmFiles {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		data[dataKey] = kubeadmEncrypt(t, b, key)
	}
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-certs", Namespace: "kube-system"}, Data: data})
	dst := t.TempDir()
	if _, err := Download(context.Background(), cs, strings.ToUpper(keyHex), dst); err != nil {
		t.Fatal(err)
	}
	for _, name := range kubeadmFiles {
		if ok, err := sameFile(filepath.Join(src, name), filepath.Join(dst, name)); !ok {
			t.Errorf("%s differs from kubeadm's upload (%v)", name, err)
		}
	}
}

func sameFile(a, b string) (bool, error) {
	x, err := os.ReadFile(a)
	if err != nil {
		return false, err
	}
	y, err := os.ReadFile(b)
	return err == nil && bytes.Equal(x, y), err
}

func TestUploadRefuses(t *testing.T) {
	goodKey, _ := newKey(t)
	for _, tc := range []struct {
		name    string
		key     string
		tokenID string
		token   *corev1.Secret
		breakFS func(t *testing.T, dir string)
		wantIs  error
		wantMsg string
	}{
		{name: "a key that is not hex", key: strings.Repeat("g", 64), wantIs: ErrBadKey, wantMsg: "not hex"},
		{name: "a token ID that is not one", tokenID: "ABC", wantMsg: "6 characters"},
		{name: "no such token", tokenID: "qqqqqq", wantMsg: "does not exist"},
		{name: "not a bootstrap token", token: func() *corev1.Secret {
			s := tokenSecret(testTokenID, testTokenUID, inTwoHours())
			s.Type = corev1.SecretTypeOpaque
			return s
		}(), wantMsg: "tokencleaner deletes only bootstrap tokens"},
		{name: "a token that never expires", token: tokenSecret(testTokenID, testTokenUID, ""), wantMsg: "never expires"},
		{name: "an expired token", token: tokenSecret(testTokenID, testTokenUID, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)), wantMsg: "has expired"},
		{name: "no CA certificate", breakFS: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "etcd/ca.crt")) }, wantMsg: "etcd/ca.crt"},
		{name: "no service-account key", breakFS: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "sa.key")) }, wantMsg: "sa.key"},
		{name: "a public key that is not one", breakFS: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "sa.pub"), []byte("junk\n"), 0o644)
		}, wantMsg: "sa.pub: not a PEM public key"},
		{name: "a CA key that is a certificate", breakFS: func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
			os.WriteFile(filepath.Join(dir, "ca.key"), b, 0o600)
		}, wantMsg: "ca.key: not a PEM private key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			key, tokenID, token := cmpOr(tc.key, goodKey), cmpOr(tc.tokenID, testTokenID), tc.token
			if token == nil {
				token = tokenSecret(testTokenID, testTokenUID, inTwoHours())
			}
			dir := testPKI(t)
			if tc.breakFS != nil {
				tc.breakFS(t, dir)
			}
			cs := fake.NewClientset(token)
			err := Upload(ctx, cs, dir, key, tokenID)
			if err == nil || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Upload: %v; want an error saying %q", err, tc.wantMsg)
			}
			if _, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "kubeadm-certs", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("a refused upload wrote the Secret (%v)", err)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestDownloadFailuresWriteNothing: whatever fails, the pki dir is as it
// was (here: it holds one unrelated file, and for the conflict one of
// another cluster's).
func TestDownloadFailuresWriteNothing(t *testing.T) {
	otherKey, _ := newKey(t)
	for _, tc := range []struct {
		name    string
		key     string // "" = the upload's
		change  func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, dst string)
		wantIs  error
		wantMsg string
	}{
		{name: "another key", key: otherKey, wantIs: ErrWrongKey, wantMsg: "certificate key does not match"},
		{name: "a bad key", key: "abc", wantIs: ErrBadKey},
		{name: "one value altered", change: func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, _ string) {
			s.Data["sa.key"][20] ^= 1
		}, wantIs: ErrAltered, wantMsg: "sa.key (GCM authentication failed)"},
		{name: "one value truncated", change: func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, _ string) {
			s.Data["etcd-ca.crt"] = s.Data["etcd-ca.crt"][:10]
		}, wantIs: ErrAltered, wantMsg: "etcd-ca.crt (10 bytes: too short"},
		{name: "a value missing", change: func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, _ string) {
			delete(s.Data, "front-proxy-ca.crt")
		}, wantMsg: "lacks front-proxy-ca.crt"},
		{name: "a certificate empty", change: func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, _ string) {
			s.Data["ca.crt"] = nil
		}, wantMsg: "lacks ca.crt (empty)"},
		{name: "a value that is not what its name says", change: func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, _ string) {
			s.Data["ca.key"] = s.Data["ca.crt"]
		}, wantMsg: "ca.key in Secret kube-system/kubeadm-certs: not a PEM private key"},
		{name: "no Secret", change: func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, _ string) {
			if err := cs.CoreV1().Secrets("kube-system").Delete(context.Background(), "kubeadm-certs", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, wantIs: ErrNoSecret, wantMsg: "upload-certs"},
		{name: "not allowed to read it", change: func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, _ string) {
			cs.PrependReactor("get", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "kubeadm-certs", errors.New("no RBAC"))
			})
		}, wantMsg: "let group system:bootstrappers:kubeadm:default-node-token get it"},
		{name: "another cluster's CA there", change: func(t *testing.T, cs *fake.Clientset, s *corev1.Secret, dst string) {
			other := testPKI(t)
			for _, f := range []string{"etcd/ca.crt", "sa.pub"} {
				b, _ := os.ReadFile(filepath.Join(other, f))
				os.MkdirAll(filepath.Join(dst, "etcd"), 0o755)
				if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, wantIs: ErrDiffers, wantMsg: "etcd/ca.crt, "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cs, _, key := uploaded(t)
			dst := t.TempDir()
			if err := os.WriteFile(filepath.Join(dst, "apiserver.crt"), []byte("this node's own"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.change != nil {
				s := getCertsSecret(t, cs)
				tc.change(t, cs, s, dst)
				if _, err := cs.CoreV1().Secrets("kube-system").Update(ctx, s, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
					t.Fatal(err)
				}
			}
			before := testutil.DirSnapshot(t, dst)
			written, err := Download(ctx, cs, cmpOr(tc.key, key), dst)
			if err == nil || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Download: %v; want an error saying %q", err, tc.wantMsg)
			}
			if tc.wantIs != ErrWrongKey && errors.Is(err, ErrWrongKey) {
				t.Errorf("%v is ErrWrongKey, though the key is the upload's", err)
			}
			if len(written) != 0 || !maps.Equal(before, testutil.DirSnapshot(t, dst)) {
				t.Errorf("a failed download changed the pki dir (wrote %v)", written)
			}
		})
	}
}

// TestDownloadMendsMode: a file with the cluster's bytes but a looser
// mode (a key copied by hand) is written again at kubeadm's.
func TestDownloadMendsMode(t *testing.T) {
	cs, src, key := uploaded(t)
	dst := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(src, "sa.key"))
	if err := os.WriteFile(filepath.Join(dst, "sa.key"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	written, err := Download(context.Background(), cs, key, dst)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(written, filepath.Join(dst, "sa.key")) {
		t.Errorf("sa.key not written again: %v", written)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "sa.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("sa.key has mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestDownloadAsABootstrapToken: Download does only what the
// bootstrappers' Role lets a bootstrap token do: get that one Secret.
func TestDownloadAsABootstrapToken(t *testing.T) {
	cs, _, key := uploaded(t)
	cs.ClearActions()
	if _, err := Download(context.Background(), cs, key, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	acts := cs.Actions()
	if len(acts) != 1 {
		t.Fatalf("actions %v, want one get", acts)
	}
	get, ok := acts[0].(clienttesting.GetAction)
	if !ok || get.GetVerb() != "get" || get.GetResource().Resource != "secrets" || get.GetNamespace() != "kube-system" || get.GetName() != "kubeadm-certs" {
		t.Errorf("action %v, want get secrets kube-system/kubeadm-certs", acts[0])
	}
}

// The key in hex must stay kubeadm's encoding (hex of the raw 32 bytes).
func TestKeyIsRawHex(t *testing.T) {
	s, k := newKey(t)
	if hex.EncodeToString(k[:]) != s {
		t.Errorf("key %q parses to %x", s, k)
	}
}
