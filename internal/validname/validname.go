// Package validname checks the names devk takes from users, flags and
// files (versions, components, clusters, platforms, image tags) before
// anything uses them. Each kind of name has one validator, and these names
// end up in paths, so PathIn joins them beneath a directory and refuses
// a result outside it: a second line of defence for a name that slipped
// past a validator.
//
// Every pattern is ASCII-only and anchored, so a name with a slash, "..",
// NUL, whitespace or a Unicode lookalike never passes.
package validname

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// maxVersionLen bounds versions; real ones are under 30 characters.
const maxVersionLen = 64

// semantic parses v as a semantic version written exactly as
// apimachinery prints it with a leading "v": no whitespace, no leading
// zeroes, and only [0-9A-Za-z-.] in the pre-release and build parts.
func semantic(v string) (*version.Version, bool) {
	if len(v) > maxVersionLen || !strings.HasPrefix(v, "v") {
		return nil, false
	}
	parsed, err := version.ParseSemantic(v)
	if err != nil || "v"+parsed.String() != v {
		return nil, false
	}
	return parsed, true
}

var kubePreRelease = regexp.MustCompile(`^(alpha|beta|rc)\.(0|[1-9][0-9]*)$`)

// KubeRelease checks a Kubernetes release tag: v1.MINOR.PATCH, optionally
// with -alpha.N, -beta.N or -rc.N, as `devk source get` takes.
func KubeRelease(v string) error {
	parsed, ok := semantic(v)
	if ok && parsed.Major() == 1 && parsed.BuildMetadata() == "" &&
		(parsed.PreRelease() == "" || kubePreRelease.MatchString(parsed.PreRelease())) {
		return nil
	}
	return fmt.Errorf("%s is not a Kubernetes release tag: use v1.MINOR.PATCH, optionally with -alpha.N, -beta.N or -rc.N (e.g. v1.34.4 or v1.35.0-rc.1)", quote(v))
}

// EtcdVersion checks an etcd release: v3.MINOR.PATCH with an optional
// semantic-version pre-release (v3.6.5, v3.6.0-rc.5), the form Go module
// versions of go.etcd.io/etcd/server/v3 take.
func EtcdVersion(v string) error {
	parsed, ok := semantic(v)
	if ok && parsed.Major() == 3 && parsed.BuildMetadata() == "" {
		return nil
	}
	return fmt.Errorf("etcd version %s: use v3.MINOR.PATCH, optionally with a pre-release such as -rc.1 (e.g. v3.6.5)", quote(v))
}

// CoreDNSVersion checks a CoreDNS release: v1.MINOR.PATCH with an
// optional semantic-version pre-release (v1.12.1), the form Go module
// versions of github.com/coredns/coredns take.
func CoreDNSVersion(v string) error {
	parsed, ok := semantic(v)
	if ok && parsed.Major() == 1 && parsed.BuildMetadata() == "" {
		return nil
	}
	return fmt.Errorf("CoreDNS version %s: use v1.MINOR.PATCH, optionally with a pre-release such as -rc.1 (e.g. v1.12.1)", quote(v))
}

