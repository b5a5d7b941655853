package debbase

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/testutil"
)

// testDebDir keeps the downloaded packages between test runs, so that
// only the first run on a machine downloads (a few MB from Debian's
// mirror) and later ones take a few seconds. The image package's tests
// use the same directory (as <BaseCache>/debs).
var testDebDir = filepath.Join(os.TempDir(), "devk-debian-test", "debs")

// TestIptablesBase makes the real iptables base from Debian's packages
// twice (same bytes), unpacks it, and runs the commands kube-proxy runs
// inside it with chroot: the loader, the libraries, the xtables modules
// and the alternatives' symlinks all have to be there.
func TestIptablesBase(t *testing.T) {
	testutil.NeedDebian(t)
	ctx := context.Background()
	pkgs, err := Resolve(ctx, Iptables)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range pkgs {
		names[p.Name] = true
	}
	for _, want := range []string{"iptables", "conntrack", "libc6", "libxtables12", "libip4tc2", "libip6tc2", "libnftnl11", "libmnl0", "libnetfilter-conntrack3", "libnfnetlink0"} {
		if !names[want] {
			t.Errorf("the closure lacks %s: %v", want, pkgs)
		}
	}
	for _, not := range DistrolessExclude {
		if names[not] {
			t.Errorf("the closure holds %s, which is excluded", not)
		}
	}

	t0 := time.Now()
	var first bytes.Buffer
	mtime, err := WriteRoot(ctx, &first, testDebDir, pkgs, Iptables)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packages, tar of %d bytes in %s", len(pkgs), first.Len(), time.Since(t0))
	var second bytes.Buffer
	mtime2, err := WriteRoot(ctx, &second, testDebDir, pkgs, Iptables)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(first.Bytes()) != sha256.Sum256(second.Bytes()) || !mtime.Equal(mtime2) {
		t.Fatal("the same packages gave two different tars")
	}
	if mtime.Before(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) || mtime.After(time.Now()) {
		t.Fatalf("mtime %s is not a package's date", mtime)
	}

	root := t.TempDir()
	testutil.Untar(t, &first, root)
	if _, err := os.Stat(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libc.so.6")); err != nil && strings.Contains(pkgs[0].Architecture, "amd64") {
		t.Error(err)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: chroot is not run")
		return
	}
	for _, cmd := range [][]string{
		{"/usr/sbin/iptables", "--version"},
		{"/usr/sbin/iptables-save", "--version"},
		{"/usr/sbin/iptables-restore", "--version"},
		{"/usr/sbin/ip6tables", "--version"},
		{"/usr/sbin/ip6tables-save", "--version"},
		{"/usr/sbin/ip6tables-restore", "--version"},
		{"/sbin/iptables", "--version"}, // through the merged /sbin
		{"/usr/sbin/conntrack", "--version"},
	} {
		out, err := exec.Command("chroot", append([]string{root}, cmd...)...).CombinedOutput()
		if err != nil {
			t.Errorf("chroot %s: %v\n%s", strings.Join(cmd, " "), err, out)
			continue
		}
		want := "nf_tables"
		if strings.HasSuffix(cmd[0], "conntrack") {
			want = "conntrack v"
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("%s: %q, want %q in it", strings.Join(cmd, " "), out, want)
		}
	}
}

// TestBusyboxBases makes the busybox bases the e2e test images run on and
// runs what the specs run in their containers with chroot: sh, the
// applets through /bin (merged into /usr/bin), and OpenBSD's nc with the
// -v the Services specs pass.
func TestBusyboxBases(t *testing.T) {
	testutil.NeedDebian(t)
	ctx := context.Background()
	for name, spec := range map[string]Spec{"busybox": Busybox, "busybox-net": BusyboxNet, "dnsutils": DNSUtils} {
		t.Run(name, func(t *testing.T) {
			pkgs, err := Resolve(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := WriteRoot(ctx, &buf, testDebDir, pkgs, spec); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			testutil.Untar(t, &buf, root)
			if os.Geteuid() != 0 {
				t.Log("not root: chroot is not run")
				return
			}
			// sh passes on environment variables that are not shell names
			// (the env-var specs' data-1), and busybox's sysctl is there.
			cmds := [][]string{{"/bin/sh", "-c", "echo hello | cat; ls /usr/bin/wget && hostname && echo ok"},
				{"/usr/bin/env", "data-1=value-1", "/bin/sh", "-c", "env | grep -q '^data-1=value-1$' && echo ok"},
				{"/bin/sh", "-c", "sysctl --help 2>&1 | grep -q 'Usage: sysctl' && echo ok"},
				{"/bin/sh", "-c", "echo x >/tmp/x && mv /tmp/x /var/tmp/ && echo ok"}}
			if spec.Symlinks["/usr/bin/nslookup"] == "busybox" {
				cmds = append(cmds, []string{"/bin/nslookup", "--help"})
			}
			if spec.Scripts["/usr/bin/sh"] == "" {
				if l, err := os.Readlink(filepath.Join(root, "usr/bin/sh")); err != nil || l != shellPackage {
					t.Errorf("sh is %q (%v), want %s: busybox as sh runs its own nc before PATH's and drops data-1", l, err, shellPackage)
				}
			} else {
				// busybox's ash, with its messages, when no name in the
				// environment needs bash; stdin is still the caller's.
				cmds = append(cmds, []string{"/bin/sh", "-c", "(echo x >/nonexistent/file) 2>&1 | grep -q \"^/bin/sh: can't create /nonexistent/file\" && echo ok"},
					[]string{"/bin/sh", "-c", "echo fromstdin | /bin/sh -c 'read l; test \"$l\" = fromstdin && echo ok'"})
			}
			if spec.Symlinks["/usr/bin/nc"] == "nc.openbsd" {
				cmds = append(cmds, []string{"/bin/sh", "-c", "nc -h 2>&1 | grep -q OpenBSD && echo ok"},
					[]string{"/bin/sh", "-c", "curl --version | grep -q '^curl ' && echo ok"})
			}
			if spec.Symlinks[NsswitchConf] != "" {
				// What the DNS specs' probes run: dig, and getent hosts,
				// which must read /etc/hosts before asking DNS.
				if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("10.9.8.7 probe-host.example\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				cmds = append(cmds, []string{"/bin/sh", "-c", "dig -v 2>&1 | grep -q '^DiG ' && echo ok"},
					[]string{"/bin/sh", "-c", "getent hosts probe-host.example | grep -q 10.9.8.7 && echo ok"})
			}
			// The chroot gets a /proc (sh reads /proc/self/environ), in a
			// mount namespace of its own.
			if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range cmds {
				argv := append([]string{"--mount", "--", "sh", "-c", `mount -t proc proc "$0/proc" && exec chroot "$0" "$@"`, root}, cmd...)
				out, err := exec.Command("unshare", argv...).CombinedOutput()
				if cmd[0] == "/bin/nslookup" { // busybox applets print their usage and exit 1 on --help
					if !strings.Contains(string(out), "BusyBox") {
						t.Errorf("chroot %s: %v\n%s", strings.Join(cmd, " "), err, out)
					}
					continue
				}
				if err != nil || !strings.Contains(string(out), "ok") {
					t.Errorf("chroot %s: %v\n%s", strings.Join(cmd, " "), err, out)
				}
			}
		})
	}
}
