package cluster

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/images"
	"github.com/devk/devk/cluster/internal/joinnode"
	"github.com/devk/devk/cluster/internal/kubeadmconfig"
	"github.com/devk/devk/cluster/internal/kubeadmrun"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// A cluster with bootstrapper kubeadm is made by the tree's own kubeadm:
// devk makes the nodes (network and mount namespaces, containerd, the
// pod network), builds kubeadm with the other components, tags its
// images with the names kubeadm asks for, writes kubeadm's config, and
// runs `kubeadm init` on node 0 and `kubeadm join` on the others, inside
// each node, where kubeadm's paths are the node's files (node's
// mountNS) and its systemctl is devk's. kubeadm does the rest: the
// certificates, kubeconfigs, static pods, tokens, upload-config and
// addons.

// kubeadmComponent is the tree's kubeadm, which the images phase builds
// for a cluster it bootstraps.
const kubeadmComponent = kubeadmrun.Component

// devkOnly runs a phase only on a cluster devk's own phases bootstrap,
// KubeadmOnly only on one kubeadm bootstraps.
func devkOnly[S any](c func(S) *Cluster) func(S) (bool, string) {
	return bootstrappedBy(c, false, "kubeadm bootstraps this cluster (bootstrapper: kubeadm): kubeadm init and join do it")
}

// KubeadmOnly runs a phase only on a cluster kubeadm bootstraps (c:
// the job's cluster, e.g. JobCluster).
func KubeadmOnly[S any](c func(S) *Cluster) func(S) (bool, string) {
	return bootstrappedBy(c, true, "devk's own phases bootstrap this cluster (bootstrapper: kubeadm in the config file for kubeadm's)")
}

func bootstrappedBy[S any](c func(S) *Cluster, kubeadm bool, otherwise string) func(S) (bool, string) {
	return func(s S) (bool, string) {
		if c(s).Config.Spec.Kubeadm() != kubeadm {
			return false, otherwise
		}
		return true, ""
	}
}

func self(c *Cluster) *Cluster { return c }

// JobCluster is a node job's cluster.
func JobCluster(j *NodeJob) *Cluster { return j.Cluster }

// kubeadmInput is what the cluster's kubeadm config is made from; the
// phases add the token, key and pins a join needs.
func (c *Cluster) kubeadmInput() kubeadmconfig.Input { return kubeadmconfig.ForCluster(c.Config) }

// KubeadmNode is node n as its kubeadm config names it.
func (c *Cluster) KubeadmNode(n Node) kubeadmconfig.Node {
	return kubeadmconfig.Node{Name: n.Name(), IP: n.IP(), ControlPlane: n.Net.IsControlPlane(), CRISocket: c.criSocket(n), CgroupRoot: n.Net.CgroupRoot}
}

// kubeadmPreflight is kubeadmconfig.Preflight of node 0 (its socket the
// one the runtime phase records) on a cluster kubeadm bootstraps: its
// config, nil when there is none to check.
func (c *Cluster) kubeadmPreflight(version string) ([]byte, error) {
	if !c.Config.Spec.Kubeadm() {
		return nil, nil
	}
	n := c.KubeadmNode(c.FirstNode())
	n.CRISocket = cmp.Or(n.CRISocket, c.FirstNode().Files.ContainerdSocket())
	return kubeadmconfig.Preflight(c.kubeadmInput(), n, version)
}

// kubeadmValidate builds the tree's kubeadm (incrementally: the images
// phase finds it built) and has it validate config, node 0's, before
// anything is made: a tree whose kubeadm does not build, or a config it
// rejects, is a preflight problem. Only kubeadm: an up refused here
// leaves the tree's other builds as they were.
func (c *Cluster) kubeadmValidate(ctx context.Context, config []byte) error {
	bj, err := build.Run(ctx, build.Options{TreeDir: c.TreeDir, Components: []string{kubeadmComponent}, Reporter: progress.Under(c.Reporter, "preflight")}, phase.Options{})
	if err != nil {
		return fmt.Errorf("the tree's kubeadm does not build (a cluster kubeadm bootstraps needs it): %w", err)
	}
	return kubeadmrun.Validate(ctx, bj.Binaries[0].Path, config)
}

// prepareKubeadmNode installs the tree's kubeadm and kubelet on node n
// (the ones this run built, else node 0's; the node's own tree's
// kubelet when it has one).
func (c *Cluster) prepareKubeadmNode(ctx context.Context, n Node) (bool, error) {
	from := filepath.Dir(c.FirstNode().Files.KubeletBinary())
	kubeadm, kubelet := c.kubeadmBuilt, c.kubeletBuilt
	if kubeadm == "" {
		kubeadm = filepath.Join(from, kubeadmComponent)
	}
	if kubelet == "" {
		kubelet = filepath.Join(from, "kubelet")
	}
	kubelet, err := c.kubeletFor(ctx, n, kubelet)
	if err != nil {
		return false, err
	}
	return n.PrepareKubeadm(ctx, kubeadm, kubelet)
}

