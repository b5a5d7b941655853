// Package etcdcmd is `devk etcd`: ls, get, watch and diff of what the
// API server keeps in etcd.
package etcdcmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/remote"
)

// etcdFlags are the connection flags every `devk etcd` command shares.
type etcdFlags struct {
	conn etcdwatch.ConnOptions
	// access and node are ls's and get's, through the cluster.
	access cli.Access
	node   string
}

// options returns the connection options, noting whether --cluster was
// given (a named cluster that is missing is an error, not a reason to
// look for a kubeadm node).
func (f *etcdFlags) options(cmd *cobra.Command) etcdwatch.ConnOptions {
	o := f.conn
	o.ClusterSet = cmd.Flags().Changed("name") || cmd.Flags().Changed("cluster")
	return o
}

// query fills what every etcd command shares: the connection, the target
// (when one is given), how values are decoded (d may be nil) and where
// output and progress go.
func (f *etcdFlags) query(cmd *cobra.Command, g *cli.Options, q *etcdwatch.Query, target []string, d *decodeFlags) error {
	q.Conn = f.options(cmd)
	if len(target) == 1 {
		q.Target = target[0]
	}
	if d != nil {
		var err error
		if q.Decode, err = d.options(); err != nil {
			return err
		}
	}
	q.Format = g.Format()
	q.Out = g.Stdout
	q.Log = g.Reporter()
	return nil
}

// runE is a command's RunE: the query filled from the flags and the
// arguments (see query), then run.
func (f *etcdFlags) runE(g *cli.Options, q *etcdwatch.Query, d *decodeFlags, run func(context.Context) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f.query(cmd, g, q, args, d); err != nil {
			return err
		}
		return run(cmd.Context())
	}
}

// addRemote adds the flags of a command that also runs through the
// cluster (ls, get, watch, diff): its kubeconfig, --via-cluster,
// --registry, --node.
func (f *etcdFlags) addRemote(fl *pflag.FlagSet) {
	f.access.Add(fl)
	fl.StringVar(&f.node, "node", "", "through the cluster: the control-plane node whose etcd to read (default: the first)")
}

// throughFunc runs an etcd command's task t through the cluster, on
// control-plane node ("" for the first).
type throughFunc func(ctx context.Context, s *remote.Session, node string, t agent.EtcdTask) error

// printThrough is the throughFunc of ls and get: the agent's output,
// printed.
func printThrough(g *cli.Options) throughFunc {
	return func(ctx context.Context, s *remote.Session, node string, t agent.EtcdTask) error {
		out, err := s.Etcd(ctx, node, t)
		if err != nil {
			return err
		}
		_, err = io.WriteString(g.Stdout, out)
		return err
	}
}

// remoteE is runE for a command that also runs through the cluster: when
// the flags name a cluster reached through its API (cli.Access.Decide),
// the query runs on a control-plane node, by devk's node agent, with that
// node's API server's etcd flags; task gives the command's own part of
// it, through runs it.
func (f *etcdFlags) remoteE(g *cli.Options, q *etcdwatch.Query, d *decodeFlags, run func(context.Context) error, task func() agent.EtcdTask, through throughFunc) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		local := ""
		if _, err := os.Stat(filepath.Join(layout.Kubeadm("").ManifestsDir, "kube-apiserver.yaml")); err == nil {
			local = "a kubeadm node's files (" + layout.KubeadmDir + ")"
		}
		if os.Getenv("ETCDCTL_ENDPOINTS") != "" {
			local = "ETCDCTL_ENDPOINTS"
		}
		decision, err := f.access.Decide(cmd, g, f.conn.Cluster, local, "endpoints", "cacert", "cert", "key")
		if err != nil {
			return err
		}
		if decision.Mode != remote.ThroughCluster {
			if f.node != "" {
				return fmt.Errorf("--node picks a control-plane node through the cluster (%s)", decision.Why)
			}
			if decision.Mode == remote.DevkCluster {
				f.conn.Cluster = decision.Name
			}
			return f.runE(g, q, d, run)(cmd, args)
		}
		if err := f.query(cmd, g, q, args, d); err != nil {
			return err
		}
		t := task()
		t.Target, t.Namespace, t.Conn.Prefix, t.Format = q.Target, q.Namespace, q.Conn.Prefix, q.Format
		if d != nil {
			t.ShowSecrets, t.Ignore = d.showSecrets, d.ignore
		}
		ctx := cmd.Context()
		s, err := remote.Connect(ctx, decision, f.access.Agent(), g.Version().Version, image.RemoteOptions{}, g.Reporter(), remote.ControlPlaneNeeds)
		if err != nil {
			return err
		}
		defer s.Close()
		return through(ctx, s, f.node, t)
	}
}

