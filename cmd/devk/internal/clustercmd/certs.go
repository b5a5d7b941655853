package clustercmd

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/devk/devk/certs"
	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
	"github.com/devk/devk/remote"
)

// expiringError asks for cli.ExitExpiring.
type expiringError struct {
	names  []string
	within string
}

func (e *expiringError) Error() string {
	return fmt.Sprintf("%d expire within %s or are missing: %s (a devk cluster's `devk up` replaces a certificate with less than %s left; a kubeadm node's: kubeadm certs renew)",
		len(e.names), e.within, strings.Join(e.names, ", "), pki.RenewBefore)
}

func (e *expiringError) ExitCode() int { return cli.ExitExpiring }

// certsFlags name the nodes whose certificates a certs command reads: a
// devk cluster's control-plane nodes by --name (and --node), or
// kubeadm's layout by its directories.
type certsFlags struct {
	Name string
	// Nodes limit a devk cluster's command to these control-plane nodes
	// (--node); empty: every one.
	Nodes         []string
	PKIDir        string
	KubeconfigDir string
	ManifestsDir  string
	// CRISocket and NodeName are renew's on a kubeadm node: where the
	// static pods run.
	CRISocket string
	NodeName  string
	// UserKubeconfig is renew's on a devk cluster: where up merged
	// context devk-NAME.
	UserKubeconfig string
}

func (f *certsFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.Name, "name", layout.DefaultName, "the devk cluster")
	fl.StringSliceVar(&f.Nodes, "node", nil, "only these control-plane nodes of the devk cluster (repeatable; default: every one)")
	fl.StringVar(&f.PKIDir, "pki-dir", "", "the certificates' directory, for a node devk did not make (kubeadm: "+cli.KubeadmNode.PKIDir+")")
	fl.StringVar(&f.KubeconfigDir, "kubeconfig-dir", "", "the directory of admin.conf and the other kubeconfigs (kubeadm: "+filepath.Dir(cli.KubeadmNode.Kubeconfig)+")")
	fl.StringVar(&f.ManifestsDir, "manifests-dir", "", "the kubelet's static pod dir, to tell which components use each file (kubeadm: "+cli.KubeadmNode.ManifestsDir+")")
}

// nodes resolves the flags: the directories given (--pki-dir names a node
// devk did not make; the kubeconfigs default to its parent directory, as
// kubeadm lays them out), or a devk cluster's control-plane nodes, each
// with its own files and runtime, node 0 first (those --node names, or
// every one that has joined). c is the devk cluster, nil for a kubeadm
// node.
func (f *certsFlags) nodes(g *cli.Options) (c *cluster.Cluster, out []certs.RenewNode, err error) {
	if f.PKIDir != "" {
		if len(f.Nodes) > 0 {
			return nil, nil, fmt.Errorf("--node names control-plane nodes of a devk cluster; a node devk did not make is the one --pki-dir names (its kubelet's name: --node-name)")
		}
		// kubeadm's layout around the directory of the kubeconfigs.
		dir := cmp.Or(f.KubeconfigDir, filepath.Dir(filepath.Clean(f.PKIDir)))
		kn := layout.Kubeadm(dir)
		kn.PKIDir = f.PKIDir
		kn.ManifestsDir = cmp.Or(f.ManifestsDir, kn.ManifestsDir)
		kn.CRISocket = cmp.Or(f.CRISocket, kn.CRISocket)
		return nil, []certs.RenewNode{{ControlPlaneNode: layout.ControlPlaneNode{Name: f.NodeName, Node: kn}}}, nil
	}
	if f.KubeconfigDir != "" || f.ManifestsDir != "" {
		return nil, nil, fmt.Errorf("for a node that devk did not make, pass --pki-dir (kubeadm: %s) too", cli.KubeadmNode.PKIDir)
	}
	if f.CRISocket != "" || f.NodeName != "" {
		return nil, nil, fmt.Errorf("--cri-socket and --node-name are for a node devk did not make (with --pki-dir): a devk cluster's nodes are known by name, pick them with --node")
	}
	home, err := layout.HomeDir("")
	if err != nil {
		return nil, nil, err
	}
	if _, _, err := layout.Open(home, f.Name); err != nil {
		return nil, nil, fmt.Errorf("%w; for a kubeadm node pass --pki-dir %s", err, cli.KubeadmNode.PKIDir)
	}
	if c, err = cluster.Open(cluster.Options{Name: f.Name, UserKubeconfig: f.UserKubeconfig, Reporter: g.Reporter()}); err != nil {
		return nil, nil, err
	}
	picked, err := pickControlPlanes(c.Config, f.Nodes)
	if err != nil {
		return nil, nil, err
	}
	if out, err = c.CertNodes(picked); err != nil {
		return nil, nil, err
	}
	return c, out, nil
}

