package pki

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/devk/devk/internal/atomicfile"
)

// BackupSuffix names the copy of a file renewal replaced, beside it.
const BackupSuffix = ".devk-prev"

// ErrExternalCA is returned when the CA's key is not there to sign with.
var ErrExternalCA = errors.New("the CA's key is not here (an external CA)")

// specOf is what a renewal keeps of a certificate, as kubeadm's renewal
// keeps it: the subject, the SANs and the extended key usages.
func specOf(crt *x509.Certificate) Spec {
	return Spec{
		CommonName: crt.Subject.CommonName, Organization: crt.Subject.Organization,
		DNSNames: crt.DNSNames, IPs: crt.IPAddresses, Usages: crt.ExtKeyUsage,
	}
}

// loadCA reads a CA to sign with; a missing key is ErrExternalCA.
func loadCA(dir, caName string) (*x509.Certificate, crypto.Signer, error) {
	ca, key, err := Load(dir, caName)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(CertPath(dir, caName)); serr == nil {
			return nil, nil, fmt.Errorf("%s: %w", caName, ErrExternalCA)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load CA %s: %w", caName, err)
	}
	return ca, key, nil
}

// Renew replaces the certificate name under dir with one signed now by
// the CA caName, valid for validity (capped at the CA's end): the same
// subject, SANs and usages, a new serial, and the same key. Keeping the
// key makes the renewal one atomic write of the certificate, so no kill
// can leave a certificate beside a key it does not match (kubeadm makes
// a new key and writes the two files one after the other). The previous
// certificate is kept beside it (BackupSuffix) first.
func Renew(dir, name, caName string, now time.Time, validity time.Duration) (old, renewed *x509.Certificate, err error) {
	old, key, err := Load(dir, name)
	if err != nil {
		return nil, nil, err
	}
	if !publicKeyMatches(old, key) {
		return nil, nil, fmt.Errorf("%s does not match its key %s: restore the pair (the previous certificate is %s if devk renewed it)",
			CertPath(dir, name), KeyPath(dir, name), CertPath(dir, name)+BackupSuffix)
	}
	ca, caKey, err := loadCA(dir, caName)
	if err != nil {
		return nil, nil, err
	}
	if renewed, err = signPublic(specOf(old), key.Public(), ca, caKey, now, validity); err != nil {
		return nil, nil, fmt.Errorf("renew %s: %w", name, err)
	}
	if err := backup(CertPath(dir, name)); err != nil {
		return nil, nil, err
	}
	pemBytes, err := certutil.EncodeCertificates(renewed)
	if err != nil {
		return nil, nil, err
	}
	return old, renewed, atomicfile.Write(CertPath(dir, name), pemBytes, 0o644, "")
}

// RenewKubeconfig replaces the client certificate of the current
// context's user in the kubeconfig at path the same way (the CA caName
// under dir signs; subject, usages and key kept), writing the file
// atomically after a copy of it (BackupSuffix). The kubeconfig must embed
// its certificate and key, as kubeadm's do.
func RenewKubeconfig(dir, caName, path string, now time.Time, validity time.Duration) (old, renewed *x509.Certificate, err error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read kubeconfig %s: %w", path, err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.AuthInfos[ctx.AuthInfo] == nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: its current context names no user", path)
	}
	user := cfg.AuthInfos[ctx.AuthInfo]
	if len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0 {
		return nil, nil, fmt.Errorf("kubeconfig %s: user %s does not embed a client certificate and key; renew the files it names instead", path, ctx.AuthInfo)
	}
	certs, err := certutil.ParseCertsPEM(user.ClientCertificateData)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	k, err := keyutil.ParsePrivateKeyPEM(user.ClientKeyData)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: client key: %w", path, err)
	}
	key, ok := k.(crypto.Signer)
	if !ok || !publicKeyMatches(certs[0], key) {
		return nil, nil, fmt.Errorf("kubeconfig %s: the client key does not match the certificate", path)
	}
	ca, caKey, err := loadCA(dir, caName)
	if err != nil {
		return nil, nil, err
	}
	old = certs[0]
	if renewed, err = signPublic(specOf(old), key.Public(), ca, caKey, now, validity); err != nil {
		return nil, nil, fmt.Errorf("renew %s: %w", path, err)
	}
	if user.ClientCertificateData, err = certutil.EncodeCertificates(renewed); err != nil {
		return nil, nil, err
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := backup(path); err != nil {
		return nil, nil, err
	}
	return old, renewed, atomicfile.Write(path, data, 0o600, "")
}

// backup copies path to path+BackupSuffix (atomically, same mode).
func backup(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return atomicfile.Write(path+BackupSuffix, data, fi.Mode().Perm(), "")
}

// Restore puts back the copy a renewal kept of path; false when there is
// none.
func Restore(path string) (bool, error) {
	if _, err := os.Stat(path + BackupSuffix); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := os.Rename(path+BackupSuffix, path); err != nil {
		return false, err
	}
	return true, atomicfile.SyncDir(filepath.Dir(path))
}