// decodeFlags are the flags of the commands that print values.
type decodeFlags struct {
	showSecrets bool
	ignore      []string
}

func (d *decodeFlags) bind(cmd *cobra.Command, defaultIgnore []string) {
	f := cmd.Flags()
	f.BoolVar(&d.showSecrets, "show-secrets", false, "print Secret data in the clear (redacted by default, sizes kept)")
	f.StringSliceVar(&d.ignore, "ignore", defaultIgnore, "field paths to leave out of printed values and diffs, comma separated (e.g. metadata.managedFields,status.conditions)")
}

// bindChanges binds the flags of the commands that print changes (watch,
// diff): --exclude into exclude, and the decode flags, leaving out
// DefaultIgnore's fields unless told.
func (d *decodeFlags) bindChanges(cmd *cobra.Command, exclude *[]string) {
	cmd.Flags().StringSliceVar(exclude, "exclude", etcdwatch.DefaultExclude, "resources to leave out unless named")
	d.bind(cmd, etcdwatch.DefaultIgnore)
}

func (d *decodeFlags) options() (etcdwatch.DecodeOptions, error) {
	paths, err := etcdwatch.ParseFieldPaths(d.ignore)
	if err != nil {
		return etcdwatch.DecodeOptions{}, err
	}
	return etcdwatch.DecodeOptions{ShowSecrets: d.showSecrets, Ignore: paths}, nil
}

func completeResources(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return etcdwatch.ResourceNames(), cobra.ShellCompDirectiveNoFileComp
}

