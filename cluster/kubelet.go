package cluster

import (
	"context"

	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/images"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/cluster/internal/nodetree"
	"github.com/devk/devk/phase"
)

// sandboxImage is the pause image by digest (node.Runtime.SandboxImage).
// The registry is the one --registry names, if given.
func (c *Cluster) sandboxImage(ctx context.Context) (string, error) {
	registry := c.Config.Registry
	if c.Registry != "" {
		registry = c.Registry
	}
	_, ref, err := images.Pause(ctx, c.home().PauseCache(), registry)
	return ref, err
}

func (c *Cluster) runRuntime(ctx context.Context) (phase.Outcome, error) {
	c.Config.OwnRuntime = true
	n := c.FirstNode()
	out, err := c.startRuntime(ctx, n)
	if err != nil {
		return out, err
	}
	c.Config.CRISocket = n.Files.ContainerdSocket()
	if err := c.SaveConfig(); err != nil {
		return phase.Done, err
	}
	if subnet, err := n.PodSubnet(); err != nil {
		return phase.Done, err
	} else if err := n.EnsurePodRules(ctx, subnet); err != nil {
		return phase.Done, err
	}
	return out, nil
}

// startRuntime starts node n's containerd (node.StartRuntime) with the
// pause image devk built and the loopback registries' forwarders as
// their mirrors.
func (c *Cluster) startRuntime(ctx context.Context, n Node) (phase.Outcome, error) {
	sandbox, err := c.sandboxImage(ctx)
	if err != nil {
		return phase.Done, err
	}
	var mirrors []node.Mirror
	for _, reg := range c.loopbackRegistries() {
		mirrors = append(mirrors, node.Mirror{Registry: reg, URL: c.forwarders().Mirror(reg)})
	}
	return n.StartRuntime(ctx, node.Runtime{SandboxImage: sandbox, Mirrors: mirrors, Env: c.daemonEnv(), Reporter: c.Reporter})
}

func (c *Cluster) runKubeletStart(ctx context.Context) (phase.Outcome, error) {
	return c.startKubelet(ctx, c.FirstNode(), c.kubeletSource())
}

// startKubelet installs the kubelet binary src (none: the node's own
// must be there) on node n and starts it (node.StartKubelet), noting
// when node 0's started.
func (c *Cluster) startKubelet(ctx context.Context, n Node, src string) (phase.Outcome, error) {
	out, started, err := n.StartKubelet(ctx, node.Kubelet{Src: src, CRISocket: c.criSocket(n), Env: c.daemonEnv(), Reporter: c.Reporter})
	if !started.IsZero() && n.First() {
		c.kubeletStarted = started
	}
	return out, err
}

// kubeletFor is the kubelet node n runs: its tree's (nodetree.Build)
// when it has one (the config file's, else the one cluster.json
// records, which this keeps up to date, with the image of the tree's
// kube-proxy the node runs), else def, the cluster's.
func (c *Cluster) kubeletFor(ctx context.Context, n Node, def string) (string, error) {
	tree, b := n.Net.Tree, nodetree.Built{Kubelet: def}
	if c.fileTrees != nil {
		tree = c.fileTrees[n.Name()]
	}
	if tree != "" {
		proxy, _ := addons.Applies(c.Config, addons.KubeProxy) // kubeadm's clusters: its kube-proxy, the tree's kubelet
		var err error
		if b, err = nodetree.Build(ctx, nodetree.Options{Tree: tree, Node: n.Name(), ControlPlane: c.Config.KubeVersion, KubeProxy: proxy, Image: c.imageOptions(), Reporter: c.Reporter}); err != nil {
			return "", err
		}
	}
	if _, i, err := c.Config.FindNode(n.Name()); err == nil && (c.Config.Network.Nodes[i].Tree != tree || c.Config.Network.Nodes[i].KubeProxyImage != b.KubeProxyImage) {
		c.Config.Network.Nodes[i].Tree, c.Config.Network.Nodes[i].KubeProxyImage = tree, b.KubeProxyImage
		if err := c.SaveConfig(); err != nil {
			return "", err
		}
		return b.Kubelet, c.ApplyKubeProxyAgain(ctx)
	}
	return b.Kubelet, nil
}

// runKubeletFinalize is node 0's node.FinalizeKubelet.
func (c *Cluster) runKubeletFinalize(ctx context.Context) (phase.Outcome, error) {
	return c.FirstNode().FinalizeKubelet()
}

// NodeKubelet is one node's kubelet as `devk swap kubelet` sees it.
type NodeKubelet struct {
	// Node is the node's name, Binary the kubelet it runs.
	Node, Binary string
	// Tree is the tree of its own that the node runs (its config file's
	// tree:), or "": the cluster's.
	Tree string
}

// Kubelets are the kubelets of the cluster's nodes, node 0 first.
func (c *Cluster) Kubelets() ([]NodeKubelet, error) {
	ns, err := c.nodes()
	var out []NodeKubelet
	for _, n := range ns {
		if n.Net.Leaving {
			continue // being removed: its kubelet may be stopped for good
		}
		out = append(out, NodeKubelet{Node: n.Name(), Binary: n.Files.KubeletBinary(), Tree: n.Net.Tree})
	}
	return out, err
}

// OtherRuntimes are the CRI sockets of the cluster's nodes but node 0,
// by node name.
func (c *Cluster) OtherRuntimes() map[string]string {
	out := map[string]string{}
	ns, err := c.nodes()
	if err != nil {
		return out // cluster.json was validated: every node's dir resolves
	}
	for _, n := range ns[1:] {
		if n.Net.Leaving {
			continue
		}
		out[n.Name()] = c.criSocket(n)
	}
	return out
}

// RestartKubelet stops node's supervised kubelet (empty: node 0's) and
// starts it again with the same command line (after its binary was
// swapped).
func (c *Cluster) RestartKubelet(ctx context.Context, node string) (int, error) {
	n, err := c.nodeNamed(node)
	if err != nil {
		return 0, err
	}
	return n.RestartKubelet(ctx, c.daemonEnv())
}

// RelistNodeKubelet restarts node name's supervised kubelet (empty: node
// 0's) and waits until the new one watches the API server's pods
// (node.RelistKubelet).
func (c *Cluster) RelistNodeKubelet(ctx context.Context, name string) error {
	n, err := c.nodeNamed(name)
	if err != nil {
		return err
	}
	return n.RelistKubelet(ctx, c.daemonEnv())
}
