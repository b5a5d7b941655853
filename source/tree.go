// Package source finds a Kubernetes source tree, tells its version the way
// hack/lib/version.sh does, and makes a buildable tree from the Go module
// proxy (`devk source get`).
package source

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/devk/devk/internal/validname"
)

// Tree is a Kubernetes source tree: a directory with go.work and
// cmd/kube-apiserver.
type Tree struct {
	Root string
}

// ErrNoTree is returned when no Kubernetes tree encloses a directory.
var ErrNoTree = errors.New("not inside a Kubernetes source tree")

// HowToGet is the advice attached to ErrNoTree.
const HowToGet = "cd into a Kubernetes tree (a directory with go.work and cmd/kube-apiserver), pass --tree DIR, or get one with `devk source get v1.34.4`"

// IsTree reports whether dir looks like the root of a Kubernetes tree.
func IsTree(dir string) bool {
	if fi, err := os.Stat(filepath.Join(dir, "go.work")); err != nil || fi.IsDir() {
		return false
	}
	fi, err := os.Stat(filepath.Join(dir, "cmd", "kube-apiserver"))
	return err == nil && fi.IsDir()
}

// Find returns the tree enclosing dir (dir itself or a parent).
func Find(dir string) (*Tree, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if IsTree(d) {
			return &Tree{Root: d}, nil
		}
		if filepath.Dir(d) == d {
			return nil, fmt.Errorf("%w (looked from %s up to /): %s", ErrNoTree, abs, HowToGet)
		}
	}
}

// Open returns the tree at dir, or the one enclosing the working directory
// when dir is empty.
func Open(dir string) (*Tree, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		return Find(wd)
	}
	return Find(dir)
}

// OutputDir is where devk keeps what it makes for this tree.
func (t *Tree) OutputDir() string { return filepath.Join(t.Root, "_output", "devk") }

// GoVersions reads what Go the tree asks for: the minimum from go.work's
// go line (or go.mod's), and the release the project builds with from
// .go-version when present.
func (t *Tree) GoVersions() (minimum, preferred string, err error) {
	for _, f := range []string{"go.work", "go.mod"} {
		path := filepath.Join(t.Root, f)
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		v, err := goDirective(path, data)
		if err != nil {
			return "", "", err
		}
		if v != "" {
			minimum = v
			break
		}
	}
	if minimum == "" {
		return "", "", fmt.Errorf("no go directive in %s/go.work or go.mod", t.Root)
	}
	if data, err := os.ReadFile(filepath.Join(t.Root, ".go-version")); err == nil {
		preferred = strings.TrimSpace(string(data))
	}
	return minimum, preferred, nil
}

// EtcdVersion is the etcd version the tree's kubeadm constants name
// (DefaultEtcdVersion, e.g. "3.6.5-0" gives "v3.6.5"), checked by
// ParseEtcdVersion: the tree is input, and the version becomes a path.
func (t *Tree) EtcdVersion() (string, error) {
	return t.kubeadmVersion(EtcdVersionConst, ParseEtcdVersion, "--etcd-version")
}

// CoreDNSVersion is the CoreDNS version the tree's kubeadm constants name
// (CoreDNSVersion, "v1.12.1"), checked by ParseCoreDNSVersion.
func (t *Tree) CoreDNSVersion() (string, error) {
	return t.kubeadmVersion(CoreDNSVersionConst, ParseCoreDNSVersion, "--coredns-version")
}

// The string constants of kubeadm's constants.go that name the etcd and
// the CoreDNS it deploys.
const (
	EtcdVersionConst    = "DefaultEtcdVersion"
	CoreDNSVersionConst = "CoreDNSVersion"
)

// KubeadmConstantsFile is where kubeadm names the versions it deploys,
// relative to the tree's root.
const KubeadmConstantsFile = "cmd/kubeadm/app/constants/constants.go"

// kubeadmVersion reads the string constant name of kubeadm's constants
// and checks it with parse; flag is what overrides it, for the errors.
func (t *Tree) kubeadmVersion(name string, parse func(string) (string, error), flag string) (string, error) {
	path := filepath.Join(t.Root, filepath.FromSlash(KubeadmConstantsFile))
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w (pass %s)", name, err, flag)
	}
	val, ok := stringConst(data, name)
	if !ok {
		return "", fmt.Errorf("no %s string constant in %s (pass %s)", name, path, flag)
	}
	v, err := parse(val)
	if err != nil {
		return "", fmt.Errorf("%s in %s: %w; pass %s to build another", name, path, err, flag)
	}
	return v, nil
}

// stringConst finds the string constant name in Go source, as the
// compiler reads it.
func stringConst(src []byte, name string) (string, bool) {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	if err != nil {
		return "", false
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if n.Name != name || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					return s, err == nil
				}
			}
		}
	}
	return "", false
}

// ParseEtcdVersion turns an etcd version written as kubeadm writes it
// (3.6.5-0: the last "-N" is the image revision) or as a user does (3.6.5,
// v3.6.5, v3.6.0-rc.5) into the module version of
// go.etcd.io/etcd/server/v3 (v3.6.5), refusing anything that is not one
// (validname.EtcdVersion).
func ParseEtcdVersion(s string) (string, error) {
	v := s
	if i := strings.LastIndexByte(v, '-'); i >= 0 && i+1 < len(v) && strings.Trim(v[i+1:], "0123456789") == "" {
		v = v[:i]
	}
	return moduleVersion(s, v, validname.EtcdVersion)
}

// ParseCoreDNSVersion turns a CoreDNS version as kubeadm writes it
// (v1.12.1) or without its "v" (1.12.1) into the module version of
// github.com/coredns/coredns, refusing anything that is not one
// (validname.CoreDNSVersion).
func ParseCoreDNSVersion(s string) (string, error) {
	return moduleVersion(s, s, validname.CoreDNSVersion)
}

// moduleVersion is v (s as written, trimmed) with its "v" prefix, if
// valid says it is a version; an error quotes s where s itself is not
// one.
func moduleVersion(s, v string, valid func(string) error) (string, error) {
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	if err := valid(v); err != nil {
		if shown := valid(s); shown != nil {
			err = shown // quote what was written, not the "v"-prefixed form
		}
		return "", err
	}
	return v, nil
}
