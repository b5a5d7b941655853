// Package testutil holds what tests of several packages share: a
// directory's snapshot, a free loopback address, the skip of a test that
// needs a Debian machine, a tar's entries read or written out, a table
// case's wanted error. Only tests import it.
package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/devk/devk/internal/kube"
)

// DirSnapshot is every name under dir (dir too) with its type, mode and
// content's sha256 (or link target): equal snapshots mean nothing under
// dir changed.
func DirSnapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + target
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			v += " " + hex.EncodeToString(sum[:])
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FreeAddr is a 127.0.0.1 address (host:port) nothing listens on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreePort is a 127.0.0.1 port nothing listens on (FreeAddr's).
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// NeedDebian skips the test when the machine has no apt or dpkg-deb:
// devk makes its Debian bases from the machine's Debian packages, so
// there is nothing to test.
func NeedDebian(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"apt-cache", "apt-get", "dpkg-deb", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("not a Debian machine (%s: %v): the base is made with apt and dpkg-deb", tool, err)
		}
	}
}

// CloseEach accepts connections on l and closes each at once, in the
// background, until l is closed: a port that takes connections and
// answers nothing.
func CloseEach(l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// DialIn connects to addr from the network namespace at ns (this
// process's own when ns is empty), waiting at most timeout, and closes
// the connection: whether addr takes connections from there.
func DialIn(ns, addr string, timeout time.Duration) error {
	return kube.InNetNS(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			c.Close()
		}
		return err
	})
}