// NewEtcdCmd is `devk etcd`.
func NewEtcdCmd(g *cli.Options) *cobra.Command {
	f := &etcdFlags{}
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Read a cluster's etcd decoded: get, ls, watch, and the exact diff a command causes",
		Long: `Look at what the API server wrote to etcd, decoded.

Values stored as Kubernetes protobuf (k8s\x00...) are decoded with the
k8s.io/api, apiextensions.k8s.io and apiregistration.k8s.io schemes and
printed as YAML (-o json for JSON); of types outside them (a newer
Kubernetes's) the metadata is shown. JSON values (custom resources, and the
CustomResourceDefinitions and APIServices the API server stores as JSON)
are printed whole; values written through an encryption provider
(k8s:enc:<provider>:...) are named as such; anything else gets a short
summary. Secret data is redacted unless --show-secrets.

Objects are named as keys (/registry/pods/default/web) or as
RESOURCE[/NAMESPACE]/NAME with kubectl's names (po, svc, cm, deploy,
widgets.example.com for custom resources). Irregular keys are mapped for
you: services live under /registry/services/specs/, nodes under
/registry/minions/.

Connection: the devk cluster's etcd is the one its API server uses: the
--etcd-* flags of its manifest, else its PKI and cluster.json
($DEVK_HOME/clusters/<--name>, default ~/.devk); else a kubeadm node's
(/etc/kubernetes). --endpoints, --cacert, --cert, --key and
ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY override it;
http:// endpoints are used without TLS.

ls, get, watch and diff also reach a cluster devk did not make on this machine,
through its API alone (--kubeconfig; else $KUBECONFIG's current context
when there is no devk cluster named devk here and this machine is no
kubeadm node; --via-cluster forces it): devk pushes an image of itself to
--registry, which the nodes pull from, and runs the command as a
short-lived pod on a control-plane node (--node, default the first) in the
node's network, with that node's API server's --etcd-* flags and the
directories of its etcd client certificate mounted read-only. Only what
the command prints leaves the node; Secrets stay redacted unless
--show-secrets. A diff reads etcd's revision through the API server before
and after the command after -- (which runs here, with your kubeconfig),
and such a pod prints what changed between the two. A watch's pod sends
each change as it comes and is deleted when you stop it (Ctrl-C); if
devk is killed instead, the next devk command deletes it (devk stamps it
every 10 s while it reads).`,
		Example: `  devk etcd ls --count                      # keys per resource
  devk etcd get svc/default/kubernetes      # one object, decoded
  devk etcd watch pods -n kube-system       # changes as they happen, as diffs
  devk etcd diff -- kubectl create configmap x --from-literal=a=b
  devk etcd diff --since-rev 1200           # everything since a revision
  devk etcd ls --endpoints http://127.0.0.1:2379   # any etcd, no TLS
  devk etcd get svc/default/kubernetes --kubeconfig work.conf --registry REG   # through the cluster
  devk etcd diff --kubeconfig work.conf --registry REG -- kubectl --kubeconfig work.conf scale deploy web --replicas=2`,
	}
	pf := cmd.PersistentFlags()
	pf.StringSliceVar(&f.conn.Endpoints, "endpoints", nil, "etcd client URLs, comma separated (default: the cluster's; env ETCDCTL_ENDPOINTS)")
	pf.StringVar(&f.conn.CACert, "cacert", "", "CA bundle that signed etcd's server certificate (env ETCDCTL_CACERT)")
	pf.StringVar(&f.conn.Cert, "cert", "", "client certificate etcd trusts (env ETCDCTL_CERT)")
	pf.StringVar(&f.conn.Key, "key", "", "client certificate's key (env ETCDCTL_KEY)")
	pf.StringVar(&f.conn.Cluster, "name", layout.DefaultName, "devk cluster whose etcd to use")
	// --cluster was this flag's name before every command took --name.
	pf.StringVar(&f.conn.Cluster, "cluster", layout.DefaultName, "same as --name")
	cli.Deprecate(pf, "cluster", "use --name, as every devk command does")
	pf.StringVar(&f.conn.Prefix, "etcd-prefix", "", "the API server's --etcd-prefix (default: from its manifest, else /registry)")
	pf.DurationVar(&f.conn.DialTimeout, "dial-timeout", etcdwatch.DefaultDialTimeout, "how long to wait for etcd to accept the connection and answer a first read")
	pf.DurationVar(&f.conn.CommandTimeout, "command-timeout", etcdwatch.DefaultCommandTimeout, "how long each request to etcd may take once connected (watch's stream of changes is not limited)")
	cmd.AddCommand(
		newEtcdLsCmd(g, f),
		newEtcdGetCmd(g, f),
		newEtcdWatchCmd(g, f),
		newEtcdDiffCmd(g, f),
	)
	return cmd
}