// dnsLabelRE is an RFC 1123 DNS label: 1-63 of [a-z0-9-], starting and
// ending with a letter or digit.
var dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Component checks the shape of a component name (apiserver,
// kube-apiserver, etcd). Whether the catalog has it is build.Lookup's to
// say; Lookup calls this first.
func Component(name string) error {
	// A DNS label: a component name also names an image repository and
	// a static pod.
	if dnsLabelRE.MatchString(name) {
		return nil
	}
	return fmt.Errorf("component name %s: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit (e.g. apiserver or kube-apiserver)", quote(name))
}

var clusterRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// Cluster checks a cluster name: it becomes a directory, part of the
// node name and a kubeconfig context.
func Cluster(name string) error {
	if clusterRE.MatchString(name) {
		return nil
	}
	return fmt.Errorf("cluster name %s: use 1-32 lowercase letters, digits and '-', starting and ending with a letter or digit (e.g. devk or dev-2)", quote(name))
}

// Node checks a node name: a DNS label (not a subdomain: no dots), so
// that it is a Node object's name and the kubelet's hostname, one path
// element (nodes/<node>/ under the cluster's directory), and short
// enough for the names devk derives from it: its network namespace
// (devk-<node>, a file under /run/netns) and its cgroup root
// (/devk-<cluster>_<node>) stay far below Linux's 255-byte file names,
// and its host veth is a hash. Cluster and node names have no '_', so a
// node's cgroup root can never be another cluster's or node's.
func Node(name string) error {
	if dnsLabelRE.MatchString(name) {
		return nil
	}
	return fmt.Errorf("node name %s: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit (e.g. devk-worker2)", quote(name))
}

// platforms are the os/arch pairs Kubernetes builds release binaries for
// (a subset of `go tool dist list`).
var platforms = []string{
	"linux/amd64", "linux/arm64", "linux/arm", "linux/ppc64le", "linux/s390x",
	"darwin/amd64", "darwin/arm64",
	"windows/amd64",
}

// Platforms lists the accepted os/arch pairs, for help and completion.
func Platforms() []string { return append([]string(nil), platforms...) }

// Platform checks an os/arch pair, read by go-containerregistry's
// v1.ParsePlatform, against Platforms. It must be written as Platforms
// writes it: the pair becomes a directory name.
func Platform(s string) error {
	use := fmt.Sprintf("use os/arch, one of %s (e.g. linux/arm64)", strings.Join(platforms, ", "))
	p, err := v1.ParsePlatform(s)
	switch {
	case err != nil || p.OS == "" || p.Architecture == "" || p.String() != s:
		return fmt.Errorf("platform %s: %s", quote(s), use)
	case p.Variant != "" || p.OSVersion != "":
		return fmt.Errorf("platform %s: devk builds without a variant or OS version: %s", quote(s), use)
	case !slices.Contains(platforms, p.OS+"/"+p.Architecture):
		return fmt.Errorf("platform %s: Kubernetes does not build release binaries for it: %s", quote(s), use)
	}
	return nil
}

// imageTagRE is the tag grammar of the OCI distribution spec.
var imageTagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// ImageTag checks an image tag, such as one made from a version.
func ImageTag(tag string) error {
	if imageTagRE.MatchString(tag) {
		return nil
	}
	return fmt.Errorf("image tag %s: use 1-128 letters, digits, '_', '.' and '-', not starting with '.' or '-' (e.g. v1.34.4 or v1.35.0-alpha.1.3_0123456789abcd)", quote(tag))
}

// imagePathElemRE is one directory or file name of an image path.
var imagePathElemRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$`)

// ImagePath checks where an image keeps a binary: an absolute path of
// names made of letters, digits, '_', '.' and '-' (not starting with '.'
// or '-'), as a layer's tar entries are written.
func ImagePath(p string) error {
	elems := strings.Split(p, "/")
	ok := len(p) <= 1024 && len(elems) > 1 && elems[0] == ""
	for _, e := range elems[1:] {
		ok = ok && imagePathElemRE.MatchString(e)
	}
	if ok {
		return nil
	}
	return fmt.Errorf("image path %s: use an absolute path of names made of letters, digits, '_', '.' and '-' (e.g. /agnhost or /usr/local/bin/kubectl)", quote(p))
}

// ErrNotBeneath is returned by PathIn for a path that would leave its
// directory.
var ErrNotBeneath = errors.New("path is not beneath its directory")

// PathIn joins names beneath dir, each one path element: not empty, "."
// or "..", and without a slash, backslash or NUL. The result lies
// strictly inside dir; otherwise the error wraps ErrNotBeneath. It is
// lexical: symbolic links are not followed.
func PathIn(dir string, elem ...string) (string, error) {
	for _, e := range elem {
		if e == "" || e == "." || e == ".." || strings.ContainsAny(e, "/\\\x00") {
			return "", fmt.Errorf("%w: %s is not one path element (in %s)", ErrNotBeneath, quote(e), dir)
		}
	}
	p := filepath.Join(append([]string{dir}, elem...)...)
	if rel, err := filepath.Rel(dir, p); err != nil || rel == "." || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: %s is not inside %s", ErrNotBeneath, p, dir)
	}
	return p, nil
}

// quote shows a name as Go would write it (so NUL and lookalikes are
// visible), shortened when it is long.
func quote(s string) string {
	const limit = 72
	if len(s) > limit {
		return fmt.Sprintf("%q… (%d bytes)", s[:limit], len(s))
	}
	return fmt.Sprintf("%q", s)
}
