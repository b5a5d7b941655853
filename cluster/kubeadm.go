package cluster

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/images"
	"github.com/devk/devk/cluster/internal/joinnode"
	"github.com/devk/devk/cluster/internal/kubeadmconfig"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/supervise"
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
const kubeadmComponent = "kubeadm"

// devkOnly runs a phase only on a cluster devk's own phases bootstrap,
// kubeadmOnly only on one kubeadm bootstraps.
func devkOnly[S any](c func(S) *Cluster) func(S) (bool, string) {
	return bootstrappedBy(c, false, "kubeadm bootstraps this cluster (bootstrapper: kubeadm): kubeadm init and join do it")
}

func kubeadmOnly[S any](c func(S) *Cluster) func(S) (bool, string) {
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

func self(c *Cluster) *Cluster       { return c }
func jobCluster(j *NodeJob) *Cluster { return j.Cluster }

// kubeadmInput is what the cluster's kubeadm config is made from; the
// phases add the token, key and pins a join needs.
func (c *Cluster) kubeadmInput() kubeadmconfig.Input { return kubeadmconfig.ForCluster(c.Config) }

// kubeadmNode is node n as its kubeadm config names it.
func (c *Cluster) kubeadmNode(n Node) kubeadmconfig.Node {
	return kubeadmconfig.Node{Name: n.Name(), IP: n.IP(), ControlPlane: n.Net.IsControlPlane(), CRISocket: c.criSocket(n), CgroupRoot: n.Net.CgroupRoot}
}

// kubeadmPreflight is kubeadmconfig.Preflight of node 0 (its socket the
// one the runtime phase records) on a cluster kubeadm bootstraps.
func (c *Cluster) kubeadmPreflight(version string) error {
	if !c.Config.Spec.Kubeadm() {
		return nil
	}
	n := c.kubeadmNode(c.FirstNode())
	n.CRISocket = cmp.Or(n.CRISocket, c.FirstNode().Files.ContainerdSocket())
	return kubeadmconfig.Preflight(c.kubeadmInput(), n, version)
}

// prepareKubeadmNode installs the tree's kubeadm and kubelet on node n
// (the ones this run built, else node 0's).
func (c *Cluster) prepareKubeadmNode(ctx context.Context, n Node) (bool, error) {
	from := filepath.Dir(c.FirstNode().Files.KubeletBinary())
	kubeadm, kubelet := c.kubeadmBuilt, c.kubeletBuilt
	if kubeadm == "" {
		kubeadm = filepath.Join(from, kubeadmComponent)
	}
	if kubelet == "" {
		kubelet = filepath.Join(from, "kubelet")
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
	data, err := kubeadmconfig.Init(c.kubeadmInput(), c.kubeadmNode(n))
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
	r, err := image.NewRemote(c.Config.Registry, c.remoteOptions())
	if err != nil {
		return phase.Done, err
	}
	moved, err := images.TagForKubeadm(ctx, r, c.Config.Images, list)
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(installed || wrote || len(moved) > 0, "%s; %d images kubeadm names, %d tagged now", n.Files.KubeadmConfig(), len(list), len(moved)), nil
}

// kubeadm runs the node's kubeadm with args inside node n, its output
// shown with -v 1. It runs with the daemons' environment and the node's
// lock named as held (this job holds it): the systemctl kubeadm calls,
// devk's in the node, does not wait for it.
func (c *Cluster) kubeadm(ctx context.Context, n Node, args ...string) error {
	held, err := nodelock.HeldEnvVar(n.Files.Manifests())
	if err != nil {
		return err
	}
	return n.RunKubeadm(ctx, node.ExecInput{
		Command: append([]string{kubeadmComponent}, args...), Environ: os.Environ(), Extra: append(c.daemonEnv(), held),
		ToolDirs: []string{filepath.Dir(c.KubectlPath())}, CRISocket: c.criSocket(n),
	}, c.Reporter)
}

// clearUnfinishedKubeadm makes node n ready for a kubeadm init or join
// again after one that did not finish: a kubeadm a killed devk left
// running is stopped, and what it wrote is cleared (`kubeadm reset -f`
// inside the node).
func (c *Cluster) clearUnfinishedKubeadm(ctx context.Context, n Node) error {
	left, err := n.StopLeftKubeadm(ctx)
	if err != nil {
		return err
	}
	if left > 0 {
		c.Reporter.Infof("node %s: stopped %d kubeadm a killed devk left running", n.Name(), left)
	}
	if !n.KubeadmLeftovers() {
		return nil
	}
	c.Reporter.Infof("node %s holds what an unfinished kubeadm left: kubeadm reset -f, then again", n.Name())
	if err := c.kubeadm(ctx, n, "reset", "-f", "--cri-socket", "unix://"+c.criSocket(n)); err != nil {
		return fmt.Errorf("node %s: kubeadm reset after an unfinished kubeadm: %w", n.Name(), err)
	}
	return nil
}

// resumeKubeadmNode is the phase of a node whose kubeadm init or join
// finished before: its kubelet is started as kubeadm configured it when
// it does not run (a machine restarted, a kubelet killed), as systemd
// would.
func (c *Cluster) resumeKubeadmNode(n Node, command string) (phase.Outcome, error) {
	_, started, err := n.Files.Procs().Start(supervise.Process{Name: "kubelet", Argv: n.KubeletArgv(), Env: c.daemonEnv()})
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(started, "kubeadm %s ran before; kubelet %s", command, map[bool]string{true: "started", false: "running"}[started]), nil
}

// runKubeadmInit runs `kubeadm init` on node 0 unless it finished
// before; one that did not finish is reset first.
func (c *Cluster) runKubeadmInit(ctx context.Context) (phase.Outcome, error) {
	n := c.FirstNode()
	if n.KubeadmDone() {
		return c.resumeKubeadmNode(n, "init")
	}
	if err := c.clearUnfinishedKubeadm(ctx, n); err != nil {
		return phase.Done, err
	}
	args := []string{"init", "--config", kubeadmconfig.InNode}
	if len(c.KubeadmSkipPhases) > 0 {
		args = append(args, "--skip-phases", strings.Join(c.KubeadmSkipPhases, ","))
	}
	if err := c.kubeadm(ctx, n, args...); err != nil {
		return phase.Done, fmt.Errorf("kubeadm init on node %s: %w\nthe config given to kubeadm: %s (inside the node: %s); `devk up` again resets the node and runs it again",
			n.Name(), err, n.Files.KubeadmConfig(), kubeadmconfig.InNode)
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

// uploadCerts is `kubeadm init phase upload-certs --upload-certs` on node
// 0 under in.CertificateKey: kubeadm encrypts the shared CAs and keys
// into Secret kube-system/kubeadm-certs for a control-plane join. The key
// goes in through a config file of its own (kubeadm refuses
// --certificate-key beside --config), removed afterwards.
func (c *Cluster) uploadCerts(ctx context.Context, in kubeadmconfig.Input) error {
	n0 := c.FirstNode()
	data, err := kubeadmconfig.Init(in, c.kubeadmNode(n0))
	if err != nil {
		return err
	}
	path := n0.Files.ControlPlane(c.Config, n0.Net).HostPath(kubeadmconfig.UploadCertsInNode)
	if err := atomicfile.Write(path, data, 0o600, ""); err != nil {
		return err
	}
	defer os.Remove(path)
	return c.kubeadm(ctx, n0, "init", "phase", "upload-certs", "--upload-certs", "--config", kubeadmconfig.UploadCertsInNode)
}

// runKubeadmJoin runs `kubeadm join` on the joining node unless it
// finished before (one that did not finish is reset first): a worker
// with a bootstrap token devk makes, the CA pinned; a control-plane node
// after node 0's kubeadm uploaded the shared certificates with a new key.
func (j *NodeJob) runKubeadmJoin(ctx context.Context) (phase.Outcome, error) {
	c, n := j.Cluster, j.Node
	if n.KubeadmDone() {
		return c.resumeKubeadmNode(n, "join")
	}
	if _, err := c.prepareKubeadmNode(ctx, n); err != nil {
		return phase.Done, err
	}
	if err := c.clearUnfinishedKubeadm(ctx, n); err != nil {
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
	data, err := kubeadmconfig.Join(in, c.kubeadmNode(n))
	if err != nil {
		return phase.Done, err
	}
	if err := atomicfile.Write(n.Files.KubeadmConfig(), data, 0o600, ""); err != nil {
		return phase.Done, err
	}
	if err := c.kubeadm(ctx, n, "join", "--config", kubeadmconfig.InNode); err != nil {
		return phase.Done, fmt.Errorf("kubeadm join on node %s: %w\nthe config given to kubeadm: %s (inside the node: %s)", n.Name(), err, n.Files.KubeadmConfig(), kubeadmconfig.InNode)
	}
	if err := n.MarkKubeadmDone("join"); err != nil {
		return phase.Done, err
	}
	j.kubeletStarted = time.Now()
	return phase.Changed("kubeadm join on %s (%s)", n.Name(), n.Net.Role), nil
}
