// Package join is what a node needs to join a devk cluster as kubeadm
// joins: the bootstrap token, the CA pins (kubeadm's
// --discovery-token-ca-cert-hash), discovery through the cluster-info
// ConfigMap, and the kubelet's bootstrap kubeconfig.
package join

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// pinFormat is the only hash kubeadm's CA pins use.
const pinFormat = "sha256"

// Pin is the SHA-256 of a CA certificate's public key (its DER
// SubjectPublicKeyInfo): kubeadm's --discovery-token-ca-cert-hash. It
// pins the key, not the certificate, so a CA renewed with the same key
// still matches.
type Pin [sha256.Size]byte

// PinOf is cert's pin.
func PinOf(cert *x509.Certificate) Pin { return sha256.Sum256(cert.RawSubjectPublicKeyInfo) }

// CAPin is cert's pin as kubeadm writes it: "sha256:" and 64 hex digits.
func CAPin(cert *x509.Certificate) string { return PinOf(cert).String() }

func (p Pin) String() string { return pinFormat + ":" + hex.EncodeToString(p[:]) }

// ErrBadPin is what ParsePin's errors are (errors.Is).
var ErrBadPin = errors.New("bad CA pin")

// ParsePin reads a pin as kubeadm's --discovery-token-ca-cert-hash takes
// it: "sha256:" and the hex SHA-256 (either case).
func ParsePin(s string) (Pin, error) {
	bad := func(why string) (Pin, error) {
		return Pin{}, fmt.Errorf("%w %q: %s; want %s:<64 hex digits>, the SHA-256 of the cluster CA's public key as kubeadm's --discovery-token-ca-cert-hash takes it", ErrBadPin, s, why, pinFormat)
	}
	format, value, ok := strings.Cut(s, ":")
	if !ok {
		return bad("no format prefix")
	}
	if !strings.EqualFold(format, pinFormat) {
		return bad(fmt.Sprintf("unknown hash format %q (only %s)", format, pinFormat))
	}
	if len(value) != hex.EncodedLen(sha256.Size) {
		return bad(fmt.Sprintf("%d hex digits", len(value)))
	}
	var p Pin
	if _, err := hex.Decode(p[:], []byte(value)); err != nil {
		return bad("not hex")
	}
	return p, nil
}

// ParsePins reads every pin, failing on the first bad one.
func ParsePins(ss []string) ([]Pin, error) {
	pins := make([]Pin, 0, len(ss))
	for _, s := range ss {
		p, err := ParsePin(s)
		if err != nil {
			return nil, err
		}
		pins = append(pins, p)
	}
	return pins, nil
}

// ErrPinMismatch is what CheckPins's error is when no certificate
// matches (errors.Is).
var ErrPinMismatch = errors.New("the cluster's CA does not match any pinned hash")

// PinMismatchError names the hashes found, so the user can compare them
// with what they expected.
type PinMismatchError struct {
	Found []Pin
}

func (e *PinMismatchError) Error() string {
	found := make([]string, len(e.Found))
	for i, p := range e.Found {
		found[i] = p.String()
	}
	return fmt.Sprintf("%v: the CA's public key hash is %s; if that is the cluster you meant (check it on the control plane: the hash of pki/ca.crt's public key), pass it as the CA hash, else you are not talking to that cluster",
		ErrPinMismatch, strings.Join(found, ", "))
}

func (e *PinMismatchError) Is(target error) bool { return target == ErrPinMismatch }

// CheckPins says whether any of certs (the CA bundle of cluster-info,
// which holds more than one CA while a CA is being rotated) has one of
// pins; else a *PinMismatchError with the hashes of certs.
func CheckPins(certs []*x509.Certificate, pins []Pin) error {
	if len(pins) == 0 {
		return errors.New("no CA hash to check the cluster's CA against: pass one (sha256:<hex>); devk does not join without pinning the CA")
	}
	var found []Pin
	for _, c := range certs {
		p := PinOf(c)
		if slices.Contains(pins, p) {
			return nil
		}
		found = append(found, p)
	}
	return &PinMismatchError{Found: found}
}
