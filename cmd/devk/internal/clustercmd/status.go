package clustercmd

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/status"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/remote"
)

// NewStatusCmd is `devk status`.
func NewStatusCmd(g *cli.Options) *cobra.Command {
	var o cluster.Options
	var access cli.Access
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a cluster's processes and components: running, healthy, image digest, restarts",
		Long: `Show the cluster made by ` + "`devk up`" + `: the supervised processes (containerd,
kubelet, registry), each control-plane component (its version as it
reports it, running or not, healthy or not, the image its manifest names and the image the runtime reports it
runs, restarts), whether the node is Ready, and the phase times of the last
` + "`devk up`" + ` or ` + "`devk down`" + `. For a cluster of more nodes, every node (role,
address, pod subnet, Ready, kubelet version, processes) and what each runs,
read through its own containerd: its static pods and the addons' pods
(kube-proxy, CoreDNS), each with the image its manifest or workload names
and the image it runs; a node whose containerd does not answer says so.
It changes nothing.

Another cluster, reached only through its kubeconfig (--kubeconfig, else
$KUBECONFIG's current context when there is no devk cluster named devk
here; --via-cluster forces it), is shown as its API says: every node
(role, address, pod subnet, Ready, kubelet version), its static pods from
their mirror pods and the addons' pods, each with the image its pod or
workload names and the image its kubelet reports it runs. What only a
devk cluster has (processes, HAProxy, phase times) is not shown.`,
		Example: `  devk status
  devk status --name dev2 -o json
  devk status --kubeconfig work.conf        # any cluster, through its API`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := access.Decide(cmd, g, o.Name, "")
			if err != nil {
				return err
			}
			if d.Mode == remote.ThroughCluster {
				return statusThrough(cmd, g, d)
			}
			o.Name = cmp.Or(d.Name, o.Name)
			st, err := status.Get(cmd.Context(), o)
			if err != nil {
				return err
			}
			if g.Structured() {
				return g.Result(st)
			}
			printStatus(g, st)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Name, "name", layout.DefaultName, "cluster name")
	access.AddAPI(cmd.Flags())
	cli.ResultHelp(cmd, status.Status{}, false)
	return cmd
}

// shortImage is digest.ShortImage, "-" for no image.
func shortImage(ref string) string {
	if ref == "" {
		return "-"
	}
	return digest.ShortImage(ref)
}

func printStatus(g *cli.Options, st *status.Status) {
	w := g.Stdout
	ready := "Ready"
	if !st.NodeReady {
		ready = "not Ready: " + st.NodeMessage
	}
	fmt.Fprintf(w, "cluster %s (%s) in %s\nnode %s at %s: %s\nnetwork namespace %s\n", st.Name, st.Version, st.Dir, st.Node, st.NodeIP, ready, st.NetNS)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tSTATE\tPID\tLOG")
	for _, p := range st.Processes {
		state, pid := "stopped", "-"
		if p.Running {
			state = "running"
			if p.PID > 0 {
				pid = fmt.Sprint(p.PID)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, state, pid, p.Log)
	}
	tw.Flush()
	if lb := st.LoadBalancer; lb != nil {
		var servers []string
		for _, s := range lb.Servers {
			server := fmt.Sprintf("%s %s (%d connections)", s.Node, s.Status, s.Sessions)
			if s.Message != "" {
				server += ": " + s.Message
			}
			servers = append(servers, server)
		}
		if lb.Message != "" {
			servers = append(servers, lb.Message)
		}
		fmt.Fprintf(w, "\nload balancer %s: %s\n", lb.Endpoint, strings.Join(servers, ", "))
	}
	if f := st.FakeNodes; f != nil {
		fmt.Fprintf(w, "\nfake nodes (kwok): %d of %d registered, %d Ready; %d pods on them, %d Running", f.Registered, f.Want, f.Ready, f.Pods, f.Running)
		if f.Message != "" {
			fmt.Fprintf(w, " (%s)", f.Message)
		}
		fmt.Fprintln(w)
	}
	if len(st.Nodes) > 1 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tROLE\tIP\tPODS\tSTATUS\tKUBELET\tPROCESSES")
		for _, n := range st.Nodes {
			state := "Ready"
			switch {
			case n.Joining:
				state = "joining (`devk node add` did not finish)"
			case n.Leaving:
				state = "leaving (`devk node remove` did not finish: run it again)"
			case !n.Ready:
				state = n.Message
			}
			procs := "containerd " + runningWord(n.Containerd) + ", kubelet " + runningWord(n.KubeletRunning)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Role, n.IP, orDash(n.PodCIDR), state, orDash(n.Kubelet), procs)
		}
		tw.Flush()
		// Every node's static pods and addons, node 0's among them.
		printNodeImages(w, st.Nodes)
	} else {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "COMPONENT\tVERSION\tSTATE\tHEALTHY\tRESTARTS\tMANIFEST\tRUNNING")
		for _, c := range st.Components {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", c.Name, componentVersion(c), c.State, yesNo(c.Healthy), c.Restarts, shortImage(c.Manifest), runningImage(c))
		}
		tw.Flush()
	}
	if len(st.LastRun) > 0 {
		fmt.Fprintln(w, "\nlast run:")
		status.WriteTimings(w, st.LastRun, "  ")
	}
}

