// Package cluster brings up and tears down a throwaway Kubernetes
// cluster of one or more nodes: kubeadm's init and join phases made for a
// laptop, run by the phase engine. A cluster is one directory,
// $DEVK_HOME/clusters/<name>/, holding everything it owns: PKI,
// kubeconfigs, static pod manifests, the kubelet's root dir, a private
// containerd (config, socket, root and state), registry storage, logs and
// pid files. Processes are supervised by pid file, not systemd.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"reflect"
	"time"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Options are what `devk up` and `devk down` are told.
type Options struct {
	// Name names the cluster (and its directory); empty means the config
	// file's name, else "devk".
	Name string
	// UserConfigFile, for up, is a cluster config file (package config)
	// to make the cluster by, or to apply to it; empty keeps what
	// cluster.json says (a new cluster: the defaults).
	UserConfigFile string
	// Home is $DEVK_HOME; empty means $DEVK_HOME, else ~/.devk.
	Home string
	// TreeDir is the Kubernetes tree the images and the kubelet are built
	// from; empty means the tree around the working directory.
	TreeDir string
	// Registry, when set, is a running registry (host:port) to push to
	// instead of starting the embedded one.
	Registry string
	// ImagesFrom, when set, is a registry holding the component images
	// already (repo/kube-apiserver:TAG…); nothing is built or pushed.
	ImagesFrom string
	// ImagesTag is the tag of the images in ImagesFrom (e.g. v1.34.4).
	ImagesTag string
	// UserKubeconfig is the user's kubeconfig that gets context
	// devk-<name>; empty means $KUBECONFIG, else ~/.kube/config.
	UserKubeconfig string
	// WaitTimeout bounds wait-control-plane; zero means
	// DefaultWaitTimeout.
	WaitTimeout time.Duration
	// KeepData, for down, keeps pki/ and etcd/ (and cluster.json).
	KeepData bool
	// AllowBridgeForward, for up, adds one rule to the host's FORWARD
	// chain accepting traffic between the cluster's nodes on its bridge
	// (for a host that drops forwarded traffic, as Docker's do);
	// recorded in cluster.json, removed by down.
	AllowBridgeForward bool
	// KeepTaint, for up, when set, says whether the node keeps the
	// control-plane NoSchedule taint (and is remembered in cluster.json);
	// nil keeps the cluster's choice (for a new cluster: no taint).
	KeepTaint *bool
	// CertValidity, for up, when set, is the lifetime of the leaf
	// certificates up issues from now on (remembered in cluster.json).
	CertValidity *time.Duration
	// RenewCerts, for up, renews every certificate once the control plane
	// runs (as devk certs renew all).
	RenewCerts bool
	// FakeNodes, for up, when set, is how many of kwok's fake nodes the
	// cluster has (recorded in its spec before the manifests are written).
	FakeNodes *int
	// Nodes, for up, is how many nodes the cluster should have: node 0
	// and Nodes-1 joined (zero: as many as it has).
	Nodes int
	// ControlPlanes, for up, is how many of them are control-plane nodes
	// (zero: as many as it has; a new cluster: 1). Two or more give a new
	// cluster a load balancer in front of the API servers, the endpoint
	// of every kubeconfig.
	ControlPlanes int
	// Bootstrapper, for up, is what bootstraps a new cluster: devk's own
	// phases (layout.BootstrapperDevk) or the tree's kubeadm
	// (layout.BootstrapperKubeadm); "" is the config file's, else devk.
	// An existing cluster's cannot change.
	Bootstrapper string
	// KubeadmSkipPhases, for up on a cluster kubeadm bootstraps, are
	// passed to kubeadm init as --skip-phases.
	KubeadmSkipPhases []string
	// EtcdCommandTimeout bounds each etcd member call of a control-plane
	// join or removal (list, add, promote, remove); zero means
	// etcdwatch.DefaultCommandTimeout.
	EtcdCommandTimeout time.Duration

	Reporter progress.Reporter
}

