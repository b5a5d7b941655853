package clustercmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/fakenodes"
	"github.com/devk/devk/cluster/noderemove"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/join"
	"github.com/devk/devk/phase"
)

// NewNodeCmd is `devk node`.
func NewNodeCmd(g *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Add nodes to a running cluster, remove them, run a command in one",
		Long: `Add a worker node to a running devk cluster, or remove one. Each node is its
own network namespace on the cluster's bridge, with its own containerd,
kubelet, cgroup root and pod subnet; the nodes route each other's pods.

A node joins as a kubeadm node joins: it discovers the cluster through the
bootstrap token (ConfigMap kube-public/cluster-info, its JWS signature
checked with the token, the CA pinned by the hash of its public key) and
its kubelet gets its client certificate by TLS bootstrap (a CSR the
controller-manager approves and signs). ` + "`devk up --nodes N`" + ` joins workers
the same way.

` + "`devk node exec`" + ` runs a command inside a node, as ` + "`docker exec`" + ` into a kind
node.`,
		Example: `  devk node add                  # the next free name: devk-worker, devk-worker2, …
  devk node add devk-worker3 --dry-run
  devk node remove devk-worker
  devk node exec devk-worker -- iptables-save`,
	}
	cmd.AddCommand(newNodeAddCmd(g), newNodeRemoveCmd(g), newNodeExecCmd(g))
	return cmd
}

// nodeResult is devk node add's and remove's result with -o json|yaml.
type nodeResult struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	IP      string `json:"ip"`
	// PodCIDR is the node's pod subnet (add).
	PodCIDR string   `json:"podCIDR,omitempty"`
	Nodes   []string `json:"nodes"`
	Seconds float64  `json:"seconds"`
	// Phases are the job's phases: each one's time, and whether it
	// changed anything or was skipped (and why).
	Phases []layout.PhaseTiming `json:"phases"`
}

func newNodeAddCmd(g *cli.Options) *cobra.Command {
	var (
		o         cluster.NodeOptions
		flags     phase.Flags
		tokenFile string
		fake      int
	)
	cmd := &cobra.Command{
		Use:   "add [NAME]",
		Short: "Join a worker node to the cluster",
		Long: `Join a worker node to a running cluster: its network namespace and veth, its
containerd, discovery through the bootstrap token with the CA pinned, its
kubelet started with a bootstrap kubeconfig (TLS bootstrap), its pod
subnet's CNI network and routes in every node, then wait until it is Ready
and kube-proxy runs on it. NAME defaults to the next free one of kind's
style (<cluster>-worker, <cluster>-worker2, …).

A join that fails half way leaves the node recorded: ` + "`devk node add NAME`" + ` again
resumes it, ` + "`devk node remove NAME`" + ` takes it away. Needs root.

--fake N adds N of kwok's fake nodes instead (see ` + "`devk up --help`" + `): Node
objects kwok keeps Ready, named <cluster>-fake-1, -2, …; kwok is built and
started first if the cluster has none yet.`,
		Example: `  devk node add
  devk node add --name dev2 dev2-worker2
  devk node add --dry-run
  devk node add --fake 100                                                      # 100 more of kwok's fake nodes
  devk node add --token-file token.txt --discovery-token-ca-cert-hash sha256:…   # as kubeadm join is told
  devk node add --token-file - < token.txt                                      # the token from stdin`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("fake") {
				if err := fakeOnly(cmd, args, fake, "control-plane", "token", "token-file", "discovery-token-ca-cert-hash"); err != nil {
					return err
				}
				return runFake(cmd, g, fakenodes.Options{Options: cluster.Options{Name: o.Name}, Add: fake}, &flags)
			}
			if len(args) == 1 {
				o.Node = args[0]
			}
			tok, err := joinTokenFlags(o.Token, tokenFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			o.Token = tok
			o.Reporter = g.Reporter()
			popts := g.PhaseOptions(&flags)
			t0 := time.Now()
			j, res, err := cluster.AddNode(cmd.Context(), o, popts)
			if err != nil {
				var failed *phase.Failed
				if j != nil && j.Registered() && !flags.DryRun && (errors.As(err, &failed) || cmd.Context().Err() != nil) {
					return fmt.Errorf("%w\nthe node is left as it is: `devk node add%s %s` resumes it, `devk node remove%s %s` removes it", err, nameFlag(j.Cluster.Config.Name), j.Node.Name(), nameFlag(j.Cluster.Config.Name), j.Node.Name())
				}
				return err
			}
			if flags.DryRun {
				return nil
			}
			took := time.Since(t0)
			r := nodeResult{Cluster: j.Cluster.Config.Name, Node: j.Node.Name(), IP: j.Node.IP(), PodCIDR: j.Node.PodCIDR(), Nodes: j.Cluster.Config.NodeNames(), Seconds: took.Seconds(), Phases: cluster.PhaseTimings(res)}
			if g.Structured() {
				return g.Result(r)
			}
			fmt.Fprintf(g.Stdout, "node %s joined cluster %s in %s: %s, pods %s; the cluster has %d nodes\n", r.Node, r.Cluster, progress.Round(took), r.IP, r.PodCIDR, len(r.Nodes))
			return nil
		},
	}
	f := cmd.Flags()
	addNodeOptionsFlags(f, &o)
	f.BoolVar(&o.ControlPlane, "control-plane", false, "join a control-plane node: the shared certificates by upload-certs, its own etcd member, API server, controller-manager and scheduler (a cluster made with --control-planes 2 or more: it has the load balancer)")
	f.StringVar(&o.Token, "token", "", "bootstrap token to join with, <id>.<secret> (kubeadm's --token; default: the cluster's own, renewed when it expires within an hour); every user of the machine sees it in the process list while the node joins: prefer --token-file")
	f.StringVar(&tokenFile, "token-file", "", "read the bootstrap token to join with from FILE, or from stdin with -, where other users cannot see it (as --token otherwise)")
	f.StringSliceVar(&o.CAHashes, "discovery-token-ca-cert-hash", nil, "pin the cluster's CA by the SHA-256 of its public key, sha256:<hex> (kubeadm's flag; repeatable; default: the hash of the cluster's own CA)")
	f.IntVar(&fake, "fake", 0, "add this many of kwok's fake nodes instead of a real one")
	f.DurationVar(&o.DiscoveryTimeout, "discovery-timeout", join.DefaultTimeout, "how long discovery waits for the API server and for cluster-info signed for the token")
	phase.Bind(cmd, cluster.JoinPhases(), &flags)
	cli.ResultHelp(cmd, nodeResult{}, false)
	return cmd
}

