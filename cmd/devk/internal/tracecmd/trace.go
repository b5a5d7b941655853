// Package tracecmd is `devk trace`: what one command made the cluster do,
// as one timeline.
package tracecmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/trace"
)

// NewTraceCmd is `devk trace`.
func NewTraceCmd(g *cli.Options) *cobra.Command {
	var (
		o       trace.Options
		filters []string
		flags   phase.Flags
	)
	cmd := &cobra.Command{
		Use:   "trace [flags] -- CMD [ARGS...] | trace --follow",
		Short: "Run a command and show everything it made the cluster do: API requests, etcd writes, each node's iptables and containers",
		Long: `Run CMD, then follow what happened until the cluster is quiet (no new write
request, etcd revision, rule or container change for --settle, and every pod
written in the window ready, ended or stuck, every object being deleted gone;
at most --for after the command's exit), and print one timeline, oldest first:

- requests: each API request of the window from the API server's audit log
  (time, client: kubectl, kube-controller-manager/endpointslice-controller,
  kubelet, kube-scheduler…, verb, group/version/resource[/subresource],
  namespace/name, response code, latency; a write's body, Secrets redacted as
  ` + "`devk etcd`" + ` redacts them). The command's own are marked [command] (received
  while it ran, from this machine rather than a node, by a user that is no
  component of the cluster). Reads and watches are counted, and listed with
  --reads.
- etcd: each key written or deleted (leases and the API servers' masterleases
  left out), with its revision and the decoded diff (` + "`devk etcd watch`" + `'s),
  beneath the request that made it: joined by object and the resourceVersion
  of the request's response, else by object and time (a binding, a delete, a
  request logged without its body).
- nodes: on every node, the lines added to and removed from iptables-save of
  its network namespace (filter, nat, mangle), grouped by table and chain, and
  the pod sandboxes and containers started, stopped or removed (its CRI).
- events: the Events created or updated in the window.

With --follow there is no command: the same stream is printed live until
Ctrl-C, each etcd write with the client that made it.

The API server of a devk cluster writes the audit log this reads (devk's
policy: writes with their bodies, reads as metadata, nothing for leases and
health checks, no body for Secrets, ConfigMaps and tokens; the config file's
audit key turns it off or gives your own policy, docs/config.md). A cluster
made before that gets it from the next ` + "`devk up`" + ` (only the API server restarts).

The command's output goes to stderr, the trace to stdout; devk exits with the
command's exit code, and the trace is printed even when the command fails.

Safety: it changes nothing. It reads the audit logs from the host, etcd
through a watch, each node's rules with iptables-save inside the node's
network namespace (never iptables or iptables-restore) and its runtime's
lists, and the Events through the API.`,
		Example: `  devk trace -- kubectl create -f svc.yaml
  devk trace -o json -- kubectl create deployment web --image=registry.k8s.io/pause:3.10 --replicas=2
  devk trace --filter resource=endpointslices --no-nodes -- kubectl expose deployment web --port 80
  devk trace --settle 5s --for 1m -- kubectl delete svc web
  devk trace --follow --filter namespace=default`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 0 || (dash < 0 && len(args) > 0) {
				return fmt.Errorf("put the command to trace after --: devk trace -- %v", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Command = args
			f, err := trace.ParseFilter(filters)
			if err != nil {
				return err
			}
			o.Filter = f
			o.Stdin, o.CommandOut = cmd.InOrStdin(), g.Stderr
			o.Live, o.Format = g.Stdout, g.Format()
			if err := o.Validate(); err != nil {
				return err
			}
			o.Reporter = g.Reporter()
			popts := g.PhaseOptions(&flags)
			popts.Reporter = o.Reporter
			res, err := trace.Run(cmd.Context(), o, popts)
			if res == nil || o.Follow {
				return err
			}
			if perr := printTrace(g, res); err == nil {
				err = perr
			}
			if err == nil && res.ExitCode != 0 {
				err = &commandExitError{code: res.ExitCode, command: res.Command[0]}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Name, "name", layout.DefaultName, "the devk cluster")
	fl.BoolVar(&o.Follow, "follow", false, "print what happens live, without a command, until Ctrl-C")
	fl.DurationVar(&o.Settle, "settle", trace.DefaultSettle, "how long the cluster must be quiet after the command for the trace to end")
	fl.DurationVar(&o.For, "for", trace.DefaultFor, "the longest wait after the command's exit")
	fl.BoolVar(&o.Reads, "reads", false, "list the read requests (get, list, watch) too, not only count them")
	fl.StringArrayVar(&filters, "filter", nil, "keep what matches KEY=VALUE, KEY resource (services, endpointslices.discovery.k8s.io), namespace or user-agent (a substring); repeat a key for any of its values")
	fl.BoolVar(&o.NoNodes, "no-nodes", false, "leave out the nodes' iptables rules and containers")
	fl.BoolVar(&o.NoEtcd, "no-etcd", false, "leave out etcd's writes")
	phase.Bind(cmd, trace.Phases(), &flags)
	cli.ResultHelp(cmd, trace.Result{}, false)
	return cmd
}

func printTrace(g *cli.Options, res *trace.Result) error {
	if g.Structured() {
		return g.Result(res)
	}
	return trace.WriteText(g.Stdout, res)
}

// commandExitError makes devk exit with the traced command's code.
type commandExitError struct {
	code    int
	command string
}

func (e *commandExitError) Error() string {
	return fmt.Sprintf("%s exited %d; the trace above is what it made the cluster do", e.command, e.code)
}

func (e *commandExitError) ExitCode() int { return e.code }
