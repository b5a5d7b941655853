// Package registrycmd is `devk registry`: the embedded registry served,
// listed, forwarded to, and its credential.
package registrycmd

import (
	"fmt"
	"log"
	"math"
	"net"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/registry"
)

// NewRegistryCmd is `devk registry`.
func NewRegistryCmd(g *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Run devk's embedded image registry, or list what a registry holds",
	}
	cmd.AddCommand(newRegistryServeCmd(g), newRegistryLsCmd(g), newRegistryForwardCmd(g), newRegistryCredentialCmd(g))
	return cmd
}

func newRegistryServeCmd(g *cli.Options) *cobra.Command {
	o := registry.ServeOptions{MaxBlobSize: registry.DefaultMaxBlobSize, MaxStorage: registry.DefaultMaxStorage}
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

Reads (GET, HEAD) are open to anyone who reaches the address: nodes'
containerd pull without a credential. Writes (PUT, POST, PATCH, DELETE)
need devk's credential, basic auth as user "devk" with the secret in
--credential (default $DEVK_HOME/registry-credential, made on first use:
random, mode 0600, readable by you alone); anything else is refused 401
UNAUTHORIZED. devk's own pushes (push, build --push, up, e2e images,
watch) send it to a registry on loopback that you run; ` + "`devk registry credential`" + `
prints it for another client (crane auth login -u devk).

What pushes may store is bounded: --max-blob-size per blob (default ` + humanSize(registry.DefaultMaxBlobSize) + `),
--max-storage for all blobs and manifests under the root (default ` + humanSize(registry.DefaultMaxStorage) + `),
and a write that would leave less than ` + humanSize(registry.MinFreeSpace) + ` free on the root's file
system is refused too: 413 DENIED, saying which limit and how to raise it.

Manifests pushed must be OCI or Docker v2 image manifests or indexes.
Deleting manifests and blobs is refused unless --allow-delete is given.

stdout gets the address once it accepts requests (handy with --addr
127.0.0.1:0); requests are logged to stderr with -v.`,
		Example: `  devk registry serve &
  devk registry serve --addr 127.0.0.1:5001 --root ~/.cache/devk-registry --allow-delete
  devk registry serve --max-storage 200Gi`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.Debug() {
				o.Log = g.Stderr
			}
			o.Ready = func(addr string) {
				fmt.Fprintln(g.Stdout, addr)
				if !g.Quiet {
					fmt.Fprintf(g.Stderr, "registry serving on http://%s, content in %s\n", addr, o.Root)
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
	cmd.Flags().StringVar(&o.CredentialFile, "credential", "", "the file holding the secret writes need, made (mode 0600) when missing (default $DEVK_HOME/"+layout.RegistryCredentialFile+")")
	cmd.Flags().Var((*sizeFlag)(&o.MaxBlobSize), "max-blob-size", "the largest blob a push may store (a Kubernetes quantity: 512Mi, 4Gi)")
	cmd.Flags().Var((*sizeFlag)(&o.MaxStorage), "max-storage", "the most all blobs and manifests under --root may take (a Kubernetes quantity: 64Gi)")
	return cmd
}

// humanSize is n bytes as a Kubernetes quantity (4Gi).
func humanSize(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

// sizeFlag is a size in bytes, given as a Kubernetes quantity.
type sizeFlag int64

func (s *sizeFlag) String() string { return humanSize(int64(*s)) }
func (s *sizeFlag) Type() string   { return "size" }

func (s *sizeFlag) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	// Past int64, Value wraps around (2^64+5 bytes would be 5).
	if err != nil || q.Sign() <= 0 || q.CmpInt64(math.MaxInt64) > 0 {
		return fmt.Errorf("want a size above 0 such as 512Mi or 64Gi (at most 8Ei)")
	}
	*s = sizeFlag(q.Value())
	return nil
}

func newRegistryCredentialCmd(g *cli.Options) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "credential",
		Short: "Print the secret writes to devk's registry need (made when missing)",
		Long: `Print the secret that ` + "`devk registry serve`" + ` requires of every write, the
