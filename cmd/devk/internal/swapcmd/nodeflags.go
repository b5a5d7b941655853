package swapcmd

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/pflag"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/swap"
)

// nodeFlags name the node a command acts on: a devk cluster by --name, or
// a kubeadm-layout node by its manifests dir, kubeconfig and CRI socket.
type nodeFlags struct {
	Name         string
	ManifestsDir string
	Kubeconfig   string
	CRISocket    string
	// KubeletRootDir is the kubelet's --root-dir.
	KubeletRootDir string
	// NodeName is the kubelet's node name.
	NodeName string
	// NoKubeletRestart keeps a swap from restarting devk's kubelet when
	// the mirror pod lags (swap and watch only).
	NoKubeletRestart bool
	// Nodes limit a swap to the devk cluster's nodes named (--node);
	// empty: every node.
	Nodes []string
}

func (n *nodeFlags) add(f *pflag.FlagSet) {
	f.StringVar(&n.Name, "name", layout.DefaultName, "the devk cluster")
	f.StringVar(&n.ManifestsDir, "manifests-dir", "", "the kubelet's static pod dir, for a node devk did not make (kubeadm: "+cli.KubeadmNode.ManifestsDir+")")
	f.StringVar(&n.Kubeconfig, "kubeconfig", "", "kubeconfig for the node's API server (kubeadm: "+cli.KubeadmNode.Kubeconfig+")")
	f.StringVar(&n.CRISocket, "cri-socket", "", "the node's CRI socket (kubeadm: "+cli.KubeadmNode.CRISocket+")")
	f.StringVar(&n.KubeletRootDir, "kubelet-root-dir", "", "the kubelet's --root-dir, for a node devk did not make (default "+cli.KubeadmNode.KubeletRootDir+")")
	f.StringVar(&n.NodeName, "node-name", "", "the kubelet's node name, for a node devk did not make (default: read from the node's runtime, where the kubelet names a static pod <pod>-<node>; else the host name, as kubeadm)")
}