// Cluster is the state the up and down phases share.
type Cluster struct {
	Options
	// Files are where the cluster keeps its files; its nodes' are found
	// through them (see Node).
	Files  layout.ClusterFiles
	Config layout.Config
	// Home is the resolved DEVK_HOME.
	Home string

	// existed says cluster.json was there before this run.
	existed bool
	// kubeletBuilt and kubeadmBuilt are the binaries the images phase
	// built (kubeadm for a cluster kubeadm bootstraps).
	kubeletBuilt, kubeadmBuilt string
	// kubectl is the kubectl build the images phase started (nil: none).
	kubectl *kubectlBuild
	// kubeletStarted is when this run started the kubelet (zero if it
	// found it running).
	kubeletStarted time.Time
	// addonsApplied are the addon workloads addon/wait waits for.
	addonsApplied []addon.Workload
	// fileNodes are the nodes the config file lists after the first, in
	// the order up joins them (config.Cluster.JoinNodes).
	fileNodes []config.Node
	// fileTrees are the trees the config file gives nodes, by name (nil:
	// no file, or one listing no nodes: those recorded hold).
	fileTrees map[string]string
	// manifestsWritten are the static pods whose manifest this run
	// wrote, and when: wait-control-plane waits for their new containers.
	manifestsWritten map[string]time.Time
	// locks are the cluster's and its nodes' locks while a job holds
	// them (see lock).
	locks *nodelock.Set
}

// caDir holds the cluster's CAs and service-account key: node 0's pki,
// where up made them and from which every control-plane join copies them.
func (c *Cluster) caDir() string { return c.FirstNode().Files.PKI() }

// home is where devk keeps what the home's clusters share.
func (c *Cluster) home() layout.Home { return layout.HomeFiles(c.Home) }

