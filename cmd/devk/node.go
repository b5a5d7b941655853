package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/devk/devk/cluster"
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
}

// kubeadmNode is the layout the flags' help names.
var kubeadmNode = layout.Kubeadm("")

func (n *nodeFlags) add(f *pflag.FlagSet) {
	f.StringVar(&n.Name, "name", layout.DefaultName, "the devk cluster")
	f.StringVar(&n.ManifestsDir, "manifests-dir", "", "the kubelet's static pod dir, for a node devk did not make (kubeadm: "+kubeadmNode.ManifestsDir+")")
	f.StringVar(&n.Kubeconfig, "kubeconfig", "", "kubeconfig for the node's API server (kubeadm: "+kubeadmNode.Kubeconfig+")")
	f.StringVar(&n.CRISocket, "cri-socket", "", "the node's CRI socket (kubeadm: "+kubeadmNode.CRISocket+")")
	f.StringVar(&n.KubeletRootDir, "kubelet-root-dir", "", "the kubelet's --root-dir, for a node devk did not make (default "+kubeadmNode.KubeletRootDir+")")
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
	r.Node, r.NodeName = paths.Node(cfg), cfg.NodeName
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

// addSwap adds the flags of commands that swap (swap, watch).
func (n *nodeFlags) addSwap(f *pflag.FlagSet) {
	n.add(f)
	f.BoolVar(&n.NoKubeletRestart, "no-kubelet-restart", false, "wait for a lagging mirror pod instead of restarting devk's kubelet so that it lists pods again")
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
	o.Kubelet = n.kubelet(r)
	return r, nil
}

// kubelet is the kubelet a swap may replace and restart: only that of a
// devk cluster whose manifests dir the swap uses.
func (n *nodeFlags) kubelet(r resolvedNode) *swap.KubeletNode {
	c := r.Cluster
	if c == nil || !c.Exists() || r.ManifestsDir != c.Manifests() {
		return nil
	}
	k := &swap.KubeletNode{Binary: c.KubeletBinary(), Restart: restartKubelet(c)}
	if !n.NoKubeletRestart {
		k.Relist = c.RelistKubelet
	}
	return k
}

// restartKubelet restarts a devk cluster's supervised kubelet.
func restartKubelet(c *cluster.Cluster) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.RestartKubelet(ctx)
		return err
	}
}

// isNoCluster says err is resolve's: no devk cluster, no node flags.
func isNoCluster(err error) bool { return errors.Is(err, layout.ErrNoCluster) }
