// Package build knows the Kubernetes components and builds them
// incrementally with Kubernetes' version stamping, as phases of the engine.
package build

import (
	"fmt"
	"slices"
	"strings"

	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/source"
)

// Component is one buildable program.
type Component struct {
	// Name is what users type: apiserver, controller-manager, kubectl, etcd.
	Name string
	// Binary is the executable's file name (and the image's repository
	// name): kube-apiserver, kubectl, etcd.
	Binary string
	// Package is the main package: a path inside the tree for Kubernetes
	// components, a module package path for etcd.
	Package string
	// StaticPod says the component runs as a static pod of the control
	// plane (and so can be swapped by image).
	StaticPod bool
	// External components are built from a module at a pinned version,
	// not from the tree.
	External bool
	// Base names the base image the component's image needs, one devk
	// makes itself (BaseIptables); empty means any (image.Options.Base,
	// else none: the binaries are static).
	Base string
	// Module is the module an External component is built from, at the
	// version the tree's kubeadm constants name in VersionConst (or, for
	// a component kubeadm does not name, devk's pin: DelveVersion,
	// KwokVersion);
	// StampVar is the linker variable set to that version (-X), as the
	// project's own build stamps it.
	Module       string
	VersionConst string
	StampVar     string
	// Layout is where the component's image holds the binary and how it
	// starts it.
	Layout ImageLayout
	// Tool components run beside a cluster, not in it (the e2e suite and
	// ginkgo): built only when named (not by "all") and never made into
	// an image.
	Tool bool
	// Test components are a package's tests, compiled with `go test -c`
	// into <Binary>.test, as the Kubernetes build names e2e.test.
	Test bool
	// With names the components built along with this one whenever it
	// is asked for (e2e brings the ginkgo that runs it in parallel).
	With []string
	// Debugger is the debugger itself (dlv): built as released in every
	// build, a debug build's too, so that one cached binary serves every
	// debug image.
	Debugger bool
}

// ImageLayout is where an image holds its binary and how it starts it.
// The zero value is devk's default: /usr/local/bin/<binary> as the
// entrypoint.
type ImageLayout struct {
	// Path is the binary's absolute path inside the image; empty means
	// /usr/local/bin/<binary>.
	Path string
	// Entrypoint is the image's entrypoint; empty means [Path].
	Entrypoint []string
	// Cmd is the image's default arguments.
	Cmd []string
}

// BaseIptables is the base of a component that runs iptables and
// conntrack (kube-proxy): Debian's iptables and conntrack packages, as
// Kubernetes' own kube-proxy image has them from distroless-iptables.
const BaseIptables = "iptables"

// BaseBusybox is a base with a shell and the usual commands, Debian's
// static busybox: what the e2e test images (agnhost, busybox) need
// from the Alpine and busybox bases of their Dockerfiles.
const BaseBusybox = "busybox"

// BaseBusyboxNet is BaseBusybox with OpenBSD's netcat as nc, curl, dig
// and getent, which agnhost's Alpine base has and the Services,
// lifecycle hook and DNS specs use.
const BaseBusyboxNet = "busybox-net"

// BaseDNSUtils is BaseBusybox with dig and getent, what the DNS specs'
// jessie-dnsutils prober runs (upstream: Debian with dnsutils).
const BaseDNSUtils = "dnsutils"

// Image is the repository name the component's image is pushed under.
func (c Component) Image() string { return c.Binary }

// File is the executable's file name: Binary, or Binary.test for a test
// component.
func (c Component) File() string {
	if c.Test {
		return c.Binary + TestSuffix
	}
	return c.Binary
}

// TestSuffix ends the file name of a test component's binary, as `go test
// -c` names it.
const TestSuffix = ".test"

// BuildArg is what `devk build` takes to build the component: its name,
// or the package path of a package of the tree.
func (c Component) BuildArg() string {
	if _, err := Lookup(c.Name); err == nil {
		return c.Name
	}
	return c.Package
}

