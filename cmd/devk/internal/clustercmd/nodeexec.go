package clustercmd

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cluster/innode"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/validname"
)

// execUsage is how node exec is called, for its errors.
const execUsage = "devk node exec [NODE] -- CMD [ARGS...]"

func newNodeExecCmd(g *cli.Options) *cobra.Command {
	var o innode.ExecOptions
	cmd := &cobra.Command{
		Use:   "exec [NODE] -- CMD [ARGS...]",
		Short: "Run a command inside a node: its network and mount namespaces, its environment",
		Long: `Run CMD inside a node of a devk cluster, as ` + "`docker exec`" + ` runs one in a kind
node: in the node's network namespace (its address, routes and iptables) and
its mount namespace (its own /var/lib/kubelet/device-plugins, /var/lib/cni,
/var/log/containers, /run/containerd and /run/netns; the rest is this
machine's files), with the node's environment. NODE defaults to the node
` + "`devk up`" + ` made (<cluster>-control-plane).

CMD gets devk's environment with these set:
  PATH                        the node's bin directory (its kubelet), devk's
                              (kubectl), devk's own PATH, then the CNI plugins'
                              directory (last: its bridge would hide iproute2's)
  KUBECONFIG                  a control-plane node's admin.conf, a worker's
                              kubelet.conf (what kubeadm leaves on each)
  CONTAINER_RUNTIME_ENDPOINT  the node's CRI socket, for crictl
  CONTAINERD_ADDRESS          the node's containerd, for ctr, with
  CONTAINERD_NAMESPACE        k8s.io, the pods' (devk's containerd only)
  CNI_PATH                    the CNI plugins' directory
  DEVK_HOME, DEVK_CLUSTER,    where CMD runs (devk's systemctl in the node
  DEVK_NODE                   reads them)
It runs in devk's working directory (in / if the node has no such
directory), with devk's stdin, stdout and stderr: on a terminal, devk's
terminal (none is allocated).

In a node, systemctl is devk's (first on PATH, and bound over this
machine's /usr/bin/systemctl and /bin/systemctl): it serves one unit, the
node's kubelet, so ` + "`systemctl restart kubelet`" + ` (as kubeadm's docs say after
` + "`kubeadm certs renew`" + `), start, stop, status and is-active act on the kubelet
devk supervises for the node, never on this machine's systemd; any other
unit exits 5 (not found).

Once the node and CMD are found, devk becomes CMD (it execs it): CMD gets
the signals sent to devk, Ctrl-C included, and devk exits with CMD's exit
status. devk's own failures have statuses of their own, as env's and
docker's: 125 (no cluster, no such node or namespace, not root, bad
arguments), 126 (CMD is not executable) and 127 (CMD not found in the
node).

Safety: it changes nothing by itself and takes no lock: it reads
cluster.json and enters the node. CMD may change anything: it runs as root
in the node. Needs root.`,
		Example: `  devk node exec -- ip -br addr                    # node 0's address
  devk node exec devk-worker -- iptables-save -t nat
  devk node exec -- ctr images ls                  # the node's containerd
  devk node exec -- kubectl get nodes              # admin.conf on a control-plane node
  devk node exec -- systemctl restart kubelet      # the node's kubelet, never this machine's
  devk node exec --name dev2 -- bash               # a shell in the node, on your terminal`,
		Args: func(cmd *cobra.Command, args []string) error {
			node, command, err := execArgs(args, cmd.ArgsLenAtDash())
			o.Node, o.Command = node, command
			return execFailed(err)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.Structured() {
				return execFailed(fmt.Errorf("-o %s: node exec's output is CMD's own: leave -o out", g.Output))
			}
			o.Dir, _ = os.Getwd() // none: / in the node
			e, err := innode.NodeExec(cmd.Context(), o)
			switch {
			case errors.Is(err, innode.ErrCommandNotFound):
				return &execError{err: err, code: cli.ExitCommandNotFound}
			case errors.Is(err, innode.ErrCommandNotExecutable):
				return &execError{err: err, code: cli.ExitCannotExecute}
			case err != nil:
				return execFailed(err)
			}
			g.Reporter().Debugf("in node %s: %s", e.Node, execx.Cmd{Name: e.Argv[0], Args: e.Argv[1:]})
			err = syscall.Exec(e.Path, e.Argv, e.Env) // returns only on failure
			return execFailed(fmt.Errorf("run %s in node %s: exec %s: %w", e.Command[0], e.Node, e.Path, err))
		},
	}
	cmd.ValidArgsFunction = completeNodeNames
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return execFailed(err) })
	cmd.Flags().StringVar(&o.Name, "name", layout.DefaultName, "the cluster")
	return cmd
}

// execArgs splits node exec's arguments at -- (dash, as cobra's
// ArgsLenAtDash: -1 for none) into the node ("" for node 0) and the
// command.
func execArgs(args []string, dash int) (node string, command []string, err error) {
	switch {
	case dash < 0 && len(args) == 0:
		return "", nil, errors.New("give the command to run after --: " + execUsage)
	case dash < 0:
		return "", nil, fmt.Errorf("put the command after --: devk node exec -- %s", strings.Join(args, " "))
	case dash > 1:
		return "", nil, fmt.Errorf("one node before --, not %d (%s): %s", dash, strings.Join(args[:dash], " "), execUsage)
	case dash == len(args):
		return "", nil, errors.New("no command after --: " + execUsage)
	}
	if dash == 1 {
		if err := validname.Node(args[0]); err != nil {
			return "", nil, err
		}
		node = args[0]
	}
	return node, args[dash:], nil
}

// execError is a failure of node exec before it runs the command, with
// its exit status (cli.ExitExecFailed, or the shell's 126 and 127 for a
// command the node cannot run), apart from any status of the command's.
type execError struct {
	err  error
	code int
}

func (e *execError) Error() string { return e.err.Error() }
func (e *execError) Unwrap() error { return e.err }
func (e *execError) ExitCode() int { return e.code }

// execFailed is err as devk's own failure in node exec (nil for nil).
func execFailed(err error) error {
	if err == nil {
		return nil
	}
	return &execError{err: err, code: cli.ExitExecFailed}
}

// completeNodeNames offers the nodes of the cluster --name names, for a
// command's first argument.
func completeNodeNames(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	name, _ := cmd.Flags().GetString("name")
	home, err := layout.HomeDir("")
	if len(args) > 0 || err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cfg, err := layout.ReadConfig(layout.HomeFiles(home).Cluster(name).ConfigFile())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return cfg.NodeNames(), cobra.ShellCompDirectiveNoFileComp
}
