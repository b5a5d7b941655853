package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	devkrun "github.com/devk/devk/run"
	"github.com/devk/devk/swap"
)

func newRunCmd(g *globalOptions) *cobra.Command {
	var (
		o        devkrun.Options
		name     string
		nodeName string
		flags    phase.Flags
	)
	cmd := &cobra.Command{
		Use:   "run COMPONENT",
		Short: "Run a control-plane component from the tree in the foreground, in place of its static pod",
		Long: `Take apiserver, controller-manager or scheduler out of its static pod and run
the tree's binary in its place, in the foreground: inside the node's network
and mount namespaces, with exactly the command line, environment and files
of its manifest (its hostPath volumes are the node's files, where they are).
Its output goes to the terminal; Ctrl-C stops it (SIGINT, then SIGKILL after
the pod's termination grace period) and puts the static pod back.

The binary is the one ` + "`devk build COMPONENT`" + ` last made for the tree; with
--go-run devk first compiles the tree's cmd/<binary> with a plain go build,
as go run does. Before it starts devk prints the command line and the
environment, and writes a VS Code launch configuration that runs the same
(program: the tree's cmd/<binary>) to _output/devk/run/` + devkrun.LaunchFile + ` in the tree.
An IDE runs it on this machine, not in the node: the node's API server and
etcd are at the node's address, which this machine reaches on devk's
bridge, so the configuration keeps every flag but --bind-address, which it
sets to this machine's address on the bridge (the node's is not this
machine's). It reads the cluster's certificates and keys, so the IDE must
run as the user devk runs as; and it is for when the static pod is out
(while ` + "`devk run`" + ` waits, or with the component stopped another way).

--debug runs it under Delve instead: devk first makes the component's debug
build as ` + "`devk build --debug`" + ` does (symbols kept, -N -l for the tree's
packages changed since its last normal build) and Delve, then runs
` + "`dlv exec --headless --continue`" + ` around the same command line, listening on the
node's address on devk's bridge (the port ` + "`devk debug`" + ` gives the component),
with the flags a paused component needs (the API server's request timeout,
leader election off on one control plane), and writes how to attach as
` + "`devk debug`" + ` does (a dlv init file with the substitute-path rules, a VS Code
attach configuration and a GoLand one under _output/devk/debug/). Set
breakpoints from your client; --stop-at-start leaves the component waiting
before main until your client continues it. Delve runs as the first
process of a PID namespace of its own, so that the component it starts dies
with it and with devk. Ctrl-C sends the debugger SIGTERM (it ends and kills
the component), then puts the pod back.

Safety: devk takes the pod out as ` + "`devk swap`" + ` hands a pod over (the manifest
kept as a pending backup, a journal written, the manifest moved out, the
container stopped through CRI, the kubelet let go of the pod) and holds the
node's lock for the whole run, so no swap, up or other run changes the node
meanwhile. When the process ends, by itself or by Ctrl-C, devk puts the
manifest back, waits until the pod runs its image healthy and checks it as
a swap does (manifest, CRI imageRef, mirror pod, health: what
` + "`devk digest verify`" + ` checks), then drops the journal; a second Ctrl-C stops
that wait and leaves the journal. If devk is killed (kill -9), the
process is killed with it, and the next ` + "`devk run`" + `, ` + "`devk swap`" + `,
` + "`devk watch`" + ` or ` + "`devk up`" + ` finds the journal and puts the pod back first. A
process that ends with an error makes devk exit non-zero once the pod is
back. It needs root (the node's namespaces).`,
		Example: `  devk build scheduler && devk run scheduler
  devk run scheduler --go-run                 # compile cmd/kube-scheduler first, as go run does
  devk run scheduler --debug --stop-at-start  # under Delve, waiting for: dlv connect 10.250.0.2:2347
  devk run controller-manager --tree ~/src/kubernetes
  devk run apiserver --node devk-control-plane2
  devk run scheduler --dry-run                # the phases, what each reads and writes
  devk run scheduler -o json                  # the result on stdout, the process's output on stderr`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(devkrun.Names),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Component = args[0]
			if _, err := devkrun.Lookup(o.Component); err != nil {
				return err
			}
			o.Reporter = g.Reporter()
			o.Stdout, o.Stderr, o.Info = g.stdout, g.stderr, g.stdout
			if g.Structured() {
				o.Stdout, o.Info = g.stderr, g.stderr
			}
			c, err := runNode(&o, name, nodeName)
			if err != nil {
				return err
			}
			defer g.followLogs(cmd.Context(), c.Config.Name)()
			popts := g.phaseOptions(&flags)
			popts.Reporter = o.Reporter
			r, err := devkrun.Run(cmd.Context(), o, popts)
			if r != nil && !flags.DryRun {
				if perr := printRun(g, r); err == nil {
					err = perr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", layout.DefaultName, "the devk cluster")
	f.StringVar(&nodeName, "node", "", "the control-plane node whose static pod to run in place of (default: the node devk up made)")
	f.BoolVar(&o.GoRun, "go-run", false, "compile the tree's cmd/<binary> with a plain go build, as go run does, instead of running what devk build made")
	f.BoolVar(&o.Debug, "debug", false, "run the component's debug build under Delve (built first, with Delve), listening on the node's address")
	f.BoolVar(&o.StopAtStart, "stop-at-start", false, "with --debug: wait before main until a debugger client continues it")
	f.IntVar(&o.DebugPort, "port", 0, "with --debug: the debugger's port (default: the one devk debug gives the component)")
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree whose binary to run (default: the one around the working directory)")
	f.DurationVar(&o.Timeout, "timeout", swap.DefaultTimeout, "how long to wait for the static pod to run healthy again once it is put back")
	phase.Bind(cmd, devkrun.Phases(), &flags)
	resultHelp(cmd, devkrun.Result{}, false)
	return cmd
}

// runNode fills the node of a run: a control-plane node of the devk
// cluster name (node 0 unless nodeName), entered by its namespaces.
func runNode(o *devkrun.Options, name, nodeName string) (*cluster.Cluster, error) {
	c, err := cluster.Open(cluster.Options{Name: name})
	if err != nil {
		return nil, err
	}
	if !c.Exists() {
		return nil, c.NoCluster()
	}
	n, err := c.NodeNamed(nodeName)
	if err != nil {
		return nil, fmt.Errorf("--node: %w", err)
	}
	if !n.Net.IsControlPlane() {
		return nil, fmt.Errorf("--node %s is a worker: the static pods run on the control-plane nodes (%s)", nodeName, strings.Join(c.Config.ControlPlaneNames(), ", "))
	}
	o.Node, o.NodeName = n.Files.ControlPlane(c.Config, n.Net), n.Name()
	o.Enter, o.HostIP = n.Enter, c.Config.Network.HostIP
	o.DebugAddress, o.HA = n.Net.IP, len(c.Config.ControlPlaneNames()) > 1
	o.Relist = func(ctx context.Context) error { return c.RelistNodeKubelet(ctx, n.Name()) }
	o.Command = "devk swap" + c.NameFlag()
	return c, nil
}

// printRun says how the process ended and that the pod is back.
func printRun(g *globalOptions, r *devkrun.Result) error {
	if g.Structured() {
		return g.Result(r)
	}
	w := g.stdout
	for _, res := range r.Resumed {
		printSwapped(w, res.Pod, staticPodStatus(res), res.NewImage, res.OldImage, "ready", res.Ready, res.Took)
	}
	if r.Exit != nil {
		fmt.Fprintf(w, "%s (%s) on node %s: %s after %s\n", r.Component, r.Binary, r.Node, r.Exit, progress.Round(r.Ran))
	}
	if p := r.PutBack; p != nil {
		status := "back on"
		if p.Unchanged {
			status = "left as it is (its manifest was rewritten meanwhile):"
		}
		printSwapped(w, p.Pod, status, p.NewImage, "", "ready", p.Ready, p.Took)
		printChecks(w, p.Checks)
	}
	return nil
}
