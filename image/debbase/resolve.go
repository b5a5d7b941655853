// Package debbase makes the root filesystem of a distroless base image
// from Debian packages, the way Kubernetes' distroless-iptables is made:
// the machine's apt resolves the packages and their Depends/Pre-Depends
// closure and downloads the exact versions (verified against the signed
// index), dpkg-deb unpacks each package's data, and one deterministic
// tar holds them all, merged-/usr, with what the maintainer scripts
// would have added (update-alternatives' symlinks). No maintainer script
// runs and no dpkg database is kept beyond one control file per package
// (/var/lib/dpkg/status.d, which image scanners read).
//
// The same package versions always give the same tar bytes: entries
// sorted, owned by root, every mtime the newest mtime the packages ship
// (Debian clamps a package's files to its changelog date, so that is the
// newest package's date), no device files, docs but the copyright files
// dropped.
package debbase

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/devk/devk/internal/execx"
)

// Spec is what a base is made of.
type Spec struct {
	// Packages are the packages asked for; their Depends and Pre-Depends
	// come with them.
	Packages []string
	// Exclude are packages left out even when something depends on them
	// (what a distroless image does not want: debconf, perl-base, dpkg).
	Exclude []string
	// Arch is the Debian architecture (amd64, arm64, …); empty means
	// the machine's own (dpkg --print-architecture).
	Arch string
	// Symlinks are made as a package's maintainer scripts would have
	// (path in the image -> target); each must point at a file the
	// packages ship.
	Symlinks map[string]string
	// Scripts are executable files devk writes (path in the image ->
	// content); each starts with #! and an interpreter the packages ship.
	Scripts map[string]string
}

// DistrolessExclude are the packages a distroless image leaves out: they
// exist to run maintainer scripts, which a distroless image never does.
var DistrolessExclude = []string{"debconf", "debconf-2.0", "perl-base", "dpkg", "install-info"}

// Package is one binary package as apt's index describes its candidate.
type Package struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	Architecture string `json:"architecture"`
	// Filename is the path in the archive (pool/main/…).
	Filename string `json:"filename"`
	SHA256   string `json:"sha256"`
}

// ID is name=version, how apt-get names an exact version.
func (p Package) ID() string { return p.Name + "=" + p.Version }