// pickControlPlanes are the control-plane nodes a certs command on a devk
// cluster reads, in the cluster's order: those named (each must be a
// control-plane node that has joined), or every one that has joined.
func pickControlPlanes(cfg layout.Config, named []string) ([]string, error) {
	var joined []string
	for _, n := range cfg.ControlPlanes() {
		if !n.Joining {
			joined = append(joined, n.Name)
		}
	}
	if len(named) == 0 {
		return joined, nil
	}
	for _, name := range named {
		n, _, err := cfg.FindNode(name)
		switch {
		case err != nil:
			return nil, fmt.Errorf("--node: %w", err)
		case !n.IsControlPlane():
			return nil, fmt.Errorf("--node %s: a worker, whose kubelet renews its own client certificate; the control-plane nodes are %s", name, strings.Join(joined, ", "))
		case n.Joining:
			return nil, fmt.Errorf("--node %s: still joining; finish it with `devk node add %s` (or take it away with `devk node remove %s`)", name, name, name)
		}
	}
	var out []string
	for _, n := range joined {
		if slices.Contains(named, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// lockCertNodes takes, for the whole renewal, a devk cluster's lock and
// every node's (renew restarts the control planes' pods), or on a node
// devk did not make (the one --pki-dir names) that node's lock; release
// frees them.
func lockCertNodes(c *cluster.Cluster, nodes []certs.RenewNode) (release func(), err error) {
	if c != nil {
		return c.Lock()
	}
	l, err := nodelock.Acquire(nodes[0].Node.ManifestsDir, nodelock.Command())
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// NewCertsCmd is `devk certs`.
func NewCertsCmd(g *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Check when a control plane's certificates expire; renew them, restart what uses them, verify",
	}
	cmd.AddCommand(newCertsCheckCmd(g), newCertsRenewCmd(g))
	return cmd
}

func newCertsCheckCmd(g *cli.Options) *cobra.Command {
	var f certsFlags
	var access cli.Access
	var within string
	cmd := &cobra.Command{
		Use:   "check-expiration",
		Short: "List every certificate and kubeconfig: expiry, residual time, CA, renewable, used by",
		Long: `List the certificates of a cluster's control-plane nodes, as kubeadm certs
check-expiration does on one: each certificate of a node's PKI directory
(a devk cluster's also has the controller-manager's and scheduler's
serving certificates, controller-manager-server and scheduler-server; a
kubeadm node has none, and is not told they are missing) and the client
certificate of each kubeconfig (admin, super-admin, controller-manager,
scheduler; super-admin.conf only the first control-plane node has), with
when it expires, the time left, the CA that signed it, whether devk can
renew it (not when devk has the CA's certificate but not its key: an
external CA), and which static pods name the file. Then the CAs: every
control-plane node holds its own copy of the cluster's shared CAs.
kubelet.conf is left out, as kubeadm leaves it out: the kubelet renews its
own client certificate. It reads files only; the cluster may be down.

A devk cluster is found by --name; each of its control-plane nodes has
its own files (node 0's in the cluster's directory, the others' under
nodes/<node>/), and each row says whose it is (NODE; "node" with -o
json). --node picks some. A kubeadm node is found by --pki-dir
(/etc/kubernetes/pki), its kubeconfigs in the parent directory and its
manifests in manifests/ there unless --kubeconfig-dir and --manifests-dir
say otherwise; run it on each control-plane node.

Any other cluster is reached through its API, with only its kubeconfig
(--kubeconfig, else $KUBECONFIG's current context when there is no devk
cluster named devk here; --via-cluster forces it): devk pushes an image
of itself to --registry, which the nodes must pull from, and runs it as a
short-lived pod on each control-plane node (namespace devk-system, pinned
to the node, tolerating its taints, the node's certificate, kubeconfig and
manifest directories mounted read-only, no API token). The agent reads
the dates there; no key leaves the node. The nodes are those running a
kube-apiserver static pod; the files are where its --client-ca-file and
the controller-manager's --kubeconfig are, the manifests the kubelet's
staticPodPath. The pods are deleted when devk ends (and ended ones a
killed devk left, by the next one). Credentials that may not make
namespaces, pods and read their logs, nodes and kube-system's pods are
refused first, every missing permission named, nothing made. The first
line says which way devk runs.

Exit status: 0; 2 with --fail-within when anything on any node expires
sooner or is missing (for cron and CI); 1 on any other error.`,
		Example: `  devk certs check-expiration
  devk certs check-expiration --name dev2 -o json
  devk certs check-expiration --fail-within 30d
  devk certs check-expiration --name ha --node ha-control-plane2
  sudo devk certs check-expiration --pki-dir /etc/kubernetes/pki
  devk certs check-expiration --kubeconfig ~/work.conf --registry registry.example:5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var failWithin time.Duration
			if within != "" {
				var err error
				if failWithin, err = certs.ParseWithin(within); err != nil {
					return fmt.Errorf("--fail-within: %w", err)
				}
			}
			r, err := checkExpiration(cmd, g, &f, &access)
			if err != nil {
				return err
			}
			if g.Structured() {
				if err := g.Result(r); err != nil {
					return err
				}
			} else {
				printExpiration(g, r)
			}
			if within != "" {
				if names := r.ExpiringWithin(failWithin); len(names) > 0 {
					return &expiringError{names: names, within: within}
				}
			}
			return nil
		},
	}
	f.add(cmd)
	access.Add(cmd.Flags())
	cmd.Flags().StringVar(&within, "fail-within", "", "exit 2 if anything expires within this time or is missing: days (30d) or a Go duration (720h)")
	cli.ResultHelp(cmd, certs.Report{}, false)
	return cmd
}

// checkExpiration reads the certificates where the flags say (Decide):
// the files of a node, a devk cluster's nodes, or each control-plane
// node through the cluster, by devk's node agent.
func checkExpiration(cmd *cobra.Command, g *cli.Options, f *certsFlags, access *cli.Access) (*certs.Report, error) {
	d, err := access.Decide(cmd, g, f.Name, "", "pki-dir", "kubeconfig-dir", "manifests-dir")
	if err != nil {
		return nil, err
	}
	if d.Mode != remote.ThroughCluster {
		f.Name = cmp.Or(d.Name, f.Name)
		_, nodes, err := f.nodes(g)
		if err != nil {
			return nil, err
		}
		var named []layout.ControlPlaneNode
		for _, n := range nodes {
			named = append(named, n.ControlPlaneNode)
		}
		return certs.InspectNodes(named, time.Now())
	}
	ctx := cmd.Context()
	s, err := remote.Connect(ctx, d, access.Agent(), g.Version().Version, image.RemoteOptions{}, g.Reporter(), remote.ControlPlaneNeeds)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Certs(ctx, f.Nodes)
}

func printExpiration(g *cli.Options, r *certs.Report) {
	when := func(t time.Time) string { return t.UTC().Format("Jan 02, 2006 15:04 MST") }
	// NODE leads each row when the nodes have names (a devk cluster's);
	// a kubeadm node given by its directories is one unnamed node.
	named := slices.ContainsFunc(r.Nodes, func(n certs.NodeFiles) bool { return n.Name != "" })
	row := func(node string, cols ...string) string {
		if named {
			cols = append([]string{node}, cols...)
		}
		return strings.Join(cols, "\t") + "\n"
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprint(tw, row("NODE", "CERTIFICATE", "EXPIRES", "RESIDUAL TIME", "CERTIFICATE AUTHORITY", "RENEWABLE", "USED BY"))
	for _, c := range r.Certs {
		if c.Missing {
			fmt.Fprint(tw, row(c.Node, c.Name, "missing ("+c.Path+")", "-", c.CA, "-", orDash(strings.Join(c.UsedBy, ", "))))
			continue
		}
		renew := yesNo(c.Renewable)
		if !c.Renewable {
			renew = "no: " + c.Why
		}
		fmt.Fprint(tw, row(c.Node, c.Name, when(c.NotAfter), certs.HumanDuration(c.Residual), c.CA, renew, orDash(strings.Join(c.UsedBy, ", "))))
	}
	fmt.Fprintln(tw)
	fmt.Fprint(tw, row("NODE", "CERTIFICATE AUTHORITY", "EXPIRES", "RESIDUAL TIME", "EXTERNALLY MANAGED"))
	for _, c := range r.CAs {
		if c.Missing {
			fmt.Fprint(tw, row(c.Node, c.Name, "missing ("+c.Path+")", "-", "-"))
			continue
		}
		fmt.Fprint(tw, row(c.Node, c.Name, when(c.NotAfter), certs.HumanDuration(c.Residual), yesNo(c.External)))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newCertsRenewCmd(g *cli.Options) *cobra.Command {
	var f certsFlags
	var flags phase.Flags
	o := certs.RenewOptions{Validity: pki.CertValidity, Timeout: certs.DefaultRestartTimeout}
	cmd := &cobra.Command{
		Use:   "renew all|NAME...",
		Short: "Renew certificates from their CAs, restart the static pods that use them, verify the new ones are in use",
		Long: `Renew the certificates and kubeconfig client certificates of a cluster's
control-plane nodes (the names check-expiration lists, or all) from the
CAs that signed them, as kubeadm certs renew does on one node: the same
subject, SANs and usages, a new serial, valid for --validity from now.
Unlike kubeadm, the key is kept, so each certificate changes in one
atomic write and no kill can leave a certificate beside a key it does not
match; the previous file is kept beside it as <file>.devk-prev.

Then, as kubespray does after renewing, the static pods whose manifests
name a renewed file are restarted by removing their pod sandboxes through
CRI (the kubelet recreates them from the unchanged manifests); then devk
waits until the API server, etcd, the controller-manager and the
scheduler present the new serials on their ports (on a kubeadm node the
last two serve certificates they make themselves, in memory: there they
are seen restarted) and each renewed kubeconfig authenticates as its
subject. If any of that fails, the previous files are put back and the
pods restarted again. A certificate under an external CA (its key is not
here) is left alone by "all" and refused by name. The cluster must be
running.

A devk cluster's control-plane nodes (those --node names, or every one)
are renewed one at a time, node 0 first, each with its own files signed
by the shared CAs (each node's copy), and each verified before the next
is touched; the steps are reported as <node>/<phase>. Behind HAProxy (a
cluster made with --control-planes 2 or more) a node whose API server or
etcd restarts has its API server taken out of HAProxy first, as the
rolling swap does, those two stop gracefully, and it is put back once
verified, the next node waiting until HAProxy's checks pass on it: the
API stays up throughout. A failure on one node puts that node's previous
files back; the nodes before it keep their renewed ones, the nodes after
it are not touched. A node left out of HAProxy by a renewal that was
killed is put back first. A name only some nodes have (super-admin.conf:
the first node's) is renewed where it is.

On a devk cluster a renewed admin.conf of node 0 then goes into your
kubeconfig's context devk-NAME, as devk up merges it (--write-kubeconfig,
as up's).

A devk cluster is found by --name; a kubeadm node by --pki-dir (with
--cri-socket, default ` + layout.KubeadmCRISocket + `, and --node-name):
run it on each control-plane node, one at a time.

Unattended, as kubespray's timer does it (cron, as root):
  0 3 * * 0  devk certs check-expiration --fail-within 30d >/dev/null || devk certs renew all`,
		Example: `  devk certs renew all
  devk certs renew apiserver admin.conf
  devk certs renew apiserver --name ha --node ha-control-plane2
  devk certs renew all --validity 10m      # short-lived, to test rotation
  devk certs renew all --dry-run
  sudo devk certs renew all --pki-dir /etc/kubernetes/pki`,
		Args: cobra.MinimumNArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return append([]string{certs.AllNames}, certs.Names()...), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Validity <= 0 {
				return fmt.Errorf("--validity %s: give a positive duration (10m, 8760h)", o.Validity)
			}
			if o.Timeout <= 0 {
				return fmt.Errorf("--timeout %s: give a positive duration", o.Timeout)
			}
			if f.PKIDir != "" && f.UserKubeconfig != "" {
				return fmt.Errorf("--write-kubeconfig is a devk cluster's (where up merged context devk-NAME); on a node devk did not make, copy admin.conf yourself")
			}
			c, nodes, err := f.nodes(g)
			if err != nil {
				return err
			}
			if c != nil {
				// A devk cluster (CertNodes): node 0's renewed admin.conf
				// goes into the user's context as up merges it; behind
				// HAProxy each node's API server is taken out around its
				// restart and stops gracefully.
				o.UserKubeconfig, o.StopGrace = c.UserKubeconfigFile(), c.StaticPodStopGrace()
				defer g.FollowLogs(cmd.Context(), c.Config.Name)()
			}
			o.Nodes, o.Names = nodes, args
			popts := flags.Options()
			popts.Reporter = g.Reporter()
			popts.PlanOut = g.Stderr
			if !flags.DryRun {
				release, err := lockCertNodes(c, nodes)
				if err != nil {
					return err
				}
				defer release()
			}
			j, err := certs.Renew(cmd.Context(), o, popts)
			if err != nil || flags.DryRun {
				return err
			}
			if g.Structured() {
				return g.Result(j)
			}
			if err := printRenewed(g, j); err != nil {
				return err
			}
			if j.KubeconfigMerged != "" {
				fmt.Fprintf(g.Stdout, "\nyour kubeconfig: %s\n", j.KubeconfigMerged)
			}
			return nil
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.CRISocket, "cri-socket", "", "the node's CRI socket, for a node devk did not make (default "+layout.KubeadmCRISocket+")")
	fl.StringVar(&f.NodeName, "node-name", "", "the kubelet's node name, for a node devk did not make (default: any static pod named <pod>-…)")
	fl.DurationVar(&o.Validity, "validity", pki.CertValidity, "how long the renewed certificates are valid (capped at their CA's end)")
	fl.DurationVar(&o.Timeout, "timeout", certs.DefaultRestartTimeout, "how long to wait for the restarted pods to serve the new certificates")
	fl.StringVar(&f.UserKubeconfig, "write-kubeconfig", "", "a devk cluster's: the kubeconfig whose context devk-NAME gets a renewed admin.conf's credentials, as up merged it (default $KUBECONFIG, else ~/.kube/config)")
	phase.Bind(cmd, certs.RenewPhases(), &flags)
	cli.ResultHelp(cmd, certs.RenewJob{}, false)
	return cmd
}

// printRenewed is renew's table: NODE first on a devk cluster.
func printRenewed(g *cli.Options, j *certs.RenewJob) error {
	named := slices.ContainsFunc(j.Nodes, func(n certs.RenewNode) bool { return n.Name != "" })
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 3, ' ', 0)
	if named {
		fmt.Fprint(tw, "NODE\t")
	}
	fmt.Fprintln(tw, "RENEWED\tSERIAL\tEXPIRES\tIN USE")
	for _, r := range j.Renewed {
		if named {
			fmt.Fprint(tw, r.Node+"\t")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Serial, r.NotAfter.UTC().Format("Jan 02, 2006 15:04 MST"), r.Verified)
	}
	return tw.Flush()
}
