package image

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/layout"
)

// RegistryUser is the user name of devk's registry credential (basic
// auth); the secret in the credential file is its password.
const RegistryUser = "devk"

// credentialBytes is the size of the random secret (hex in the file).
const credentialBytes = 32

// DefaultCredentialFile is the embedded registry's write credential under
// $DEVK_HOME (else ~/.devk).
func DefaultCredentialFile() (string, error) {
	home, err := layout.HomeDir("")
	if err != nil {
		return "", err
	}
	return layout.HomeFiles(home).RegistryCredential(), nil
}

// LoadCredential reads the secret from a credential file, which must be
// a regular file of the running user that no one else may read.
func LoadCredential(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return "", fmt.Errorf("registry credential %s is a symlink: remove it (devk makes a new one)", path)
		}
		return "", fmt.Errorf("registry credential: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("registry credential: %w", err)
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	switch {
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("registry credential %s is not a regular file: remove it (devk makes a new one)", path)
	case uid != os.Geteuid():
		return "", fmt.Errorf("registry credential %s belongs to uid %d, not to you (uid %d): remove it (devk makes a new one)", path, uid, os.Geteuid())
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("registry credential %s may be read by others (mode %04o): run `chmod 0600 %s`, or remove it and let devk make a new one", path, fi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4*credentialBytes))
	if err != nil {
		return "", fmt.Errorf("registry credential: %w", err)
	}
	secret := strings.TrimSpace(string(data))
	if b, err := hex.DecodeString(secret); err != nil || len(b) != credentialBytes {
		return "", fmt.Errorf("registry credential %s does not hold a secret devk made: remove it (devk makes a new one)", path)
	}
	return secret, nil
}

// NewSecret is a new random secret as a credential file holds it.
func NewSecret() string {
	b := make([]byte, credentialBytes)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// EnsureCredential loads the credential file, making it first when there
// is none: a random secret written to a temp file (0600) and linked into
// place, so two devk processes making it at once agree on one.
func EnsureCredential(path string) (string, error) {
	secret, err := LoadCredential(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return secret, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("registry credential: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("registry credential: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.WriteString(NewSecret() + "\n")
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("registry credential: write %s: %w", tmp, err)
	}
	// link, unlike rename, never replaces: the first one made wins.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("registry credential: %w", err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return "", err
	}
	return LoadCredential(path)
}

// CredentialKeychain gives devk's registry credential (from the file at
// path) for a registry on loopback that this user runs, and nothing for
// any other: a push elsewhere keeps whatever credentials docker's config
// gives it, and a port on loopback that another local user took never
// sees the secret.
func CredentialKeychain(path string) authn.Keychain { return credentialKeychain{path: path} }

type credentialKeychain struct{ path string }

func (k credentialKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	host := res.RegistryStr()
	if !IsLoopback(host) || !listenerIsOurs(host) {
		return authn.Anonymous, nil
	}
	secret, err := LoadCredential(k.path)
	if errors.Is(err, fs.ErrNotExist) {
		// No credential here: this registry keeps another, and refuses
		// the push with a message naming it.
		return authn.Anonymous, nil
	}
	if err != nil {
		return nil, err
	}
	return &authn.Basic{Username: RegistryUser, Password: secret}, nil
}

// KeychainFor is docker's credentials first (what a user configured for
// a registry wins), then the registry credential of devk's home (a
// resolved $DEVK_HOME): what devk's clients push with.
func KeychainFor(home string) authn.Keychain {
	return authn.NewMultiKeychain(authn.DefaultKeychain, CredentialKeychain(layout.HomeFiles(home).RegistryCredential()))
}

// defaultKeychain is KeychainFor $DEVK_HOME (else ~/.devk).
func defaultKeychain() authn.Keychain {
	home, err := layout.HomeDir("")
	if err != nil {
		return authn.DefaultKeychain
	}
	return KeychainFor(home)
}

// listenerIsOurs reports whether every TCP socket listening on a
// loopback host[:port] (port 80 when none) belongs to the running user,
// and there is one: then whoever answers there runs as us.
func listenerIsOurs(hostport string) bool {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portStr = hostport, "80"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return false
	}
	var ips []net.IP
	if host = strings.Trim(host, "[]"); host == "localhost" {
		ips = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	} else if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	}
	found := false
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		ls, err := tcpListeners(file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false
		}
		for _, l := range ls {
			if l.port != port {
				continue
			}
			for _, ip := range ips {
				if l.ip.Equal(ip) || l.ip.IsUnspecified() {
					if l.uid != os.Geteuid() {
						return false
					}
					found = true
				}
			}
		}
	}
	return found
}

type tcpListener struct {
	ip   net.IP
	port int
	uid  int
}

// tcpListeners parses /proc/net/tcp or tcp6 (proc(5)) for the sockets in
// state LISTEN: their local address and owner.
func tcpListeners(file string) ([]tcpListener, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tcpListener
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[3] != "0A" { // TCP_LISTEN
			continue
		}
		addr, portHex, ok := strings.Cut(fields[1], ":")
		raw, err := hex.DecodeString(addr)
		port, perr := strconv.ParseUint(portHex, 16, 16)
		uid, uerr := strconv.Atoi(fields[7])
		if !ok || err != nil || perr != nil || uerr != nil || (len(raw) != 4 && len(raw) != 16) {
			return nil, fmt.Errorf("%s: cannot parse %q", file, sc.Text())
		}
		// The kernel prints each 32-bit word in host (little-endian) order.
		ip := make(net.IP, len(raw))
		for i := 0; i < len(raw); i += 4 {
			ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
		}
		out = append(out, tcpListener{ip: ip, port: int(port), uid: uid})
	}
	return out, sc.Err()
}
