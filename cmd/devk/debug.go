package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/devk/devk/build"
	"github.com/devk/devk/debug"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap"
)

func newDebugCmd(g *globalOptions) *cobra.Command {
	var (
		o      debug.Options
		node   nodeFlags
		onNode string
		flags  phase.Flags
	)
	cmd := &cobra.Command{
		Use:   "debug COMPONENT",
		Short: "Run a control-plane component under Delve, with breakpoints, and print how to attach",
		Long: `Rebuild a component (` + strings.Join(debug.Components(), ", ") + `) for a debugger and
run it under Delve. A static pod runs in its pod, swapped in the way ` + "`devk swap`" + `
does: journal, lock, rollback on failure, digests verified (` + "`devk digest verify`" + `
compares the pod with the debug image while it runs). The kubelet, which devk
supervises, runs as ` + "`dlv exec`" + ` of its debug build on its node (--node), swapped
as ` + "`devk swap kubelet`" + ` swaps it: restarted, the node Ready again, else the old
kubelet back; its pods keep running. An addon (kube-proxy's DaemonSet,
CoreDNS's Deployment) is changed through the API server as ` + "`devk swap`" + ` swaps
it: every pod of the workload runs under its own debugger at its node's
address (CoreDNS, off the host network, publishes the port on its node and
runs one replica while debugged); --break is set in each.

The build keeps symbols and DWARF and compiles without optimisation or
inlining (-N -l) only where you debug: the tree's packages changed since the
last normal build, the packages of each --break, and --debug-pkg's (` + build.DebugAll + `:
every package), into _output/devk/bin/<os>_<arch>` + build.DebugDirSuffix + `/ (the normal build stays).
Delve is built once from its module (` + build.DelveVersion + `) and added to the image as a
layer of its own.

The container runs ` + "`dlv exec --headless --accept-multiclient --continue`" + ` around the
component's own command and flags, listening on the node's address on
devk's bridge (port ` + strconv.Itoa(debug.DefaultPort) + ` for the API server, the next ports for the others).
So that a component paused at a breakpoint is not killed, its liveness and
startup probes are off (readiness stays: a paused component is not ready),
the API server's --request-timeout is ` + debug.DebugRequestTimeout.String() + ` (a request held at a breakpoint
answers when you continue, not with a 504) and, on a cluster of one control
plane, the controller-manager and scheduler run with --leader-elect=false. On several control planes the
one on --node is debugged; a paused controller there loses its lease.

--break FILE:LINE (tree-relative, repeatable) is checked against the tree
first (a line with no code names the nearest that have some) and set
through Delve's API before the component runs on. The binary reports module
paths (-trimpath): devk writes the substitute-path rules to the tree, the
module cache and GOROOT as a dlv init file (` + "`dlv connect ADDR --init FILE`" + `), a
VS Code launch.json attach configuration and a GoLand run configuration
under _output/devk/debug/.

--stop-at-start starts the component without --continue: it waits before
main until a client continues it (the swap checks only that the debug image
runs: health, the mirror pod and the kubelet's Ready come once it runs on).

--stop puts the container back as it was, image, command and probes byte
for byte (so does ` + "`devk swap COMPONENT`" + `, with the pushed image).

Safety: the swap's (a kill at any point is finished or undone by the next
devk swap or debug). Delve's API has no authentication: any process on
this machine that reaches devk's bridge can drive the component while it
is debugged; --stop ends that.`,
		Example: `  devk debug apiserver
  devk debug apiserver --break staging/src/k8s.io/apiserver/pkg/server/routes/version.go:56
  dlv connect 10.250.0.2:2345 --init _output/devk/debug/kube-apiserver.dlv
  devk debug scheduler --debug-pkg ./pkg/scheduler/...
  devk debug scheduler --stop-at-start   # waits before main: dlv connect 10.250.0.2:2347, then continue
  devk debug kubelet --node devk-worker --break pkg/kubelet/kubelet.go:1901   # SyncPod in v1.34.4
  devk debug kube-proxy --break pkg/proxy/iptables/proxier.go:736             # syncProxyRules, on every node
  devk debug --stop apiserver`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(debug.Components),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := debug.Lookup(args[0]); err != nil {
				return err
			}
			o.Component = args[0]
			o.Reporter = g.Reporter()
			r, err := node.swapNode(&o.Swap)
			if err != nil {
				return err
			}
			if o.Swap.NoNode != nil {
				return o.Swap.NoNode
			}
			if err := debugNode(r, onNode, &o); err != nil {
				return err
			}
			o.Swap.Command = node.command("debug")
			popts := flags.Options()
			popts.PlanOut, popts.Summary = g.stderr, g.Debug()
			res, err := debug.Run(cmd.Context(), o, popts)
			if flags.DryRun || res == nil {
				return err
			}
			if g.Structured() {
				if rerr := g.Result(res); err == nil {
					err = rerr
				}
				return err
			}
			printDebug(g, res)
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.Breaks, "break", nil, "set a breakpoint at `FILE:LINE`, FILE relative to the tree (repeatable)")
	f.StringArrayVar(&o.DebugPackages, "debug-pkg", nil, "also compile this go package `pattern` with -N -l (repeatable; "+build.DebugAll+": every package)")
	f.IntVar(&o.Port, "port", 0, "the debugger's port (default: "+strconv.Itoa(debug.DefaultPort)+" for the API server, the next ports for the controller-manager, scheduler and etcd)")
	f.StringVar(&o.Address, "address", "", "the node's address the debugger listens on (default: a devk node's address on devk's bridge; required for a node devk did not make)")
	f.BoolVar(&o.StopAtStart, "stop-at-start", false, "leave the component waiting before main for your client to continue it (dlv without --continue); the swap then checks only that it runs the debug image")
	f.BoolVar(&o.Stop, "stop", false, "put the component's own container back: image, command and probes as before devk debug")
	f.StringVar(&o.TreeDir, "tree", "", "the Kubernetes tree to build (default: the one around the working directory)")
	f.StringVar(&onNode, "node", "", "the node whose component to debug (default: node 0; a static pod's must be a control-plane node)")
	f.DurationVar(&o.Swap.Timeout, "timeout", swap.DefaultTimeout, "how long to wait for the component to be healthy under the debugger before rolling back")
	f.BoolVar(&o.Image.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	node.add(f)
	phase.Bind(cmd, debug.Phases(), &flags)
	resultHelp(cmd, debug.Result{}, false)
	return cmd
}

// debugNode points o at one control-plane node of a devk cluster (node
// 0, or --node) and its address, and says whether the cluster has
// several control planes.
func debugNode(r resolvedNode, onNode string, o *debug.Options) error {
	c := r.Cluster
	if c == nil || !c.Exists() || r.ManifestsDir != c.FirstNode().Files.Manifests() {
		if onNode != "" {
			return fmt.Errorf("--node names a node of a devk cluster: there is none here")
		}
		return nil // a kubeadm node: --address says where
	}
	cps := o.Swap.ControlPlanes
	o.HA = len(c.Config.ControlPlaneNames()) > 1
	if onNode == "" {
		onNode = c.Config.FirstNode().Name
	}
	n, _, err := c.Config.FindNode(onNode)
	if err != nil {
		return fmt.Errorf("--node: %w", err)
	}
	if o.Address == "" {
		o.Address = n.IP
	}
	if o.Component == debug.Kubelet {
		// Any node's; the kubelets of the others are left alone.
		o.Swap.Kubelets = slices.DeleteFunc(o.Swap.Kubelets, func(k swap.KubeletNode) bool { return k.Node != onNode })
		o.Node, err = c.Files.Node(c.Config, onNode)
		return err
	}
	for _, cp := range cps {
		if cp.Name == onNode {
			o.Swap.Node, o.Swap.NodeName, o.Swap.Relist = cp.Node, cp.Name, cp.Relist
		}
	}
	if len(cps) > 0 && o.Swap.NodeName != onNode {
		return fmt.Errorf("--node %s is not a control-plane node (%s are)", onNode, strings.Join(c.Config.ControlPlaneNames(), ", "))
	}
	o.Swap.ControlPlanes = nil // one node, not a rolling swap
	return nil
}

func printDebug(g *globalOptions, r *debug.Result) {
	w := g.stdout
	if r.Stopped {
		fmt.Fprintf(w, "%s: the normal container is back (%s)\n", r.Component, r.Image)
		return
	}
	if r.Address == "" {
		return
	}
	if r.WaitsAtStart {
		fmt.Fprintf(w, "%s waits under Delve before main (connect, then continue): %s%s\n", r.Component, r.Image, r.Binary)
	} else {
		fmt.Fprintf(w, "%s runs under Delve: %s%s\n", r.Component, r.Image, r.Binary)
	}
	for _, b := range r.Breakpoints {
		fmt.Fprintf(w, "  breakpoint %d at %s:%d (%s)\n", b.ID, b.File, b.Line, b.Function)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	fmt.Fprintf(w, "attach:   %s\n", r.Connect)
	fmt.Fprintf(w, "VS Code:  %s (\"%s\")\n", r.LaunchJSON, "devk debug "+r.Component)
	fmt.Fprintf(w, "GoLand:   %s\n", r.GoLand)
	fmt.Fprintf(w, "stop:     devk debug --stop %s\n", r.Component)
}
