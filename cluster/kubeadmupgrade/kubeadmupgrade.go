// Package kubeadmupgrade is `devk upgrade` on a cluster the tree's
// kubeadm bootstrapped (bootstrapper: kubeadm): the new tree's kubeadm
// upgrades it as a kubeadm user does. devk gives its images of the new
// tree the names that kubeadm lists, installs the new kubeadm in each
// node and runs, inside the node, `kubeadm upgrade apply VERSION` on the
// first control-plane node (etcd and its control plane's static pods,
// the cluster's kubeadm and kubelet config, CoreDNS and kube-proxy) and
// `kubeadm upgrade node` on every other node (a control plane's static
// pods; each node's kubelet config). The kubelets themselves are
// devk upgrade's, as on any cluster: drained, swapped, uncordoned.
package kubeadmupgrade

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/internal/images"
	"github.com/devk/devk/cluster/internal/kubeadmconfig"
	"github.com/devk/devk/cluster/internal/kubeadmrun"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
)

// Component is the tree's kubeadm, which an upgrade of a cluster kubeadm
// bootstraps builds with the other components.
const Component = kubeadmrun.Component

// Upgrade is one cluster moved to one tree's kubeadm and images.
type Upgrade struct {
	Cluster *cluster.Cluster
	// Kubeadm is the new tree's kubeadm (its build on the host), Version
	// the version it upgrades the cluster to (the tree's).
	Kubeadm, Version string
	// Images are the tree's images devk pushed (component → reference
	// by digest); the cluster's own (cluster.json's) stand in for a
	// component they lack (devk's pause).
	Images map[string]string
	// Force is kubeadm's --force (devk upgrade --force-skew): an upgrade
	// kubeadm's version policy refuses unless forced.
	Force bool
	// Reporter shows kubeadm's output (with -v 1) and what devk does
	// beside it.
	Reporter progress.Reporter
}

// TagImages gives the images kubeadm of the tree lists for the cluster
// at Version (`kubeadm config images list` of the cluster's config with
// that version) devk's images of the same repository, as up does for
// kubeadm init: kubeadm pulls them by those names. It returns how many
// kubeadm listed and the tags it moved.
func (u Upgrade) TagImages(ctx context.Context) (int, []string, error) {
	c := u.Cluster
	in := kubeadmconfig.ForCluster(c.Config)
	in.KubernetesVersion = u.Version
	data, err := kubeadmconfig.Init(in, c.KubeadmNode(c.FirstNode()))
	if err != nil {
		return 0, nil, err
	}
	dir, err := os.MkdirTemp("", "devk-kubeadm-upgrade-")
	if err != nil {
		return 0, nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "kubeadm.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return 0, nil, err
	}
	list, err := images.KubeadmImages(ctx, u.Kubeadm, file)
	if err != nil {
		return 0, nil, err
	}
	pushed := maps.Clone(c.Config.Images)
	if pushed == nil {
		pushed = map[string]string{}
	}
	maps.Copy(pushed, u.Images)
	r, err := image.NewRemote(c.Config.Registry, c.RemoteOptions())
	if err != nil {
		return 0, nil, err
	}
	moved, err := images.TagForKubeadm(ctx, r, pushed, list)
	return len(list), moved, err
}

// Applied says whether `kubeadm upgrade apply` of Version finished on
// the cluster: the kubeadm-config ConfigMap (its upload-config phase)
// names Version and kube-proxy's DaemonSet (its addon phase, near its
// end) runs kube-proxy of Version.
func (u Upgrade) Applied(ctx context.Context, cs kubernetes.Interface) (bool, error) {
	cc, err := clusterConfiguration(ctx, cs)
	if err != nil {
		return false, err
	}
	if cc.KubernetesVersion != u.Version {
		return false, nil
	}
	w, _ := addon.Lookup("kube-proxy")
	ds, err := cs.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read %s: %w", w, err)
	}
	for _, ct := range ds.Spec.Template.Spec.Containers {
		if ct.Name == w.Container {
			return strings.HasSuffix(ct.Image, ":"+u.Version), nil
		}
	}
	return false, nil
}

// The ConfigMap kubeadm keeps its ClusterConfiguration in.
const (
	kubeadmConfigMap        = "kubeadm-config"
	clusterConfigurationKey = "ClusterConfiguration"
)

