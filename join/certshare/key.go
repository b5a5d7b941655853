package certshare

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// KeySize is the certificate key's length in bytes: AES-256, and the only
// size kubeadm's --certificate-key validation accepts (its
// CertificateKeySize).
const KeySize = 32

// Key is a certificate key: the AES-256 key the shared certificates and
// keys are encrypted with in the Secret. Whoever holds it and a bootstrap
// token can make a control-plane node of the cluster; never log it.
type Key [KeySize]byte

// ErrBadKey is what ParseCertificateKey's errors are (errors.Is).
var ErrBadKey = errors.New("bad certificate key")

// ErrWrongKey is a value that does not decrypt with the key: GCM's
// authentication failed. With every value of the Secret failing, the key
// is not the one they were uploaded with.
var ErrWrongKey = errors.New("the certificate key does not match the one the certificates were uploaded with")

// NewCertificateKey makes a random certificate key, as kubeadm's
// `kubeadm certs certificate-key` prints it: KeySize bytes in lowercase
// hex.
func NewCertificateKey() (string, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return "", fmt.Errorf("make a certificate key: %w", err)
	}
	return hex.EncodeToString(k[:]), nil
}

// ParseCertificateKey reads a certificate key as kubeadm's
// --certificate-key takes it: KeySize bytes in hex (either case);
// surrounding space (a file's newline) is dropped. The error does not
// repeat the key, which is a credential.
func ParseCertificateKey(s string) (Key, error) {
	s = strings.TrimSpace(s)
	want := fmt.Sprintf("want %d hex digits (%d bytes), as `kubeadm init phase upload-certs --upload-certs` or `kubeadm certs certificate-key` prints it", hex.EncodedLen(KeySize), KeySize)
	if len(s) != hex.EncodedLen(KeySize) {
		return Key{}, fmt.Errorf("%w: %d characters; %s", ErrBadKey, len(s), want)
	}
	var k Key
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return Key{}, fmt.Errorf("%w: not hex; %s", ErrBadKey, want)
	}
	return k, nil
}

// aead is AES-256-GCM under k with the standard 12-byte nonce and 16-byte
// tag: kubeadm's util/crypto construction, so either side reads the
// other's values.
func (k Key) aead() (cipher.AEAD, error) {
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// encrypt seals plaintext under k with a random nonce.
func encrypt(k Key, plaintext []byte) ([]byte, error) {
	return seal(k, plaintext, rand.Reader)
}

// seal is a value as kubeadm stores one: the nonce (read from nonces)
// followed by GCM's ciphertext and tag, with no additional data. nonces
// is crypto/rand's reader except in the test that pins the format.
func seal(k Key, plaintext []byte, nonces io.Reader) ([]byte, error) {
	gcm, err := k.aead()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize(), gcm.NonceSize()+len(plaintext)+gcm.Overhead())
	if _, err := io.ReadFull(nonces, nonce); err != nil {
		return nil, fmt.Errorf("make a nonce: %w", err)
	}
	return gcm.Seal(nonce, nonce, plaintext, nil), nil
}

// errTruncated is a value too short to hold a nonce and a tag: not one
// that seal (or kubeadm) made.
var errTruncated = errors.New("too short to hold a nonce and a tag")

// decrypt opens a value seal made: ErrWrongKey when GCM's authentication
// fails (another key, or an altered value).
func decrypt(k Key, value []byte) ([]byte, error) {
	gcm, err := k.aead()
	if err != nil {
		return nil, err
	}
	if len(value) < gcm.NonceSize()+gcm.Overhead() {
		return nil, fmt.Errorf("%d bytes: %w", len(value), errTruncated)
	}
	nonce, sealed := value[:gcm.NonceSize()], value[gcm.NonceSize():]
	out, err := gcm.Open(nil, nonce, sealed, nil)
	if err != nil {
		// GCM says only "message authentication failed": which of a
		// wrong key and an altered value, Download tells from the
		// other values.
		return nil, ErrWrongKey
	}
	return out, nil
}