func newEtcdLsCmd(g *cli.Options, f *etcdFlags) *cobra.Command {
	var o etcdwatch.LsOptions
	cmd := &cobra.Command{
		Use:   "ls [RESOURCE[/NAMESPACE] | /PREFIX]",
		Short: "List keys, or count them per resource",
		Long: `List the keys under a resource, a namespace of it, or a raw key prefix
(everything under /registry by default). Only keys are read, a page at a
time, all at one revision.`,
		Example: `  devk etcd ls                          # every key the API server wrote
  devk etcd ls --count                  # how many keys per resource
  devk etcd ls -n kube-system --count   # the same, for one namespace
  devk etcd ls svc/default              # /registry/services/specs/default/...
  devk etcd ls /registry/minions/       # a raw prefix
  devk etcd ls pods --rev 1200          # the pods that existed at revision 1200
  devk etcd ls deploy -o json           # keys with their revisions, as JSON`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeResources,
		RunE: f.remoteE(g, &o.Query, nil, func(ctx context.Context) error { return etcdwatch.Ls(ctx, o) },
			func() agent.EtcdTask { return agent.EtcdTask{Verb: agent.EtcdLs, Rev: o.Rev, Count: o.Count} }, printThrough(g)),
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.Namespace, "namespace", "n", "", "only keys in this namespace")
	fl.BoolVar(&o.Count, "count", false, "print the number of keys per resource instead of the keys")
	fl.Int64Var(&o.Rev, "rev", 0, "list the keys as they were at this revision")
	f.addRemote(fl)
	cli.ResultHelp(cmd, etcdwatch.LsResult{}, false)
	return cmd
}

func newEtcdGetCmd(g *cli.Options, f *etcdFlags) *cobra.Command {
	var (
		o etcdwatch.GetOptions
		d decodeFlags
	)
	cmd := &cobra.Command{
		Use:   "get KEY | RESOURCE[/NAMESPACE]/NAME",
		Short: "Print one value, decoded",
		Long: `Print one key's value, decoded, with its revisions: when it was written,
created, and how many times. A namespaced RESOURCE/NAME means namespace
"default" (or -n).`,
		Example: `  devk etcd get svc/default/kubernetes
  devk etcd get pods/kube-system/etcd-devk-control-plane --ignore metadata.managedFields
  devk etcd get cm/kube-system/kubeadm-config --rev 1200    # as it was at revision 1200
  devk etcd get secret/kube-system/bootstrap-token-abcdef --show-secrets
  devk etcd get /registry/ranges/serviceips                 # any key
  devk etcd get node/devk-control-plane -o json             # the object as JSON`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeResources,
		RunE: f.remoteE(g, &o.Query, &d, func(ctx context.Context) error { return etcdwatch.Get(ctx, o) },
			func() agent.EtcdTask { return agent.EtcdTask{Verb: agent.EtcdGet, Rev: o.Rev} }, printThrough(g)),
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.Namespace, "namespace", "n", "", "namespace of RESOURCE/NAME (default \"default\")")
	fl.Int64Var(&o.Rev, "rev", 0, "read the value as it was at this revision")
	f.addRemote(fl)
	d.bind(cmd, nil)
	cli.ResultHelp(cmd, etcdwatch.GetResult{}, false)
	return cmd
}

func newEtcdWatchCmd(g *cli.Options, f *etcdFlags) *cobra.Command {
	var (
		o etcdwatch.WatchOptions
		d decodeFlags
	)
	cmd := &cobra.Command{
		Use:   "watch [RESOURCE[/NAMESPACE] | /PREFIX]",
		Short: "Stream changes as they happen, decoded, each as a diff",
		Long: `Print every change under a resource (everything under /registry by
default) as it happens: ADDED objects in full, MODIFIED ones as a unified
diff against the previous value (which etcd supplies), DELETED ones with
what was removed. Ctrl-C stops.

Leases are left out unless named (--exclude '' keeps them): leader election
renews them every few seconds. metadata.managedFields is left out of
values (--ignore '' keeps it).`,
		Example: `  devk etcd watch                           # everything but leases
  devk etcd watch svc -n default            # services in one namespace
  devk etcd watch deploy --ignore metadata.managedFields,status
  devk etcd watch -n kube-system            # every resource in a namespace
  devk etcd watch pods --from-rev 1200      # replay history from revision 1200, then follow
  devk etcd watch -o json | jq .type        # one JSON object per event`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeResources,
		RunE: f.remoteE(g, &o.Query, &d, func(ctx context.Context) error { return etcdwatch.Watch(ctx, o) },
			func() agent.EtcdTask {
				return agent.EtcdTask{Verb: agent.EtcdWatch, Rev: o.FromRev, Exclude: o.Exclude}
			},
			func(ctx context.Context, s *remote.Session, node string, t agent.EtcdTask) error {
				return s.EtcdWatch(ctx, node, t, g.Stdout)
			}),
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.Namespace, "namespace", "n", "", "only changes in this namespace")
	fl.Int64Var(&o.FromRev, "from-rev", 0, "start from this revision (replays history), not from now")
	f.addRemote(fl)
	d.bindChanges(cmd, &o.Exclude)
	cli.ResultHelp(cmd, etcdwatch.Change{}, true)
	return cmd
}

