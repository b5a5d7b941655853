package buildcmd

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// addImageFlags are the flags of every command that makes or pushes images.
func addImageFlags(f *pflag.FlagSet, o *image.Options) {
	f.Var(&compressionFlag{o: o}, "compression", "layer compression: fast (parallel gzip, level 1), standard (single-threaded default gzip, smaller and slower) or none (plain tar layers: nothing to compress, nothing for a node to decompress when it pulls; larger); the digest depends on it")
	f.StringVar(&o.Registry, "registry", image.DefaultRegistry(), "registry to push to, HOST[:PORT][/PREFIX] (http:// in front for plain HTTP, which needs --insecure unless on loopback); $DEVK_REGISTRY changes the default")
	f.StringVar(&o.Base, "base", "", "base image to put the binary on (default: none, the binaries are static; kube-proxy always gets devk's iptables base); pulled with your docker credentials")
	f.BoolVar(&o.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback (loopback registries get it anyway)")
}

// NewPushCmd is `devk push`.
func NewPushCmd(g *cli.Options) *cobra.Command {
	var (
		bo    build.Options
		o     image.Options
		flags phase.Flags
	)
	cmd := &cobra.Command{
		Use:   "push COMPONENT|PACKAGE...",
		Short: "Make images of components (or packages) already built and push them",
		Long: `Make an OCI image of each component's last built binary and push it.
A PACKAGE is a main package of the tree built by ` + "`devk build PACKAGE`" + `
(` + build.PackageExample + `), named after its directory.

The image holds the binary at /usr/local/bin/<name> as its entrypoint
(CoreDNS at /coredns; a package where the ENTRYPOINT of its Dockerfile puts
it, agnhost at /agnhost), for the platform it was built for, on no base
layer unless --base is given (kube-proxy goes on an iptables base devk
makes from this machine's Debian packages, cached in
$DEVK_HOME/cache/debian and pushed as <registry>/devk-iptables-base). It
is deterministic: zero mtimes, fixed modes and owners, created at
SOURCE_DATE_EPOCH or the tree's commit time, labelled with the version and
commit; the same binary always gives the same digest. The compressed layer
is cached by the binary's sha256 under _output/devk/layers, so pushing an
unchanged binary compresses and uploads nothing.

Images go to --registry (default $DEVK_REGISTRY, else the embedded registry
on 127.0.0.1:5000 that ` + "`devk registry serve`" + ` runs) as
<registry>/<binary>:<version> (the gitVersion with '+' made '_'). stdout
shows repo@sha256:… per component; the digest is recorded in the tree's
_output/devk/state.json. Blobs go first and the manifest last, so an
interrupted push leaves nothing under the tag: run it again.

Plain HTTP goes only to a loopback registry unless --insecure is given,
also when --registry or DEVK_REGISTRY says http://. A registry that does
not answer a request within ` + image.DefaultTimeout.String() + ` or take an image within ` + image.DefaultPushTimeout.String() + `
fails the push rather than hanging it.`,
		Example: `  devk build apiserver && devk push apiserver
  devk push apiserver scheduler --registry localhost:5001
  devk build coredns && devk push coredns
  devk push ./test/images/agnhost
  DEVK_REGISTRY=registry.example:5000 devk push kubectl --insecure`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeComponentOrPackage,
		RunE: func(cmd *cobra.Command, args []string) error {
			bo.Components = args
			bo.Reporter = g.Reporter()
			popts := g.PhaseOptions(&flags)
			t0 := time.Now()
			j, err := image.RunPush(cmd.Context(), bo, o, popts)
			if err != nil || flags.DryRun {
				return err
			}
			return printPushed(g, j, time.Since(t0))
		},
	}
	f := cmd.Flags()
	f.StringVar(&bo.TreeDir, "tree", "", "the Kubernetes tree (default: the one around the working directory)")
	addImageFlags(f, &o)
	phase.Bind(cmd, image.PushPhases(), &flags)
	cli.ResultHelp(cmd, buildResult{}, false)
	return cmd
}

// printPushed writes repo@sha256:… per component on stdout.
func printPushed(g *cli.Options, j *image.Job, took time.Duration) error {
	if g.Structured() {
		return g.Result(buildResult{Version: j.Version.GitVersion, Platform: j.Platform, Seconds: took.Seconds(), Binaries: j.Binaries, Images: j.Images, Bases: j.Bases})
	}
	var names []string
	for _, r := range j.Images {
		fmt.Fprintln(g.Stdout, r.Ref)
		names = append(names, r.Repository+":"+r.Tag)
	}
	if !g.Quiet {
		fmt.Fprintf(g.Stderr, "pushed %s in %s\n", strings.Join(names, ", "), progress.Round(took))
	}
	return nil
}

// compressionFlag sets image.Options.Compression by name.
type compressionFlag struct{ o *image.Options }

func (c *compressionFlag) String() string {
	switch {
	case c.o == nil || c.o.Compression == nil || *c.o.Compression == image.DefaultCompression:
		return "fast"
	case *c.o.Compression == image.NoCompression:
		return "none"
	}
	return "standard"
}

func (c *compressionFlag) Set(s string) error {
	switch s {
	case "fast":
		c.o.Compression = &image.DefaultCompression
	case "standard":
		c.o.Compression = &image.StandardCompression
	case "none":
		c.o.Compression = &image.NoCompression
	default:
		return fmt.Errorf("use fast, standard or none")
	}
	return nil
}

func (c *compressionFlag) Type() string { return "fast|standard|none" }
