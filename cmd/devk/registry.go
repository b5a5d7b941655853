package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/devk/devk/image"
	"github.com/devk/devk/registry"
)

func newRegistryCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Run devk's embedded image registry, or list what a registry holds",
	}
	cmd.AddCommand(newRegistryServeCmd(g), newRegistryLsCmd(g), newRegistryForwardCmd(g))
	return cmd
}

func newRegistryServeCmd(g *globalOptions) *cobra.Command {
	o := registry.ServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve an image registry on loopback, content kept on disk",
		Long: `Serve an OCI / Docker v2 image registry (go-containerregistry's
pkg/registry) on 127.0.0.1:5000, or --addr. Blobs and manifests are kept
under $DEVK_HOME/registry (default ~/.devk/registry), or --root, so what
was pushed is still there after a restart. SIGTERM or Ctrl-C shuts it down
cleanly, letting requests in flight finish.

The root is created (mode 0755) when missing. It must belong to you and be
writable by no one else, and no directory above it may be writable by
another user (sticky ones like /tmp aside): otherwise someone could plant
a symlink there and have the registry write elsewhere. devk refuses such a
root and says how to fix it (chmod 0755 / chown). Nothing is ever read or
written outside the root, whatever links it holds.

Manifests pushed must be OCI or Docker v2 image manifests or indexes.
Deleting manifests and blobs is refused unless --allow-delete is given.

stdout gets the address once it accepts requests (handy with --addr
127.0.0.1:0); requests are logged to stderr with -v.`,
		Example: `  devk registry serve &
  devk registry serve --addr 127.0.0.1:5001 --root ~/.cache/devk-registry --allow-delete`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.Debug() {
				o.Log = g.stderr
			}
			o.Ready = func(addr string) {
				fmt.Fprintln(g.stdout, addr)
				if !g.Quiet {
					fmt.Fprintf(g.stderr, "registry serving on http://%s, content in %s\n", addr, o.Root)
				}
			}
			if o.Root == "" {
				root, err := registry.DefaultRoot()
				if err != nil {
					return err
				}
				o.Root = root
			}
			return registry.Serve(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Addr, "addr", image.DefaultRegistryAddr, "address to listen on")
	cmd.Flags().StringVar(&o.Root, "root", "", "where to keep blobs and manifests (default $DEVK_HOME/registry, DEVK_HOME defaulting to ~/.devk)")
	cmd.Flags().BoolVar(&o.AllowDelete, "allow-delete", false, "let clients delete manifests and blobs (refused by default)")
	return cmd
}

func newRegistryLsCmd(g *globalOptions) *cobra.Command {
	var (
		addr string
		ro   image.RemoteOptions
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List a registry's repositories, tags and the digest of each tag",
		Long: `List the repositories of a registry (through the registry API, so any
registry that serves /v2/_catalog works), their tags and the manifest
digest each tag points to now.`,
		Example: `  devk registry ls
  devk registry ls --registry localhost:5001 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := image.NewRemote(addr, ro)
			if err != nil {
				return err
			}
			repos, err := registry.List(cmd.Context(), r)
			if err != nil {
				return err
			}
			if g.Structured() {
				if repos == nil {
					repos = []registry.Repository{}
				}
				return g.Result(repos)
			}
			if len(repos) == 0 {
				fmt.Fprintf(g.stderr, "registry %s holds no repositories\n", r.Addr)
				return nil
			}
			host, _, _ := strings.Cut(r.Addr, "/")
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "REPOSITORY\tTAG\tDIGEST")
			for _, repo := range repos {
				if len(repo.Tags) == 0 {
					fmt.Fprintf(tw, "%s/%s\t<none>\t\n", host, repo.Name)
				}
				for _, t := range repo.Tags {
					fmt.Fprintf(tw, "%s/%s\t%s\t%s\n", host, repo.Name, t.Tag, t.Digest)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&addr, "registry", image.DefaultRegistry(), "registry to list, HOST[:PORT][/PREFIX]; $DEVK_REGISTRY changes the default")
	cmd.Flags().BoolVar(&ro.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	resultHelp(cmd, []registry.Repository{}, false)
	return cmd
}

func newRegistryForwardCmd(g *globalOptions) *cobra.Command {
	o := registry.ForwardOptions{To: image.DefaultRegistryAddr}
	cmd := &cobra.Command{
		Use:   "forward --addr HOST:PORT",
		Short: "Relay a registry on loopback to another address (a cluster's bridge)",
		Long: `Relay every TCP connection on --addr to the registry at --to, which must
be on loopback. A devk node is a network namespace and cannot reach the
host's 127.0.0.1; ` + "`devk up`" + ` runs one forwarder per cluster on the
cluster's bridge address, and the node's containerd pulls through it
(containerd's hosts.toml names it as the mirror), so images keep their
names (127.0.0.1:5000/…) and digests. SIGTERM or Ctrl-C stops it.`,
		Example: `  devk registry forward --addr 10.250.1.1:5000
  devk registry forward --addr 10.250.1.1:5001 --to 127.0.0.1:5001`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Addr == "" {
				return fmt.Errorf("--addr is required: the address to relay from, e.g. a cluster's bridge address 10.250.1.1:5000")
			}
			o.Ready = func(addr string) {
				fmt.Fprintln(g.stdout, addr)
				if !g.Quiet {
					fmt.Fprintf(g.stderr, "relaying %s to the registry at %s\n", addr, o.To)
				}
			}
			return registry.Forward(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Addr, "addr", "", "address to listen on (required)")
	cmd.Flags().StringVar(&o.To, "to", o.To, "the registry on loopback to relay to")
	return cmd
}