// clusterConfig is what devk reads of kubeadm's ClusterConfiguration
// (kubeadm.k8s.io/v1beta4: extraArgs a list of names and values).
type clusterConfig struct {
	KubernetesVersion string          `json:"kubernetesVersion"`
	APIServer         componentConfig `json:"apiServer"`
	ControllerManager componentConfig `json:"controllerManager"`
	Scheduler         componentConfig `json:"scheduler"`
	Etcd              struct {
		Local componentConfig `json:"local"`
	} `json:"etcd"`
}

type componentConfig struct {
	ExtraArgs []struct {
		Name string `json:"name"`
	} `json:"extraArgs"`
}

// clusterConfiguration reads kubeadm's ClusterConfiguration from the
// cluster (the kubeadm-config ConfigMap, as kubeadm upgrade does).
func clusterConfiguration(ctx context.Context, cs kubernetes.Interface) (clusterConfig, error) {
	var cc clusterConfig
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, kubeadmConfigMap, metav1.GetOptions{})
	if err != nil {
		return cc, fmt.Errorf("read kubeadm's ConfigMap %s/%s: %w", metav1.NamespaceSystem, kubeadmConfigMap, err)
	}
	if err := yaml.Unmarshal([]byte(cm.Data[clusterConfigurationKey]), &cc); err != nil {
		return cc, fmt.Errorf("kubeadm's ConfigMap %s/%s: %s: %w", metav1.NamespaceSystem, kubeadmConfigMap, clusterConfigurationKey, err)
	}
	return cc, nil
}

// ExtraArgs are the flags the cluster's ClusterConfiguration gives each
// static pod through extraArgs (by pod: kube-apiserver, …, etcd): on a
// cluster kubeadm bootstraps, the flags its users give. kubeadm writes
// every other flag of the manifests, kube-proxy's and the kubelets' own
// and translates them between its versions itself.
func ExtraArgs(ctx context.Context, cs kubernetes.Interface) (map[string][]string, error) {
	cc, err := clusterConfiguration(ctx, cs)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for pod, c := range map[string]componentConfig{"kube-apiserver": cc.APIServer, "kube-controller-manager": cc.ControllerManager, "kube-scheduler": cc.Scheduler, "etcd": cc.Etcd.Local} {
		for _, a := range c.ExtraArgs {
			out[pod] = append(out[pod], a.Name)
		}
	}
	return out, nil
}

// Apply installs the tree's kubeadm on the first control-plane node and
// runs `kubeadm upgrade apply VERSION --yes` there.
func (u Upgrade) Apply(ctx context.Context) error {
	n := u.Cluster.FirstNode()
	args := append([]string{"upgrade", "apply", u.Version, "--yes"}, u.flags()...)
	if u.Force {
		args = append(args, "--force")
	}
	return u.run(ctx, n, args)
}

// Node installs the tree's kubeadm on node n (not the first control
// plane) and runs `kubeadm upgrade node` there.
func (u Upgrade) Node(ctx context.Context, n cluster.Node) error {
	return u.run(ctx, n, append([]string{"upgrade", "node"}, u.flags()...))
}

// flags are what every kubeadm upgrade is given: the checks of its
// preflight that fail on a devk node for the machine's reasons (as init's).
func (u Upgrade) flags() []string {
	return []string{"--ignore-preflight-errors=" + strings.Join(kubeadmconfig.IgnoredChecks, ",")}
}

// run installs the tree's kubeadm on n and runs it with args inside n,
// under the node's lock (no swap races it), after stopping a kubeadm a
// killed devk upgrade left running there.
func (u Upgrade) run(ctx context.Context, n cluster.Node, args []string) error {
	lock, err := nodelock.Acquire(n.Files.Manifests(), nodelock.Command())
	if err != nil {
		return err
	}
	defer lock.Release()
	r := u.Cluster.KubeadmRunner(n)
	r.Reporter = u.Reporter
	if err := r.StopLeft(ctx); err != nil {
		return err
	}
	if _, err := node.InstallBinary(u.Kubeadm, n.Files.KubeadmBinary()); err != nil {
		return fmt.Errorf("install the tree's kubeadm on node %s: %w", n.Name(), err)
	}
	if n.Net.IsControlPlane() {
		cs, err := u.Cluster.Client()
		if err != nil {
			return err
		}
		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); u.mindMirrors(mctx, cs, n) }()
		defer func() { stop(); <-done }() // a kubelet restart begun ends first
	}
	if err := r.Run(ctx, args...); err != nil {
		return fmt.Errorf("kubeadm %s on node %s: %w (kubeadm's output: devk upgrade -v 1; its backups of the manifests and etcd: /etc/kubernetes/tmp in the node)", strings.Join(args[:2], " "), n.Name(), err)
	}
	return nil
}