func newEtcdDiffCmd(g *cli.Options, f *etcdFlags) *cobra.Command {
	var (
		o etcdwatch.DiffOptions
		d decodeFlags
	)
	cmd := &cobra.Command{
		Use:   "diff [RESOURCE[/NAMESPACE] | /PREFIX] [-- COMMAND [ARGS...]]",
		Short: "Show exactly what a command (or you) changed in etcd",
		Long: `Record etcd's revision, run the command after -- (or wait for Enter while
you act), record the revision again, and print every key changed in
between: ADDED, MODIFIED, DELETED (or ADDED+DELETED), each with a unified
diff of the decoded object. The command's own output goes to stderr, so
stdout holds only the diff.

The changes come from etcd's history between the two revisions, not from
reading the database twice: the cost follows what changed, not how big
the database is. etcd keeps history back to its last compaction (the API
server compacts every 5 minutes by default); an older --since-rev is
refused with the revisions that remain.

Leases are left out unless named (--exclude '' keeps them), and so is
metadata.managedFields (--ignore '' keeps it).`,
		Example: `  devk etcd diff -- kubectl create configmap x --from-literal=a=b
  devk etcd diff -- kubectl patch svc web -p '{"spec":{"type":"NodePort"}}'
  devk etcd diff svc -- kubectl apply -f service.yaml      # only services
  devk etcd diff -n default                                # act, then press Enter
  devk etcd diff --since-rev 1200                          # from a revision to now
  devk etcd diff -o json -- kubectl scale deploy web --replicas=3 | jq '.changes[].key'`,
		ValidArgsFunction: completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			target := args
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				target, o.Command = args[:dash], args[dash:]
				if len(o.Command) == 0 {
					return fmt.Errorf("nothing after --: give the command to run, or drop the -- and press Enter when done")
				}
			}
			if len(target) > 1 {
				return fmt.Errorf("diff takes one RESOURCE[/NAMESPACE] or /PREFIX before --, got %q: put the command after --", strings.Join(target, " "))
			}
			o.Stdin = cmd.InOrStdin()
			o.CommandOut = g.Stderr
			// Through the cluster the change is made here, and the
			// node's agent prints the diff.
			through := func(ctx context.Context, s *remote.Session, node string, t agent.EtcdTask) error {
				return s.EtcdDiff(ctx, node, t, o.RunChange, g.Stdout)
			}
			return f.remoteE(g, &o.Query, &d, func(ctx context.Context) error { return etcdwatch.Diff(ctx, o) },
				func() agent.EtcdTask {
					return agent.EtcdTask{Verb: agent.EtcdDiff, Rev: o.SinceRev, Exclude: o.Exclude}
				}, through)(cmd, target)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.Namespace, "namespace", "n", "", "only changes in this namespace")
	fl.Int64Var(&o.SinceRev, "since-rev", 0, "diff from this revision instead of from now (no command needed)")
	f.addRemote(fl)
	d.bindChanges(cmd, &o.Exclude)
	cli.ResultHelp(cmd, etcdwatch.DiffResult{}, false)
	return cmd
}