// addNodeOptionsFlags adds the flags node add and node remove share.
func addNodeOptionsFlags(f *pflag.FlagSet, o *cluster.NodeOptions) {
	f.StringVar(&o.Name, "name", layout.DefaultName, "the cluster")
	f.DurationVar(&o.EtcdCommandTimeout, "command-timeout", etcdwatch.DefaultCommandTimeout, "how long each etcd member call of a control-plane node may take (with quorum lost it fails after this)")
}

// maxTokenFile bounds what --token-file reads: a token is 23 bytes.
const maxTokenFile = 4096

// joinTokenFlags is the bootstrap token node add was given: --token, or
// what --token-file holds (from stdin for -), trimmed; "" for neither.
// It is checked here, before anything is done, and never printed.
func joinTokenFlags(token, file string, stdin io.Reader) (string, error) {
	switch {
	case token != "" && file != "":
		return "", errors.New("give the bootstrap token by --token or by --token-file, not both (--token-file keeps it out of the process list)")
	case file == "" && token == "":
		return "", nil
	case file == "":
		if _, err := join.ParseToken(token); err != nil {
			return "", fmt.Errorf("--token: %w", err)
		}
		return strings.TrimSpace(token), nil
	}
	from, in := file, stdin
	if file == "-" {
		from = "stdin"
	} else {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		defer f.Close()
		in = f
	}
	data, err := io.ReadAll(io.LimitReader(in, maxTokenFile+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("--token-file: read %s: %w", from, err)
	case len(data) > maxTokenFile:
		return "", fmt.Errorf("--token-file: %s holds more than a bootstrap token (over %d bytes): give a file with the token alone", from, maxTokenFile)
	case strings.TrimSpace(string(data)) == "":
		return "", fmt.Errorf("--token-file: %s holds no bootstrap token: give one, <id>.<secret>", from)
	}
	if _, err := join.ParseToken(string(data)); err != nil {
		return "", fmt.Errorf("--token-file: %s: %w", from, err)
	}
	return strings.TrimSpace(string(data)), nil
}

func newNodeRemoveCmd(g *cli.Options) *cobra.Command {
	var (
		o       cluster.NodeOptions
		flags   phase.Flags
		fake    int
		allFake bool
	)
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Drain a node and remove it from the cluster",
		Long: `Remove a node that ` + "`devk node add`" + ` or ` + "`devk up --nodes`" + ` joined: cordon it and
evict its pods through the API (PodDisruptionBudgets hold; DaemonSet pods
stay and go with the node), stop its kubelet, pods and containerd, unmount
and remove what lies under its directory, its cgroup root, the other
nodes' routes to its pods and its network namespace, delete its Node and
take it out of cluster.json. The node ` + "`devk up`" + ` made goes only with the
cluster (` + "`devk down`" + `). Needs root.

--fake N removes the last N of kwok's fake nodes (their Node objects and
leases; their pods go with them); --all-fake removes every one, and kwok
with its credential and rights.`,
		Example: `  devk node remove devk-worker
  devk node remove devk-worker2 --dry-run
  devk node remove --fake 50
  devk node remove --all-fake`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("fake") || allFake {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		ValidArgsFunction: completeNodeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("fake") || allFake {
				if cmd.Flags().Changed("fake") && allFake {
					return errors.New("give --fake N or --all-fake, not both")
				}
				n := fake
				if allFake {
					n = 1 // no count to check
				}
				if err := fakeOnly(cmd, args, n); err != nil {
					return err
				}
				return runFake(cmd, g, fakenodes.Options{Options: cluster.Options{Name: o.Name}, Remove: fake, RemoveAll: allFake}, &flags)
			}
			o.Node = args[0]
			o.Reporter = g.Reporter()
			popts := g.PhaseOptions(&flags)
			t0 := time.Now()
			j, res, err := noderemove.Run(cmd.Context(), o, popts)
			if err != nil || flags.DryRun {
				return err
			}
			took := time.Since(t0)
			r := nodeResult{Cluster: j.Cluster.Config.Name, Node: j.Node.Name(), IP: j.Node.IP(), Nodes: j.Cluster.Config.NodeNames(), Seconds: took.Seconds(), Phases: cluster.PhaseTimings(res)}
			if g.Structured() {
				return g.Result(r)
			}
			fmt.Fprintf(g.Stdout, "node %s is gone from cluster %s in %s; %d nodes left\n", r.Node, r.Cluster, progress.Round(took), len(r.Nodes))
			return nil
		},
	}
	f := cmd.Flags()
	addNodeOptionsFlags(f, &o)
	f.IntVar(&fake, "fake", 0, "remove the last N of kwok's fake nodes instead of a real node")
	f.BoolVar(&allFake, "all-fake", false, "remove every fake node, and kwok")
	phase.Bind(cmd, noderemove.Phases(), &flags)
	cli.ResultHelp(cmd, nodeResult{}, false)
	return cmd
}

