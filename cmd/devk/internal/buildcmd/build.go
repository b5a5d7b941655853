// Package buildcmd is the commands that make what runs: `devk source`,
// `devk build`, `devk push` and `devk version`.
package buildcmd

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

// NewBuildCmd is `devk build`.
func NewBuildCmd(g *cli.Options) *cobra.Command {
	var (
		o       build.Options
		imgOpts image.Options
		flags   phase.Flags
		goflags string
	)
	cmd := &cobra.Command{
		Use:   "build COMPONENT|PACKAGE...",
		Short: "Build Kubernetes components or any main package of the tree incrementally, version-stamped like `make`",
		Long: `Build one or more components of the Kubernetes tree around you.

Components: ` + strings.Join(build.Names(), ", ") + `,
or all (every component but etcd, coredns, e2e, ginkgo, dlv and kwok). The kube- names work too
(kube-apiserver = apiserver).

A PACKAGE is any main package of the tree, named by its directory as with
go build (` + build.PackageExample + `; relative to --tree, else to the
working directory): like ` + "`ko build`" + `, it is built and stamped as the
components are, and named after its directory (binary and image agnhost).
Its image follows the Dockerfile beside the package when that names the
binary in an exec-form ENTRYPOINT (agnhost: /agnhost, entrypoint
["/agnhost"], cmd ["pause"]); else the binary is at /usr/local/bin/<name>.
The Dockerfile's base image is not reproduced: agnhost's has a shell and
network tools, devk's image holds the binary alone unless --base is given.

All tree components and packages go through ONE go build (CGO_ENABLED=0,
-trimpath), so shared packages compile once and Go's build cache makes
rebuilds incremental. Binaries are stamped with the version git describe
gives (as hack/lib/version.sh: k8s.io/component-base/version and
k8s.io/client-go/pkg/version) and land in _output/devk/bin/<os>_<arch>/.
buildDate is SOURCE_DATE_EPOCH, else the commit time, so an unchanged tree
gives byte-identical binaries: each component is reported changed or
unchanged by its sha256.

etcd and CoreDNS are built from their Go modules (go.etcd.io/etcd/server/v3,
github.com/coredns/coredns), through the Go module proxy, at the versions
the tree's kubeadm constants name (DefaultEtcdVersion, CoreDNSVersion), or
--etcd-version / --coredns-version, stamped as their own builds stamp
releases. CoreDNS links only the plugins a devk or kubeadm Corefile uses
(` + strings.Join(build.CoreDNSDirectives(), ", ") + `, and what they bring),
as CoreDNS's compile-time plugin selection allows, which leaves out most
of its packages. --coredns-plugins all builds CoreDNS's own main with
every plugin.

dlv is Delve, the debugger, built from its module (github.com/go-delve/delve)
at devk's pin, ` + build.DelveVersion + `; it has no image of its own.

kwok fakes nodes and their pods for a cluster: built from its module
(sigs.k8s.io/kwok) at devk's pin, ` + build.KwokVersion + `, stamped as its release
build stamps it (kwok --version); it runs beside the control plane and
has no image.

With --debug the binaries keep their symbols and DWARF (no -s -w) and the
packages --debug-pkg names (default all) are compiled without optimisation
and inlining (-N -l); they land in _output/devk/bin/<os>_<arch>` + build.DebugDirSuffix + `/,
recorded apart, so the normal build's binaries and images stay as they were.
etcd, CoreDNS and kwok are debug-built the same way; dlv is always built as released.

e2e is the tree's end-to-end suite, test/e2e compiled with go test -c
(same flags and version stamp) into e2e.test; it brings ginkgo, the CLI
at the version the tree's go.mod requires, built in the tree's workspace.
Neither has an image: ` + "`devk e2e`" + ` runs them beside the cluster.

CoreDNS's image holds /coredns as its entrypoint, as its
Dockerfile does (but runs as root: the official image's nonroot user
binds port 53 through a file capability devk's layer does not carry).

With --push each binary also becomes an image (the binary at
/usr/local/bin/<name> unless said above, deterministic: the same binary
gives the same digest) pushed to --registry (default $DEVK_REGISTRY or the
embedded one at 127.0.0.1:5000, see ` + "`devk registry serve`" + `) as
<registry>/<binary>:<version>; stdout then shows repo@sha256:… per
component, and the digest is recorded in _output/devk/state.json for
` + "`devk digest`" + ` and swap.`,
		Example: `  devk build apiserver
  devk build kube-apiserver kubectl --debug
  devk build apiserver --debug --debug-pkg k8s.io/apiserver/pkg/server/...
  devk build dlv
  devk build kwok
  devk build all --platform linux/arm64
  devk build etcd --etcd-version v3.6.5
  devk build coredns --push
  devk build e2e
  devk build ./test/images/agnhost --push
  devk build apiserver --push
  devk build apiserver --push --registry localhost:5001 --base gcr.io/distroless/static
  devk build apiserver --dry-run`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeComponentOrPackage,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Components = args
			if len(o.DebugPackages) == 0 {
				o.DebugPackages = []string{build.DebugAll}
			} else if !o.Debug {
				return fmt.Errorf("--debug-pkg needs --debug")
			}
			o.GoFlags = strings.Fields(goflags)
			o.Reporter = g.Reporter()
			if g.ComponentLogs() {
				o.Log = g.Stderr
			}
			popts := g.PhaseOptions(&flags)
			if flags.Only == "image" || flags.Only == "push" {
				imgOpts.Push = true // `devk build phase push` asks for it
			}
			t0 := time.Now()
			j, err := image.Run(cmd.Context(), o, imgOpts, popts)
			if err != nil || flags.DryRun {
				return err
			}
			if !imgOpts.Push {
				return printBuild(g, j.Job, time.Since(t0))
			}
			return printPushed(g, j, time.Since(t0))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	f.StringVar(&o.Platform, "platform", "", "target os/arch, one of "+strings.Join(validname.Platforms(), ", ")+" (default linux/<this machine's arch>)")
	f.BoolVar(&o.Debug, "debug", false, "build for a debugger, into _output/devk/bin/<os>_<arch>"+build.DebugDirSuffix+"/ (the normal build's binaries stay): symbols kept, --debug-pkg's packages compiled with -N -l")
	f.StringArrayVar(&o.DebugPackages, "debug-pkg", nil, "with --debug: a go package pattern to compile with -N -l (repeatable; default "+build.DebugAll+", every package)")
	f.StringVar(&goflags, "goflags", "", "extra go build flags, space separated (e.g. \"-tags=foo -race\")")
	f.StringVar(&o.LDFlags, "ldflags", "", "extra linker flags, appended to the version flags")
	f.StringVar(&o.EtcdVersion, "etcd-version", "", "etcd version to build, v3.MINOR.PATCH (default: the tree's kubeadm DefaultEtcdVersion)")
	f.StringVar(&o.CoreDNSVersion, "coredns-version", "", "CoreDNS version to build, v1.MINOR.PATCH (default: the tree's kubeadm CoreDNSVersion)")
	f.StringVar(&o.CoreDNSPlugins, "coredns-plugins", "", "CoreDNS's plugins: "+build.CoreDNSPluginsAll+" for every one it ships (default: those devk's and kubeadm's Corefiles use, and log)")
	f.BoolVar(&imgOpts.Push, "push", false, "also make each binary's image and push it to --registry")
	addImageFlags(f, &imgOpts)
	_ = cmd.RegisterFlagCompletionFunc("platform", cobra.FixedCompletions(validname.Platforms(), cobra.ShellCompDirectiveNoFileComp))
	phase.Bind(cmd, image.BuildPhases(), &flags)
	cli.ResultHelp(cmd, buildResult{}, false)
	return cmd
}

// completeComponentOrPackage offers component names, or directories
// once what is typed looks like a package path.
func completeComponentOrPackage(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if build.IsPackagePath(toComplete) {
		return nil, cobra.ShellCompDirectiveFilterDirs
	}
	return build.CompletionNames(), cobra.ShellCompDirectiveNoFileComp
}

func printBuild(g *cli.Options, j *build.Job, took time.Duration) error {
	if g.Structured() {
		return g.Result(buildResult{Version: j.Version.GitVersion, Platform: j.Platform, Seconds: took.Seconds(), Binaries: j.Binaries})
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tSTATUS\tSIZE\tBUILD TIME\tSHA256\tBINARY")
	for _, b := range j.Binaries {
		status := "unchanged"
		if b.Changed {
			status = "changed"
		}
		rel, err := filepath.Rel(j.Tree.Root, b.Path)
		if err != nil {
			rel = b.Path
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, status, progress.Size(b.Size), progress.Round(b.Took), b.SHA256[:12], rel)
	}
	tw.Flush()
	fmt.Fprintf(g.Stdout, "built %s (%s) in %s\n", j.Version.GitVersion, j.Platform, progress.Round(took))
	return nil
}

// buildResult is what build and push print with -o json|yaml.
type buildResult struct {
	Version  string         `json:"version"`
	Platform string         `json:"platform"`
	Seconds  float64        `json:"seconds"`
	Binaries []build.Binary `json:"binaries"`
	// Images are the images pushed (build --push, push).
	Images []*image.Result `json:"images,omitempty"`
	// Bases are the base images devk made for them (kube-proxy's
	// iptables base).
	Bases []*image.DebianBase `json:"bases,omitempty"`
}