// debName is what a package's name looks like (Debian policy 5.6.1), with
// an optional :arch qualifier as apt prints it.
var debName = regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]+(:[a-z0-9-]+)?$`)

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// NativeArch is the machine's Debian architecture.
func NativeArch(ctx context.Context) (string, error) {
	out, err := execx.Output(ctx, execx.Cmd{Name: "dpkg", Args: []string{"--print-architecture"}})
	if err != nil {
		return "", fmt.Errorf("the Debian base needs dpkg and apt (a Debian or Ubuntu machine): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Resolve finds the candidate version of each package asked for and of
// everything they depend on (Depends and Pre-Depends, recursively), in
// name order. Of alternatives (a | b) the first real package wins unless
// one is already in the set; an excluded package is left out with its
// own dependencies; a dependency only virtual packages could satisfy is
// an error naming it.
func Resolve(ctx context.Context, spec Spec) ([]Package, error) {
	native, err := NativeArch(ctx)
	if err != nil {
		return nil, err
	}
	arch := spec.Arch
	if arch == "" {
		arch = native
	}
	if _, err := exec.LookPath("apt-cache"); err != nil {
		return nil, fmt.Errorf("the Debian base needs apt (apt-cache, apt-get): %w", err)
	}
	qualify := func(n string) string {
		if arch == native {
			return n
		}
		return n + ":" + arch
	}
	excluded := map[string]bool{}
	for _, n := range spec.Exclude {
		excluded[n] = true
	}
	known := map[string]*stanza{} // name -> candidate, nil when apt has none
	lookup := func(names []string) error {
		var ask []string
		for _, n := range names {
			if _, ok := known[n]; !ok && !slices.Contains(ask, n) {
				if !debName.MatchString(n) {
					return fmt.Errorf("%q is not a Debian package name", n)
				}
				ask = append(ask, n)
			}
		}
		if len(ask) == 0 {
			return nil
		}
		var qualified []string
		for _, n := range ask {
			known[n] = nil
			qualified = append(qualified, qualify(n))
		}
		out, err := execx.Output(ctx, execx.Cmd{Name: "apt-cache", Args: append([]string{"show", "--no-all-versions"}, qualified...), Env: []string{"LC_ALL=C"}})
		if err != nil && len(out) == 0 {
			// apt-cache fails when none of the names is known.
			return nil
		}
		for _, s := range parseStanzas(out) {
			n := s.get("Package")
			if _, asked := known[n]; asked && known[n] == nil {
				known[n] = s
			}
		}
		return nil
	}

	if len(spec.Packages) == 0 {
		return nil, fmt.Errorf("no Debian packages asked for")
	}
	// apt-cache takes a second or more per call where its binary cache
	// is off (Docker-style images): list the whole closure in one call
	// and read every candidate in a second; the walk below then picks
	// from what is known.
	closure, err := dependsClosure(ctx, spec.Packages, qualify)
	if err != nil {
		return nil, err
	}
	if err := lookup(append(slices.Clone(spec.Packages), closure...)); err != nil {
		return nil, err
	}
	chosen := map[string]*stanza{}
	var queue []string
	for _, n := range spec.Packages {
		if known[n] == nil {
			return nil, noPackageError(n, arch)
		}
		if chosen[n] == nil {
			chosen[n] = known[n]
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		// One level of the dependency tree; lookup asks apt only for
		// names the closure above missed (usually none).
		var groups [][]string
		var from []string
		var names []string
		for _, n := range queue {
			for _, g := range chosen[n].dependencies() {
				groups = append(groups, g)
				from = append(from, n)
				names = append(names, g...)
			}
		}
		queue = nil
		if err := lookup(names); err != nil {
			return nil, err
		}
		for i, g := range groups {
			if slices.ContainsFunc(g, func(n string) bool { return chosen[n] != nil || excluded[n] }) {
				continue
			}
			pick := slices.IndexFunc(g, func(n string) bool { return known[n] != nil })
			if pick < 0 {
				return nil, fmt.Errorf("%s depends on %s, which no real package of %s is: add a package that provides it to the list, or exclude it", from[i], strings.Join(g, " | "), arch)
			}
			chosen[g[pick]] = known[g[pick]]
			queue = append(queue, g[pick])
		}
	}

	var pkgs []Package
	for n, s := range chosen {
		p := Package{Name: n, Version: s.get("Version"), Architecture: s.get("Architecture"), Filename: s.get("Filename"), SHA256: s.get("SHA256")}
		if p.Version == "" || p.Filename == "" || !sha256Hex.MatchString(p.SHA256) {
			return nil, fmt.Errorf("apt's index entry of %s lacks its version, file name or SHA256: run `apt-get update`", n)
		}
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	return pkgs, nil
}

// dependsClosure lists the packages `apt-cache depends --recurse` reaches
// from names through Depends and Pre-Depends (every alternative, real
// packages only). Names apt does not know are left to the caller to
// report.
func dependsClosure(ctx context.Context, names []string, qualify func(string) string) ([]string, error) {
	args := []string{"depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"}
	for _, n := range names {
		if !debName.MatchString(n) {
			return nil, fmt.Errorf("%q is not a Debian package name", n)
		}
		args = append(args, qualify(n))
	}
	out, _ := execx.Output(ctx, execx.Cmd{Name: "apt-cache", Args: args, Env: []string{"LC_ALL=C"}})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var closure []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == ' ' || line[0] == '<' {
			continue // a dependency line, or a virtual package
		}
		n, _, _ := strings.Cut(strings.TrimSpace(line), ":")
		if debName.MatchString(n) && !slices.Contains(closure, n) {
			closure = append(closure, n)
		}
	}
	return closure, nil
}

// noPackageError tells a package the index lacks from an index that is
// not there at all (a fresh machine, a CI container).
func noPackageError(name, arch string) error {
	lists, _ := filepath.Glob("/var/lib/apt/lists/*_Packages*")
	if len(lists) == 0 {
		return fmt.Errorf("apt has no package lists (a fresh machine or container): run `apt-get update` (as root) first, then again")
	}
	return fmt.Errorf("apt knows no package %s for %s: check the name, or run `apt-get update` (as root) if the lists are old; for another architecture run `dpkg --add-architecture %s && apt-get update`", name, arch, arch)
}

// stanza is one paragraph of a Debian control file: fields by name, the
// continuation lines of a field joined to it.
type stanza struct {
	fields map[string]string
}

func (s *stanza) get(k string) string { return s.fields[k] }

// parseStanzas splits apt-cache's output into paragraphs.
func parseStanzas(data []byte) []*stanza {
	var out []*stanza
	var cur *stanza
	last := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			cur, last = nil, ""
		case line[0] == ' ' || line[0] == '\t':
			if cur != nil && last != "" {
				cur.fields[last] += "\n" + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			if cur == nil {
				cur = &stanza{fields: map[string]string{}}
				out = append(out, cur)
			}
			last = k
			cur.fields[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// dependencies are the Pre-Depends and Depends of a package: groups of
// alternatives, each a package name without version or architecture
// qualifier.
func (s *stanza) dependencies() [][]string {
	var groups [][]string
	for _, field := range []string{"Pre-Depends", "Depends"} {
		for _, g := range strings.Split(s.get(field), ",") {
			var alts []string
			for _, a := range strings.Split(g, "|") {
				n := strings.Fields(strings.TrimSpace(a))
				if len(n) == 0 {
					continue
				}
				name, _, _ := strings.Cut(n[0], ":") // libfoo:any
				name, _, _ = strings.Cut(name, "(")  // libfoo(>=1) without a space
				if name != "" {
					alts = append(alts, name)
				}
			}
			if len(alts) > 0 {
				groups = append(groups, alts)
			}
		}
	}
	return groups
}

// Iptables is the base kube-proxy runs on, as Kubernetes' own image puts
// it on distroless-iptables: iptables (iptables, iptables-save,
// iptables-restore and their ip6tables twins) and conntrack with the
// libraries they load. The iptables commands are the nf_tables ones
// (xtables-nft-multi), the backend Debian 12 chooses by default, as the
// iptables package's postinst would link them through update-alternatives.
var Iptables = Spec{
	Packages: []string{"iptables", "conntrack"},
	Exclude:  DistrolessExclude,
	Symlinks: map[string]string{
		"/usr/sbin/iptables":          "xtables-nft-multi",
		"/usr/sbin/iptables-save":     "xtables-nft-multi",
		"/usr/sbin/iptables-restore":  "xtables-nft-multi",
		"/usr/sbin/ip6tables":         "xtables-nft-multi",
		"/usr/sbin/ip6tables-save":    "xtables-nft-multi",
		"/usr/sbin/ip6tables-restore": "xtables-nft-multi",
	},
}

// Busybox is a base with a shell and the usual commands: Debian's static
// busybox, each applet linked in /usr/bin (/bin is usr/bin) as
// `busybox --install` would, and busyboxSh as sh. It stands
// in for the Alpine and busybox bases the e2e test images' Dockerfiles
// start from.
var Busybox = Spec{
	Packages: []string{"busybox-static", shellPackage},
	Exclude:  shellExclude,
	Symlinks: func() map[string]string {
		m := busyboxApplets()
		delete(m, "/usr/bin/sh") // busyboxSh
		return m
	}(),
	Scripts: map[string]string{"/usr/bin/sh": busyboxSh},
}

// busyboxSh is the busybox base's sh: busybox's ash, as upstream's busybox
// image has it (specs compare its messages: "/bin/sh: can't create /file:
// Read-only file system"), except that Debian's busybox 1.35 drops
// environment variables whose names are not shell names, which upstream's
// 1.37 passes on (the ConfigMap and Secret specs set data-1 and read it
// back with `sh -c env`): with such a name in the environment, bash runs
// the command instead, which passes them on too. $0 is kept, so messages
// name sh as the caller did.
const busyboxSh = `#!/usr/bin/bash
sh=/usr/bin/busybox
if [ -r /proc/self/environ ]; then
  while IFS= read -r -d '' kv; do
    [[ ${kv%%=*} =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || sh=/usr/bin/bash
  done </proc/self/environ
fi
exec -a "$0" "$sh" "$@"
`

// shellPackage is the sh of the bases with other programs (agnhost's,
// jessie-dnsutils'), and what busyboxSh falls back to. Not busybox's:
// Debian's static busybox (1.35) runs its own applet for a command of a
// script before looking in PATH (`sh -c 'nc -v …'` would never reach
// OpenBSD's nc), and its ash, like dash, drops environment variables
// whose names are not shell names, which the specs of ConfigMaps and
// Secrets as environment variables set (data-1=value-1) and read back
// with `sh -c env`. bash passes them on, as upstream busybox's sh does.
const shellPackage = "bash"

// shellExclude leaves out, besides DistrolessExclude, what bash depends
// on and a container does not use: base-files (the Debian system's /etc
// files, which depends on an awk; busybox's is there).
var shellExclude = append(slices.Clone(DistrolessExclude), "base-files")

// withShell links /usr/bin/sh to shellPackage's shell.
func withShell(m map[string]string) map[string]string {
	m["/usr/bin/sh"] = shellPackage
	return m
}

// BusyboxAppletNames are the applets linked into the busybox base: the
// commands the e2e specs run in their containers (sh -c, cat, sleep,
// wget, nslookup, nc, …) and the rest of the common ones.
var BusyboxAppletNames = []string{
	"sh", "ash", "awk", "base64", "basename", "cat", "chmod", "chown", "cp", "cut", "date", "dd", "df", "dirname", "du",
	"echo", "env", "expr", "false", "find", "grep", "egrep", "gzip", "head", "hostname", "httpd", "id", "ifconfig", "ip",
	"kill", "ln", "ls", "md5sum", "mkdir", "mkfifo", "mknod", "mount", "mv", "nc", "netstat", "nslookup", "ping", "printf",
	"ps", "pwd", "readlink", "realpath", "rm", "rmdir", "route", "sed", "seq", "sha256sum", "sleep", "sort", "stat", "sync",
	"tail", "tar", "tee", "test", "[", "timeout", "top", "touch", "tr", "true", "umount", "uname", "uniq", "wc", "wget",
	"which", "whoami", "xargs", "yes", "zcat", "vi", "less", "more", "nproc", "stty", "uptime", "free", "watch",
	"sysctl", "chgrp", "chroot", "cmp", "diff", "dmesg", "fgrep", "fold", "groups", "gunzip", "hexdump", "killall",
	"link", "logger", "mktemp", "nl", "od", "paste", "pidof", "renice", "rev", "setsid", "sha1sum", "sha512sum", "shuf",
	"strings", "tac", "time", "traceroute", "truncate", "tty", "unlink", "unzip", "usleep", "xxd", "ionice", "taskset",
	"ping6", "bc", "getopt",
}

// busyboxApplets links the applets but those other packages of a base
// ship (bind9-dnsutils' nslookup).
func busyboxApplets(shipped ...string) map[string]string {
	m := map[string]string{}
	for _, a := range BusyboxAppletNames {
		if !slices.Contains(shipped, a) {
			m["/usr/bin/"+a] = "busybox"
		}
	}
	return m
}

// dnsPackages are the DNS tools the e2e DNS specs' probe scripts run:
// ISC's dig (bind9-dnsutils) and glibc's getent (libc-bin), which
// upstream's agnhost (Alpine's bind-tools) and jessie-dnsutils (Debian's
// dnsutils) have.
var dnsPackages = []string{"bind9-dnsutils", "libc-bin"}

// dnsCommands are the commands dnsPackages ship that busybox has applets
// of: ISC's own are linked, as upstream's images have them.
var dnsCommands = []string{"nslookup"}

// NsswitchConf is /etc/nsswitch.conf, which libc-bin's postinst copies
// from the file it ships: without it glibc asks DNS before /etc/hosts
// and stops at DNS's "no such name", so `getent hosts <pod hostname>`
// (the /etc/hosts specs) would find nothing.
const NsswitchConf = "/etc/nsswitch.conf"

// nsswitchTemplate is where libc-bin ships the default NsswitchConf
// (hosts: files dns).
const nsswitchTemplate = "/usr/share/libc-bin/nsswitch.conf"

// BusyboxNet is Busybox with OpenBSD's netcat as nc, curl and the DNS
// tools (dig, getent), as agnhost's Alpine base has them: the Services
// specs run `nc -v -t -w 2 HOST PORT` in agnhost pods (options busybox's
// own nc lacks), the lifecycle hook specs `curl`, the DNS specs `dig`
// and `getent hosts`. sh is bash (shellPackage).
var BusyboxNet = Spec{
	Packages: append([]string{"busybox-static", "netcat-openbsd", "curl", shellPackage}, dnsPackages...),
	Exclude:  shellExclude,
	Symlinks: func() map[string]string {
		m := withShell(busyboxApplets(dnsCommands...))
		m["/usr/bin/nc"] = "nc.openbsd"
		m[NsswitchConf] = nsswitchTemplate
		return m
	}(),
}

// DNSUtils is Busybox with the DNS tools (dig, getent): what the DNS
// specs' jessie-dnsutils prober needs of upstream's Debian image with
// dnsutils (sh, seq, dig, getent, test, echo, sleep).
var DNSUtils = Spec{
	Packages: append([]string{"busybox-static", shellPackage}, dnsPackages...),
	Exclude:  shellExclude,
	Symlinks: func() map[string]string {
		m := withShell(busyboxApplets(dnsCommands...))
		m[NsswitchConf] = nsswitchTemplate
		return m
	}(),
}