// fakeOnly refuses, with --fake, a node name, a count below 1, the
// phase flags of a real node's job and the flags named.
func fakeOnly(cmd *cobra.Command, args []string, n int, flags ...string) error {
	if len(args) > 0 {
		return fmt.Errorf("--fake names no node: the fake nodes are named <cluster>-fake-1, -2, … (got %s)", args[0])
	}
	if n < 1 {
		return fmt.Errorf("--fake %d: want 1 or more", n)
	}
	for _, f := range append(flags, "only", "skip-phases") {
		if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
			return fmt.Errorf("--%s is for a real node: leave it out with --fake", f)
		}
	}
	return nil
}

// fakeResult is node add|remove --fake's result with -o json|yaml.
type fakeResult struct {
	Cluster   string               `json:"cluster"`
	FakeNodes int                  `json:"fakeNodes"`
	Seconds   float64              `json:"seconds"`
	Phases    []layout.PhaseTiming `json:"phases"`
}

// runFake runs the fake-node job for node add|remove --fake.
func runFake(cmd *cobra.Command, g *cli.Options, o fakenodes.Options, flags *phase.Flags) error {
	o.Reporter = g.Reporter()
	t0 := time.Now()
	c, res, err := fakenodes.Run(cmd.Context(), o, g.PhaseOptions(flags))
	if err != nil || flags.DryRun {
		return err
	}
	took := time.Since(t0)
	r := fakeResult{Cluster: c.Config.Name, FakeNodes: c.Config.Spec.FakeNodes.Total(), Seconds: took.Seconds(), Phases: cluster.PhaseTimings(res)}
	if g.Structured() {
		return g.Result(r)
	}
	fmt.Fprintf(g.Stdout, "cluster %s has %d fake nodes (%s)\n", r.Cluster, r.FakeNodes, progress.Round(took))
	return nil
}
