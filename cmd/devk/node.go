package main

import (
	"context"
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
	// NoKubeletRestart keeps a swap from restarting devk's kubelet when
	// the mirror pod lags (swap and watch only).
	NoKubeletRestart bool
}

func (n *nodeFlags) add(f *pflag.FlagSet) {
	f.StringVar(&n.Name, "name", layout.DefaultName, "the devk cluster")
	f.StringVar(&n.ManifestsDir, "manifests-dir", "", "the kubelet's static pod dir, for a node devk did not make (kubeadm: /etc/kubernetes/manifests)")
	f.StringVar(&n.Kubeconfig, "kubeconfig", "", "kubeconfig for the node's API server (kubeadm: /etc/kubernetes/admin.conf)")
	f.StringVar(&n.CRISocket, "cri-socket", "", "the node's CRI socket (kubeadm: /run/containerd/containerd.sock)")
	f.StringVar(&n.KubeletRootDir, "kubelet-root-dir", "", "the kubelet's --root-dir, for a node devk did not make (default /var/lib/kubelet)")
}

// command is devk's subcommand (e.g. "swap") with the node flags the
// user gave, as a shell line: what to tell the user to run on the same
// node. Call it before resolve, which fills in the flags not given.
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
	return execx.Cmd{Name: "devk", Args: args}.String()
}

// resolve fills the paths from the devk cluster unless the user named a
// node with flags. It returns the cluster (which may not exist yet).
func (n *nodeFlags) resolve() (*cluster.Cluster, error) {
	c, err := cluster.Open(cluster.Options{Name: n.Name})
	if err != nil {
		return nil, err
	}
	if n.ManifestsDir != "" || n.Kubeconfig != "" || n.CRISocket != "" {
		if n.ManifestsDir == "" || n.Kubeconfig == "" || n.CRISocket == "" {
			return nil, fmt.Errorf("for a node that devk did not make, pass all of --manifests-dir, --kubeconfig and --cri-socket")
		}
		if n.KubeletRootDir == "" {
			n.KubeletRootDir = "/var/lib/kubelet"
		}
		return c, nil
	}
	if c.Exists() {
		n.ManifestsDir = c.Manifests()
		n.Kubeconfig = c.Kubeconfig("admin")
		n.CRISocket = c.Config.CRISocket
		if n.KubeletRootDir == "" {
			n.KubeletRootDir = c.KubeletRoot()
		}
	}
	return c, nil
}

// addSwap adds the flags of commands that swap (swap, watch).
func (n *nodeFlags) addSwap(f *pflag.FlagSet) {
	n.add(f)
	f.BoolVar(&n.NoKubeletRestart, "no-kubelet-restart", false, "wait for a lagging mirror pod instead of restarting devk's kubelet so that it lists pods again")
}

// kubelet is the kubelet a swap may replace and restart: only that of a
// devk cluster whose manifests dir the swap uses.
func (n *nodeFlags) kubelet(c *cluster.Cluster) *swap.KubeletNode {
	if c == nil || !c.Exists() || n.ManifestsDir != c.Manifests() {
		return nil
	}
	k := &swap.KubeletNode{Binary: c.KubeletBinary(), Restart: restartKubelet(c)}
	if !n.NoKubeletRestart {
		k.Relist = c.RelistKubelet
	}
	return k
}

// known reports whether a node was found or named.
func (n *nodeFlags) known() bool { return n.ManifestsDir != "" }

// restartKubelet restarts a devk cluster's supervised kubelet.
func restartKubelet(c *cluster.Cluster) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.RestartKubelet(ctx)
		return err
	}
}

var errNoCluster = fmt.Errorf("no cluster to swap into: run `devk up`, pass --manifests-dir, --kubeconfig and --cri-socket for a kubeadm node, or --no-swap")