// Catalog lists every component devk builds, in a stable order.
var Catalog = []Component{
	{Name: "apiserver", Binary: "kube-apiserver", Package: "./cmd/kube-apiserver", StaticPod: true},
	{Name: "controller-manager", Binary: "kube-controller-manager", Package: "./cmd/kube-controller-manager", StaticPod: true},
	{Name: "scheduler", Binary: "kube-scheduler", Package: "./cmd/kube-scheduler", StaticPod: true},
	{Name: "kubelet", Binary: "kubelet", Package: "./cmd/kubelet"},
	{Name: "kubectl", Binary: "kubectl", Package: "./cmd/kubectl"},
	{Name: "kube-proxy", Binary: "kube-proxy", Package: "./cmd/kube-proxy", Base: BaseIptables},
	{Name: "kubeadm", Binary: "kubeadm", Package: "./cmd/kubeadm"},
	{Name: "etcd", Binary: "etcd", Package: "go.etcd.io/etcd/server/v3", StaticPod: true, External: true,
		Module: "go.etcd.io/etcd/server/v3", VersionConst: source.EtcdVersionConst, StampVar: "go.etcd.io/etcd/api/v3/version.GitSHA"},
	// CoreDNS's Makefile stamps coremain.GitCommit with `git describe`,
	// which is the release tag at a release; its Dockerfile copies the
	// binary to /coredns, the entrypoint.
	{Name: CoreDNS, Binary: "coredns", Package: "github.com/coredns/coredns", External: true,
		Module: "github.com/coredns/coredns", VersionConst: source.CoreDNSVersionConst, StampVar: "github.com/coredns/coredns/coremain.GitCommit",
		Layout: ImageLayout{Path: "/coredns", Entrypoint: []string{"/coredns"}}},
	// The tree's end-to-end suite, e2e.test, and the ginkgo CLI at the
	// version the tree's go.mod requires (built in the tree's workspace,
	// so its build list picks the version), which runs it in parallel.
	{Name: E2E, Binary: "e2e", Package: "./test/e2e", Tool: true, Test: true, With: []string{Ginkgo}},
	{Name: Ginkgo, Binary: "ginkgo", Package: "github.com/onsi/ginkgo/v2/ginkgo", Tool: true},
	// Delve, the debugger devk debug adds to an image as a layer of its
	// own (a Tool: no image of its own). Its release build stamps
	// main.Build with the commit; devk stamps the release's tag, as it
	// does CoreDNS's.
	{Name: Delve, Binary: "dlv", Package: "github.com/go-delve/delve/cmd/dlv", External: true, Tool: true, Debugger: true,
		Module: "github.com/go-delve/delve", StampVar: "main.Build"},
	// kwok, whose fake nodes devk runs in a cluster: a Tool, since devk
	// supervises it beside the control plane rather than as an image.
	// kwok's release build (hack/releases.sh) stamps consts.Version with
	// the release's tag, which `kwok --version` prints.
	{Name: Kwok, Binary: "kwok", Package: "sigs.k8s.io/kwok/cmd/kwok", External: true, Tool: true,
		Module: KwokModule, StampVar: "sigs.k8s.io/kwok/pkg/consts.Version"},
}

// Delve is the catalog name of the debugger, dlv.
const Delve = "dlv"

// DelveVersion is the Delve release devk builds dlv from: the newest
// the Go module proxy serves (2026-12), which debugs binaries of Go 1.24
// to 1.26 (the trees devk builds) and needs Go 1.25 or newer to build
// (its go.mod).
const DelveVersion = "v1.27.2"

// Kwok is the catalog name of kwok, which fakes nodes and their pods.
const Kwok = "kwok"

// KwokModule is kwok's Go module, which holds its default stages too.
const KwokModule = "sigs.k8s.io/kwok"

// KwokVersion is the kwok release devk builds kwok from: the newest the
// Go module proxy serves (2026-12), whose client-go (v0.36) speaks to the
// API servers of the trees devk builds; it needs Go 1.26 or newer to
// build (its go.mod).
const KwokVersion = "v0.8.0"

// E2E and Ginkgo are the catalog names of the tree's e2e suite and of the
// ginkgo CLI.
const (
	E2E    = "e2e"
	Ginkgo = "ginkgo"
)

// CoreDNS is the catalog name of CoreDNS, the cluster's DNS addon.
const CoreDNS = "coredns"

// ErrUnknownComponent is returned for a name the catalog lacks.
var ErrUnknownComponent = fmt.Errorf("unknown component")

// Names lists the accepted component names.
func Names() []string {
	var out []string
	for _, c := range Catalog {
		out = append(out, c.Name)
	}
	return out
}

// Lookup finds a component by its name or its binary name
// (kube-apiserver and apiserver are the same). It is where component
// names from users enter: a name of the wrong shape is refused before the
// catalog is searched, and every catalog name has the right shape (its
// Binary becomes a file and an image name).
func Lookup(name string) (Component, error) {
	if validname.Component(name) == nil {
		for _, c := range Catalog {
			if name == c.Name || name == c.Binary {
				return c, nil
			}
		}
	}
	return Component{}, fmt.Errorf("%w %q: use one of %s, or all", ErrUnknownComponent, name, strings.Join(Names(), ", "))
}

// Resolve turns user arguments into components, in catalog order without
// duplicates. "all" means every Kubernetes component of the tree (etcd
// and CoreDNS are built only when named, since they come from their own
// modules; so are the tools, e2e, ginkgo, dlv and kwok, which are no
// part of a cluster and take minutes). A component brings those it names
// in With. Package paths are NewJob's to resolve, against a tree.
func Resolve(args []string) ([]Component, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("name a component: %s, or all", strings.Join(Names(), ", "))
	}
	want := map[string]bool{}
	for _, a := range args {
		if IsPackagePath(a) {
			return nil, fmt.Errorf("%w %q: a package path, which only `devk build` and `devk push` take; here use one of %s, or all", ErrUnknownComponent, a, strings.Join(Names(), ", "))
		}
		if a == "all" {
			for _, c := range Catalog {
				if !c.External && !c.Tool {
					want[c.Name] = true
				}
			}
			continue
		}
		c, err := Lookup(a)
		if err != nil {
			return nil, err
		}
		want[c.Name] = true
		for _, w := range c.With {
			want[w] = true
		}
	}
	var out []Component
	for _, c := range Catalog {
		if want[c.Name] {
			out = append(out, c)
		}
	}
	return out, nil
}

// CompletionNames are the values shell completion offers.
func CompletionNames() []string { return append(slices.Clone(Names()), "all") }