// Open resolves the cluster's directory and reads its config if it has
// one, and the config file if given; it checks the file against the
// machine and the cluster as it is. Nothing is created.
func Open(o Options) (*Cluster, error) {
	var uc *config.Cluster
	if o.UserConfigFile != "" {
		var err error
		if uc, err = config.Read(o.UserConfigFile); err != nil {
			return nil, err
		}
		flags := config.Flags{Name: o.Name, Bootstrapper: o.Bootstrapper, CertValidity: o.CertValidity, Nodes: o.Nodes,
			ControlPlanes: o.ControlPlanes, KeepTaint: o.KeepTaint}
		if err := uc.Agrees(flags); err != nil {
			return nil, err
		}
		if o.Name == "" {
			o.Name = uc.Name
		}
	}
	if o.Bootstrapper != "" && o.Bootstrapper != layout.BootstrapperDevk && o.Bootstrapper != layout.BootstrapperKubeadm {
		return nil, fmt.Errorf("--bootstrapper %s: want %s (devk's own phases) or %s (the tree's kubeadm init and join)", o.Bootstrapper, layout.BootstrapperDevk, layout.BootstrapperKubeadm)
	}
	if o.Name == "" {
		o.Name = layout.DefaultName
	}
	if err := layout.ValidateName(o.Name); err != nil {
		return nil, err
	}
	home, err := layout.HomeDir(o.Home)
	if err != nil {
		return nil, err
	}
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	c := &Cluster{Options: o, Home: home, Files: layout.HomeFiles(home).Cluster(o.Name)}
	cfg, err := layout.ReadConfig(c.Files.ConfigFile())
	switch {
	case err == nil:
		c.Config = cfg
		c.existed = true // layout.ReadConfig checked that it names this directory's cluster
		// A config file given replaces the stored spec (it is checked
		// itself): the way out of a spec refused here, which a hand edit
		// or an older devk (that took more in extraArgs) wrote.
		if err := config.ValidateSpec(cfg.Spec, c.Files.ConfigFile()+" (spec)"); err != nil && uc == nil {
			return nil, fmt.Errorf("%w\nthe file was changed by hand, or by an older devk: fix it, or apply a config file with `devk up --config`", err)
		}
		if uc != nil {
			if uc.Spec.Bootstrapper == "" {
				uc.Spec.Bootstrapper = cfg.Spec.Bootstrapper // a file that does not say keeps the cluster's
			}
			if err := uc.Unchangeable(cfg); err != nil {
				return nil, err
			}
			if cfg.Spec.Kubeadm() && !reflect.DeepEqual(uc.Spec, cfg.Spec) {
				return nil, fmt.Errorf("%s changes the config of cluster %s, which kubeadm bootstrapped: kubeadm's config is given once, at init; `devk down%s` first, then up with the file", o.UserConfigFile, cfg.Name, node.NameFlag(cfg.Name))
			}
		}
		if o.Bootstrapper != "" && o.Bootstrapper != cfg.Spec.BootstrappedBy() {
			return nil, fmt.Errorf("--bootstrapper %s, but %s made cluster %s, and a cluster's bootstrapper cannot change: `devk down%s` first", o.Bootstrapper, cfg.Spec.BootstrappedBy(), cfg.Name, node.NameFlag(cfg.Name))
		}
	case errors.Is(err, fs.ErrNotExist):
		c.Config = layout.NewConfig(o.Name)
		if err := c.place(uc); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	if uc != nil {
		c.Config.Spec = uc.Spec
		c.Config.KeepTaint = uc.KeepTaint()
		if len(uc.Nodes) > 0 {
			c.Nodes, c.ControlPlanes, c.fileNodes, c.fileTrees = len(uc.Nodes), uc.ControlPlanes(), uc.JoinNodes(), uc.NodeTrees()
		}
	}
	if o.FakeNodes != nil {
		c.Config.Spec.FakeNodes = c.Config.Spec.FakeNodes.WithTotal(*o.FakeNodes)
	}
	if !c.existed && o.Bootstrapper == layout.BootstrapperKubeadm {
		c.Config.Spec.Bootstrapper = layout.BootstrapperKubeadm
	}
	if key := config.PatchesKey(c.Config.Spec); key != "" && !c.Config.Spec.Kubeadm() {
		return nil, fmt.Errorf("%s: %s patches kubeadm's config, but devk's own phases bootstrap cluster %s: add --bootstrapper %s (a new cluster) or bootstrapper: %s to the file, or leave %s out",
			o.UserConfigFile, key, c.Config.Name, layout.BootstrapperKubeadm, layout.BootstrapperKubeadm, key)
	}
	if len(o.KubeadmSkipPhases) > 0 && !c.Config.Spec.Kubeadm() {
		return nil, fmt.Errorf("--kubeadm-skip-phases: kubeadm does not bootstrap cluster %s: add --bootstrapper %s to make a new cluster with it", c.Config.Name, layout.BootstrapperKubeadm)
	}
	if o.KeepTaint != nil {
		c.Config.KeepTaint = *o.KeepTaint
	}
	if err := c.checkNodeCount(); err != nil {
		return nil, err
	}
	if !c.existed && c.ControlPlanes > 1 {
		c.Config.ControlPlaneEndpoint = c.Config.LoadBalancerEndpoint()
	}
	if o.CertValidity != nil {
		c.Config.Spec.CertValidity = &metav1.Duration{Duration: *o.CertValidity}
		if err := config.ValidateSpec(c.Config.Spec, "--cert-validity"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// place gives a new cluster its networks: the config file's, else the
// defaults and a free node subnet.
func (c *Cluster) place(uc *config.Cluster) error {
	taken, err := node.HostNetworks(context.Background(), "")
	if err != nil {
		return fmt.Errorf("find a free subnet for the cluster's nodes: %w", err)
	}
	others := layout.Configs(c.Home, c.Config.Name)
	if uc == nil {
		return c.Config.PlaceAmong(others, taken)
	}
	c.Config.PodCIDR, c.Config.ServiceCIDR = uc.PodSubnet(), uc.ServiceSubnet()
	if uc.Networking.NodeSubnet == "" {
		// A free subnet that overlaps neither of the file's.
		for _, s := range []string{c.Config.PodCIDR, c.Config.ServiceCIDR} {
			_, n, _ := net.ParseCIDR(s) // the file's were checked
			taken = append(taken, n)
		}
		return c.Config.PlaceAmong(others, taken)
	}
	_, n, _ := net.ParseCIDR(uc.Networking.NodeSubnet)
	if err := c.Config.PlaceAt(n, others, taken); err != nil {
		return uc.ErrorAt([]string{"networking", "nodeSubnet"}, "%v: choose another, or leave it out for a free one", err)
	}
	return nil
}

// Exists reports whether the cluster has a config (it was brought up, or
// half brought up, before).
func (c *Cluster) Exists() bool { return c.existed }

// SaveConfig writes cluster.json atomically.
func (c *Cluster) SaveConfig() error {
	if err := os.MkdirAll(c.FirstNode().Files.Dir, 0o755); err != nil {
		return fmt.Errorf("make the cluster directory: %w", err)
	}
	data, err := layout.EncodeConfig(c.Config)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(c.Files.ConfigFile(), data, 0o644, ""); err != nil {
		return err
	}
	c.existed = true
	return nil
}

// timeNow is time.Now, truncated to seconds for cluster.json.
func timeNow() time.Time { return time.Now().UTC().Truncate(time.Second) }

func splitHostPort(s string) (string, string, error) { return net.SplitHostPort(s) }