// command is devk's subcommand (e.g. "swap") with the node flags the
// user gave, as a shell line: what to tell the user to run on the same
// node.
func (n *nodeFlags) command(sub string) string {
	args := []string{sub}
	add := func(flag, v string) {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	if n.Name != layout.DefaultName {
		add("--name", n.Name)
	}
	add("--manifests-dir", n.ManifestsDir)
	add("--kubeconfig", n.Kubeconfig)
	add("--cri-socket", n.CRISocket)
	add("--kubelet-root-dir", n.KubeletRootDir)
	add("--node-name", n.NodeName)
	return execx.Cmd{Name: "devk", Args: args}.String()
}

// resolvedNode is the node the flags name.
type resolvedNode struct {
	layout.Node
	// NodeName is the kubelet's node name: cluster.json's for a devk
	// cluster, --node-name for another node (empty: found later from the
	// node's runtime).
	NodeName string
	// Home is devk's resolved home.
	Home string
	// Cluster is the devk cluster, when the node is one's.
	Cluster *cluster.Cluster
}

// resolve finds the node: the devk cluster --name, unless the user named
// a node with flags. When there is no such cluster the error is the
// layout's *layout.NoClusterError (errors.Is layout.ErrNoCluster) with
// what to pass for a kubeadm node; the home is resolved all the same.
func (n *nodeFlags) resolve() (resolvedNode, error) {
	var r resolvedNode
	if err := layout.ValidateName(n.Name); err != nil {
		return r, err
	}
	home, err := layout.HomeDir("")
	if err != nil {
		return r, err
	}
	r.Home = home
	if n.ManifestsDir != "" || n.Kubeconfig != "" || n.CRISocket != "" {
		if n.ManifestsDir == "" || n.Kubeconfig == "" || n.CRISocket == "" {
			return r, fmt.Errorf("for a node that devk did not make, pass all of --manifests-dir, --kubeconfig and --cri-socket")
		}
		r.Node = layout.Kubeadm("")
		r.ManifestsDir, r.Kubeconfig, r.CRISocket = n.ManifestsDir, n.Kubeconfig, n.CRISocket
		if n.KubeletRootDir != "" {
			r.KubeletRootDir = n.KubeletRootDir
		}
		r.NodeName = n.NodeName
		return r, nil
	}
	cfg, paths, err := layout.Open(home, n.Name)
	if err != nil {
		return r, fmt.Errorf("%w; for a kubeadm node pass --manifests-dir, --kubeconfig and --cri-socket", err)
	}
	n0 := cfg.FirstNode()
	r.Node, r.NodeName = paths.FirstNode().ControlPlane(cfg, n0), n0.Name
	if n.KubeletRootDir != "" {
		r.KubeletRootDir = n.KubeletRootDir
	}
	if n.NodeName != "" {
		r.NodeName = n.NodeName
	}
	if r.Cluster, err = cluster.Open(cluster.Options{Name: n.Name, Home: home}); err != nil {
		return r, err
	}
	return r, nil
}

// otherRuntimes are the CRI sockets of the devk cluster's other nodes
// (none for a kubeadm node).
func (r resolvedNode) otherRuntimes() map[string]string {
	if r.Cluster == nil || !r.Cluster.Exists() || r.ManifestsDir != r.Cluster.FirstNode().Files.Manifests() {
		return nil
	}
	return r.Cluster.OtherRuntimes()
}

// otherControlPlaneSources are the static-pod views (digest.OnNode) of
// the devk cluster's control-plane nodes besides node 0.
func (r resolvedNode) otherControlPlaneSources(ctx context.Context) ([]digest.Source, func(), error) {
	var out []digest.Source
	var closers []func()
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	if r.Cluster == nil || !r.Cluster.Exists() || r.ManifestsDir != r.Cluster.FirstNode().Files.Manifests() {
		return nil, closeAll, nil
	}
	cps, err := r.Cluster.ControlPlaneNodes()
	if err != nil {
		return nil, closeAll, err
	}
	for _, cp := range cps[1:] {
		ss, c, err := digest.StaticPodSources(ctx, cp.Node, cp.Name)
		if err != nil {
			closeAll()
			return nil, func() {}, err
		}
		out, closers = append(out, ss...), append(closers, c)
	}
	return out, closeAll, nil
}

// addSwap adds the flags of commands that swap (swap, watch).
func (n *nodeFlags) addSwap(f *pflag.FlagSet) {
	n.add(f)
	f.BoolVar(&n.NoKubeletRestart, "no-kubelet-restart", false, "wait for a lagging mirror pod instead of restarting devk's kubelet so that it lists pods again")
	f.StringSliceVar(&n.Nodes, "node", nil, "swap only on these nodes of the devk cluster (repeatable; default: every node; the static pods run on the control-plane node)")
}

// swapNode fills the node of a swap: a missing cluster is not an error
// yet (swapping kubectl needs none), but the swap's once it needs one.
func (n *nodeFlags) swapNode(o *swap.Options) (resolvedNode, error) {
	r, err := n.resolve()
	if err != nil && !isNoCluster(err) {
		return r, err
	}
	o.Node, o.NodeName, o.NoNode = r.Node, r.NodeName, err
	o.Command = n.command("swap")
	if o.Kubelets, o.KeptKubelets, err = n.kubelets(r); err != nil {
		return r, err
	}
	o.OtherRuntimes = r.otherRuntimes()
	if c := r.Cluster; c != nil && c.Exists() && r.ManifestsDir == c.FirstNode().Files.Manifests() {
		sc, err := swapCluster(c, n.NoKubeletRestart)
		if err != nil {
			return r, err
		}
		o.OnCluster(sc, n.Nodes)
	}
	return r, nil
}

// swapCluster is the devk cluster c as a swap sees it; noRelist: the
// swap never restarts a kubelet for a lagging mirror pod.
func swapCluster(c *cluster.Cluster, noRelist bool) (swap.Cluster, error) {
	all, err := c.ControlPlaneNodes()
	if err != nil {
		return swap.Cluster{}, err
	}
	sc := swap.Cluster{Dir: c.Files.Dir, NodeManifests: c.NodeManifests(), NodeName: c.Config.FirstNode().Name,
		ControlPlaneNames: c.Config.ControlPlaneNames(), ControlPlanes: all, StopGrace: c.StaticPodStopGrace()}
	if !noRelist {
		sc.Relist = c.RelistNodeKubelet
	}
	return sc, nil
}

// kubelets are the kubelets a swap may replace and restart: those of a
// devk cluster whose manifests dir the swap uses, on every node or on
// those --node names; and those it keeps: without --node, a worker that
// runs a tree of its own keeps that tree's kubelet.
func (n *nodeFlags) kubelets(r resolvedNode) ([]swap.KubeletNode, []swap.KeptKubelet, error) {
	c := r.Cluster
	if c == nil || !c.Exists() || r.ManifestsDir != c.FirstNode().Files.Manifests() {
		if len(n.Nodes) > 0 {
			return nil, nil, fmt.Errorf("--node names nodes of a devk cluster: there is none here (for a kubeadm node, --node-name is the kubelet's node name)")
		}
		return nil, nil, nil
	}
	all, err := c.Kubelets()
	if err != nil {
		return nil, nil, err
	}
	var out []swap.KubeletNode
	var kept []swap.KeptKubelet
	for _, k := range all {
		switch {
		case len(n.Nodes) > 0 && !slices.Contains(n.Nodes, k.Node):
			continue
		case len(n.Nodes) == 0 && k.Tree != "":
			kept = append(kept, swap.KeptKubelet{Node: k.Node, Why: fmt.Sprintf("it runs the tree of its own %s (the config file's tree:); --node %s swaps it as well", k.Tree, k.Node)})
			continue
		}
		out = append(out, swap.KubeletNode{Node: k.Node, Binary: k.Binary, Restart: restartKubelet(c, k.Node)})
	}
	for _, name := range n.Nodes {
		if _, _, err := c.Config.FindNode(name); err != nil {
			return nil, nil, fmt.Errorf("--node: %w", err)
		}
	}
	return out, kept, nil
}

// restartKubelet restarts the supervised kubelet of a devk cluster's
// node.
func restartKubelet(c *cluster.Cluster, node string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.RestartKubelet(ctx, node)
		return err
	}
}

// isNoCluster says err is resolve's: no devk cluster, no node flags.
func isNoCluster(err error) bool { return errors.Is(err, layout.ErrNoCluster) }