// printNodeImages is the table of what every node runs: its static pods
// (a worker has none) and its addon pods, each with the image its
// manifest or workload names and the one its container runs; then, for a
// node whose runtime was not read, why.
func printNodeImages(w io.Writer, nodes []status.Node) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCOMPONENT\tVERSION\tPOD\tSTATE\tHEALTHY\tRESTARTS\tMANIFEST\tRUNNING")
	row := func(node, pod string, c status.Component) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", node, c.Name, componentVersion(c), pod, c.State, yesNo(c.Healthy), c.Restarts, shortImage(c.Manifest), runningImage(c))
	}
	for _, n := range nodes {
		for _, c := range n.Components {
			row(n.Name, "-", c)
		}
		for _, a := range n.Addons {
			row(n.Name, a.Pod, a.Component)
		}
	}
	tw.Flush()
	for _, n := range nodes {
		if n.RuntimeMessage != "" {
			fmt.Fprintf(w, "node %s: its runtime was not read: %s\n", n.Name, n.RuntimeMessage)
		}
	}
}

// runningImage is the image c's container runs, short, marked when its
// digest is not the one its manifest names. A manifest that names a tag
// (kubeadm's) is not compared: the runtime reports digests only.
func runningImage(c status.Component) string {
	running := shortImage(c.Running)
	if want := digest.Of(c.Manifest); want != "" && c.Running != "" && digest.Of(c.Running) != want {
		running += " (differs)"
	}
	return running
}

// yesNo is a table's word for b.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// runningWord is a table's word for whether a process runs.
func runningWord(running bool) string {
	if running {
		return "running"
	}
	return "stopped"
}

// statusThrough is status of a cluster reached only through its API.
func statusThrough(cmd *cobra.Command, g *cli.Options, d remote.Decision) error {
	conn, err := d.Target.RESTConfig()
	if err != nil {
		return err
	}
	cs, err := kube.ClientForConfig(conn)
	if err != nil {
		return err
	}
	st, err := status.Through(cmd.Context(), cs, d.Target.Context, d.Target.Server)
	if err != nil {
		return err
	}
	if g.Structured() {
		return g.Result(st)
	}
	w := g.Stdout
	fmt.Fprintf(w, "cluster %s (%s) at %s, through its API\n\n", st.Name, st.Version, st.Dir)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tIP\tPODS\tSTATUS\tKUBELET")
	for _, n := range st.Nodes {
		state := "Ready"
		if !n.Ready {
			state = n.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Role, orDash(n.IP), orDash(n.PodCIDR), state, orDash(n.Kubelet))
	}
	tw.Flush()
	printNodeImages(w, st.Nodes)
	return nil
}

// componentVersion is the VERSION column of a control-plane component:
// its version, and the one it emulates when not its own.
func componentVersion(c status.Component) string {
	if c.Emulates == "" {
		return orDash(c.Version)
	}
	return orDash(c.Version) + " (emulating " + c.Emulates + ")"
}