// runKubeadmConfig writes node 0's kubeadm config (InitConfiguration,
// ClusterConfiguration, KubeletConfiguration, KubeProxyConfiguration,
// the config file's patches applied) and gives devk's images the names
// that kubeadm lists for it.
func (c *Cluster) runKubeadmConfig(ctx context.Context) (phase.Outcome, error) {
	n := c.FirstNode()
	installed, err := c.prepareKubeadmNode(ctx, n)
	if err != nil {
		return phase.Done, err
	}
	data, err := kubeadmconfig.Init(c.kubeadmInput(), c.KubeadmNode(n))
	if err != nil {
		return phase.Done, err
	}
	wrote, err := atomicfile.WriteIfChanged(n.Files.KubeadmConfig(), data, 0o600, "")
	if err != nil {
		return phase.Done, err
	}
	list, err := images.KubeadmImages(ctx, n.Files.KubeadmBinary(), n.Files.KubeadmConfig())
	if err != nil {
		return phase.Done, fmt.Errorf("%w (the config given to kubeadm: %s)", err, n.Files.KubeadmConfig())
	}
	r, err := image.NewRemote(c.Config.Registry, c.RemoteOptions())
	if err != nil {
		return phase.Done, err
	}
	moved, err := images.TagForKubeadm(ctx, r, c.Config.Images, list)
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(installed || wrote || len(moved) > 0, "%s; %d images kubeadm names, %d tagged now", n.Files.KubeadmConfig(), len(list), len(moved)), nil
}

// KubeadmRunner runs kubeadm inside node n, with the daemons'
// environment and kubectl on its PATH.
func (c *Cluster) KubeadmRunner(n Node) kubeadmrun.Runner {
	return kubeadmrun.Runner{Node: n, Env: c.daemonEnv(), ToolDirs: []string{filepath.Dir(c.KubectlPath())}, CRISocket: c.criSocket(n), Reporter: c.Reporter}
}

// runKubeadmInit runs `kubeadm init` on node 0 unless it finished
// before; one that did not finish is reset first.
func (c *Cluster) runKubeadmInit(ctx context.Context) (phase.Outcome, error) {
	n := c.FirstNode()
	if n.KubeadmDone() {
		return c.KubeadmRunner(n).Resume("init")
	}
	if err := c.KubeadmRunner(n).ClearUnfinished(ctx); err != nil {
		return phase.Done, err
	}
	if err := c.KubeadmRunner(n).Init(ctx, c.KubeadmSkipPhases); err != nil {
		return phase.Done, err
	}
	if err := n.MarkKubeadmDone("init"); err != nil {
		return phase.Done, err
	}
	c.kubeletStarted = time.Now()
	for _, name := range []string{addons.KubeProxy, addons.CoreDNS} {
		if on, _ := addons.On(c.Config.Spec.Addons, name); on {
			c.addonsApplied = append(c.addonsApplied, addonWorkload(name))
		}
	}
	return phase.Changed("kubeadm init on %s", n.Name()), nil
}

// uploadCerts has node 0's kubeadm upload the shared certificates under
// in.CertificateKey for a control-plane join (kubeadmrun.UploadCerts).
func (c *Cluster) uploadCerts(ctx context.Context, in kubeadmconfig.Input) error {
	n0 := c.FirstNode()
	data, err := kubeadmconfig.Init(in, c.KubeadmNode(n0))
	if err != nil {
		return err
	}
	return c.KubeadmRunner(n0).UploadCerts(ctx, data, n0.Files.ControlPlane(c.Config, n0.Net).HostPath(kubeadmconfig.UploadCertsInNode))
}

// runKubeadmJoin runs `kubeadm join` on the joining node unless it
// finished before (one that did not finish is reset first): a worker
// with a bootstrap token devk makes, the CA pinned; a control-plane node
// after node 0's kubeadm uploaded the shared certificates with a new key.
func (j *NodeJob) runKubeadmJoin(ctx context.Context) (phase.Outcome, error) {
	c, n := j.Cluster, j.Node
	if n.KubeadmDone() {
		return c.KubeadmRunner(n).Resume("join")
	}
	if _, err := c.prepareKubeadmNode(ctx, n); err != nil {
		return phase.Done, err
	}
	if err := c.KubeadmRunner(n).ClearUnfinished(ctx); err != nil {
		return phase.Done, err
	}
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	cred, err := joinnode.NewKubeadmCredentials(ctx, cs, pki.CertPath(c.caDir(), pki.CAName), n.Net.IsControlPlane())
	if err != nil {
		return phase.Done, err
	}
	in := c.kubeadmInput()
	in.Token, in.CACertHashes, in.CertificateKey = cred.Token, cred.CAPins, cred.CertificateKey
	if n.Net.IsControlPlane() {
		if err := c.uploadCerts(ctx, in); err != nil {
			return phase.Done, fmt.Errorf("upload the control plane's certificates for node %s (kubeadm init phase upload-certs on %s): %w", n.Name(), c.FirstNode().Name(), err)
		}
	}
	data, err := kubeadmconfig.Join(in, c.KubeadmNode(n))
	if err != nil {
		return phase.Done, err
	}
	if err := atomicfile.Write(n.Files.KubeadmConfig(), data, 0o600, ""); err != nil {
		return phase.Done, err
	}
	if err := c.KubeadmRunner(n).Join(ctx); err != nil {
		return phase.Done, err
	}
	if err := n.MarkKubeadmDone("join"); err != nil {
		return phase.Done, err
	}
	j.kubeletStarted = time.Now()
	return phase.Changed("kubeadm join on %s (%s)", n.Name(), n.Net.Role), nil
}
