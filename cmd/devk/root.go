package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cmd/devk/internal/agentcmd"
	"github.com/devk/devk/cmd/devk/internal/buildcmd"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/cmd/devk/internal/clustercmd"
	"github.com/devk/devk/cmd/devk/internal/e2ecmd"
	"github.com/devk/devk/cmd/devk/internal/etcdcmd"
	"github.com/devk/devk/cmd/devk/internal/registrycmd"
	"github.com/devk/devk/cmd/devk/internal/swapcmd"
	"github.com/devk/devk/cmd/devk/internal/tracecmd"
)

// newRootCmd is devk's command tree, to run with args (os.Args[1:]).
func newRootCmd(stdout, stderr io.Writer, args []string) *cobra.Command {
	g := cli.NewOptions(stdout, stderr, version)
	cobra.EnableCommandSorting = false // the help lists commands in the order of the loop
	root := &cobra.Command{
		Use:   "devk",
		Short: "Build, swap and inspect Kubernetes components, fast and verified",
		Long: `devk is a toolchain for hacking on Kubernetes itself: get a tree, build
one component in seconds, push its image without Docker, run a throwaway
cluster built from the tree, hot-swap the component into it, verify that
what runs is exactly what was built, and see what it wrote to etcd.

Results go to stdout (-o json or -o yaml for scripts: each command's help
names its result); progress goes to stderr (-q: results and errors only;
-v 1: what devk does; -v 2: the components' own output too).

Exit status:
  0    success
  1    failure (the error says what to do)
  2    a check found what it checks for: digest verify found a digest that
       differs, certs check-expiration --fail-within found a certificate
       expiring sooner
  125  node exec: devk itself failed (otherwise node exec exits with its
       command's status; 126: the command is not executable in the node,
       127: not found there)
  130  interrupted (Ctrl-C or SIGTERM); what was being changed is rolled
       back or left resumable, as the command's help says`,
		Example: `  devk source get v1.34.4 && cd kubernetes-v1.34.4
  devk up                              # a cluster built from the tree
  devk build apiserver --push          # after a change
  devk swap                            # run it, verified
  devk watch apiserver                 # or: every save, built and swapped`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.Bind(root, args)

	root.AddCommand(
		buildcmd.NewVersionCmd(g),
		buildcmd.NewSourceCmd(g),
		buildcmd.NewBuildCmd(g),
		buildcmd.NewPushCmd(g),
		registrycmd.NewRegistryCmd(g),
		swapcmd.NewDigestCmd(g),
		clustercmd.NewUpCmd(g),
		clustercmd.NewDownCmd(g),
		clustercmd.NewNodeCmd(g),
		clustercmd.NewStatusCmd(g),
		swapcmd.NewSwapCmd(g),
		swapcmd.NewUpgradeCmd(g),
		swapcmd.NewWatchCmd(g),
		e2ecmd.NewE2ECmd(g),
		etcdcmd.NewEtcdCmd(g),
		clustercmd.NewCertsCmd(g),
		clustercmd.NewExportCmd(g),
		swapcmd.NewStacksCmd(g),
		swapcmd.NewDebugCmd(g),
		swapcmd.NewRunCmd(g),
		tracecmd.NewTraceCmd(g),
		agentcmd.NewAgentCmd(g),
	)
	groupCommands(root)
	cli.RegisterClusterCompletion(root)
	refuseUnknownSubcommands(root)
	return root
}

// commandGroups are the root help's sections, in order; groupOf puts
// each command in one. A command in no group fails TestEveryCommandIsGrouped.
var commandGroups = []*cobra.Group{
	{ID: "build", Title: "Build and images:"},
	{ID: "cluster", Title: "Cluster:"},
	{ID: "swap", Title: "Swap and verify:"},
	{ID: "etcd", Title: "etcd:"},
	{ID: "loop", Title: "The inner loop:"},
	{ID: "debug", Title: "Look inside:"},
	{ID: "other", Title: "Other commands:"},
}

var groupOf = map[string]string{
	"source": "build", "build": "build", "push": "build", "registry": "build",
	"up": "cluster", "down": "cluster", "node": "cluster", "status": "cluster", "certs": "cluster", "export": "cluster",
	"swap": "swap", "digest": "swap", "upgrade": "swap",
	"etcd":  "etcd",
	"watch": "loop", "e2e": "loop",
	"stacks": "debug", "debug": "debug", "run": "debug", "trace": "debug",
	"version": "other", "completion": "other", "help": "other", "agent": "other",
}

func groupCommands(root *cobra.Command) {
	root.AddGroup(commandGroups...)
	root.SetHelpCommandGroupID(groupOf["help"])
	root.SetCompletionCommandGroupID(groupOf["completion"])
	for _, c := range root.Commands() {
		c.GroupID = groupOf[c.Name()]
	}
}

// refuseUnknownSubcommands makes every command group (devk registry, devk
// etcd, …) fail on a subcommand it does not have, instead of printing its
// help and exiting 0; alone, it still prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}