password of user "devk" in basic auth, so that a client other than devk
can push (devk's own commands send it themselves). It is kept in
--credential (default $DEVK_HOME/registry-credential, mode 0600) and
never printed otherwise.`,
		Example: `  devk registry credential | crane auth login 127.0.0.1:5000 -u devk --password-stdin`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				var err error
				if file, err = image.DefaultCredentialFile(); err != nil {
					return err
				}
			}
			secret, err := image.EnsureCredential(file)
			if err != nil {
				return err
			}
			fmt.Fprintln(g.Stdout, secret)
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "credential", "", "the credential file (default $DEVK_HOME/"+layout.RegistryCredentialFile+")")
	return cmd
}

func newRegistryLsCmd(g *cli.Options) *cobra.Command {
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
				fmt.Fprintf(g.Stderr, "registry %s holds no repositories\n", r.Addr)
				return nil
			}
			host, _, _ := strings.Cut(r.Addr, "/")
			tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
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
	cli.ResultHelp(cmd, []registry.Repository{}, false)
	return cmd
}

func newRegistryForwardCmd(g *cli.Options) *cobra.Command {
	o := registry.ForwardOptions{To: image.DefaultRegistryAddr}
	var allow string
	cmd := &cobra.Command{
		Use:   "forward --addr HOST:PORT",
		Short: "Serve pulls from a registry on loopback at another address (a cluster's bridge)",
		Long: `Serve pulls (GET and HEAD) on --addr from the registry at --to, which must
be on loopback; any other method is answered 405 UNSUPPORTED, so nothing
can push through it. A devk node is a network namespace and cannot reach
the host's 127.0.0.1; ` + "`devk up`" + ` runs one forwarder per cluster on the
cluster's bridge address, and the node's containerd pulls through it
(containerd's hosts.toml names it as the registry's server), so images keep their
names (127.0.0.1:5000/…) and digests.

--device binds the listener to the cluster's bridge (SO_BINDTODEVICE):
Linux takes packets for any of the host's addresses on any interface, so
without it a machine on the LAN that routes the bridge's subnet via this
host would reach the forwarder. --allow is the node subnet connections
may come from (the host's own addresses always may); others are closed
unanswered. SIGTERM or Ctrl-C stops it.`,
		Example: `  devk registry forward --addr 10.250.1.1:5000 --device dkb-devk --allow 10.250.1.0/24
  devk registry forward --addr 10.250.1.1:5001 --to 127.0.0.1:5001 --device dkb-devk --allow 10.250.1.0/24`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Addr == "" {
				return fmt.Errorf("--addr is required: the address to relay from, e.g. a cluster's bridge address 10.250.1.1:5000")
			}
			if allow != "" {
				_, n, err := net.ParseCIDR(allow)
				if err != nil {
					return fmt.Errorf("--allow %q: want the node subnet as a CIDR, e.g. 10.250.1.0/24: %w", allow, err)
				}
				o.Allow = n
			}
			o.Log = log.New(g.Stderr, "forward ", log.LstdFlags)
			o.Ready = func(addr string) {
				fmt.Fprintln(g.Stdout, addr)
				if !g.Quiet {
					fmt.Fprintf(g.Stderr, "relaying %s to the registry at %s\n", addr, o.To)
				}
			}
			return registry.Forward(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Addr, "addr", "", "address to listen on (required)")
	cmd.Flags().StringVar(&o.To, "to", o.To, "the registry on loopback to relay to")
	cmd.Flags().StringVar(&o.Device, "device", "", "the network device to take connections on only (the cluster's bridge)")
	cmd.Flags().StringVar(&allow, "allow", "", "the subnet clients may come from besides the host's own addresses (the cluster's node subnet)")
	return cmd
}
