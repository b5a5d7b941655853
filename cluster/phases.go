package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/cluster/internal/hostforward"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/registry"
)

// UpPhases are `devk up`, kubeadm's init phases made for a laptop.
func UpPhases() []*phase.Phase[*Cluster] {
	var controlPlane []*phase.Phase[*Cluster]
	for _, sp := range StaticPods[1:] {
		controlPlane = append(controlPlane, manifestPhase(sp, sp.Component))
	}
	return []*phase.Phase[*Cluster]{
		{
			Name:  "preflight",
			Short: "check root, cgroups, swap, the registry's port, containerd/runc/CNI plugins, ip/nsenter/sysctl, CAP_SYS_RESOURCE",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{"/proc/net/tcp", "/sys/fs/cgroup", "/proc/swaps", "PATH", hostforward.NFCallIPTables, "iptables -S FORWARD"}, []string{c.Files.ConfigFile()}
			},
			Run: phase.Method((*Cluster).runPreflight),
		},
		{
			Name:  "network",
			Short: "the node's network namespace, its veth to devk's bridge on the host, addresses, routes and the node's sysctls",
			IO: func(c *Cluster) ([]string, []string) {
				nw := c.Config.Network
				var outs []string
				outs = append(outs, "bridge "+nw.HostBridge+" "+nw.HostIP)
				for _, n := range nw.Nodes {
					outs = append(outs, "netns "+n.NetNSPath()+" (node "+n.IP+")", "veth "+n.HostVeth)
				}
				if c.AllowBridgeForward || nw.ForwardRule {
					outs = append(outs, "the host's iptables: "+c.forwardRule().String())
				}
				return []string{"ip route (the host's, to keep clear of)"}, outs
			},
			Run: phase.Method((*Cluster).runNetwork),
		},
		{
			Name:  "load-balancer",
			Short: "with more than one control-plane node: HAProxy on the host's bridge address in front of every API server, checking each one's /readyz",
			If:    haIf,
			IO: func(c *Cluster) ([]string, []string) {
				lb := c.loadBalancer()
				return nil, []string{lb.File, lb.Config.Frontend, lb.Procs.PIDFile(loadbalancer.ProcessName)}
			},
			Run: phase.Method((*Cluster).ConfigureLoadBalancer),
		},
		{
			Name:  "runtime",
			Short: "make the node's mount namespace (its own /var/lib/kubelet/device-plugins, /var/log/containers, /var/lib/cni, /run/containerd, /run/netns) and start its containerd in its network and mount namespaces (own config, root, state and socket); add its pods' rules (masquerade beyond the pod network; before kube-proxy, the kubernetes Service to the API server and other service addresses refused)",
			IO: func(c *Cluster) ([]string, []string) {
				return nil, []string{c.FirstNode().Files.MountNS(), c.FirstNode().Files.ContainerdConfig(), c.FirstNode().Files.CNIConfDir(), c.FirstNode().Files.ContainerdSocket(), c.FirstNode().Files.PIDFile("containerd")}
			},
			Run: phase.Method((*Cluster).runRuntime),
		},
		{
			Name:  "registry",
			Short: "start the embedded registry (devk registry serve) or use --registry; relay it to the bridge for the node (devk registry forward)",
			IO: func(c *Cluster) ([]string, []string) {
				return nil, append([]string{c.Config.Registry, c.registryPaths().RegistryRoot(), c.registryPaths().PIDFile(registry.ProcessName)}, c.forwarders().Mirrors()...)
			},
			Run: phase.Method((*Cluster).runRegistry),
		},
		{
			Name:  "images",
			Short: "build (incrementally) etcd, apiserver, controller-manager, scheduler, kube-proxy (on its iptables base), CoreDNS (from its module, at kubeadm's version), kubelet and pause; push the images; record digests; then begin kubectl's build, which runs beside the phases that follow",
			IO: func(c *Cluster) ([]string, []string) {
				tree := c.TreeDir
				if tree == "" {
					tree = "the tree around the working directory"
				}
				return []string{tree}, []string{c.Config.Registry + "/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy,devk-iptables-base,coredns,pause}", c.Files.ConfigFile()}
			},
			Run: phase.Method((*Cluster).runImages),
		},
		{
			Name:  "kubeadm-config",
			Short: "a cluster kubeadm bootstraps: install the tree's kubeadm and kubelet on node 0; write kubeadm's config (Init, Cluster, Kubelet and KubeProxy configurations from devk's config, its kubeadmConfigPatches applied); tag devk's images with the names kubeadm lists",
			If:    KubeadmOnly(self),
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.Files.ConfigFile()}, []string{c.FirstNode().Files.KubeadmBinary(), c.FirstNode().Files.KubeadmConfig(), c.Config.Registry + " (kubeadm's tags)"}
			},
			Run: phase.Method((*Cluster).runKubeadmConfig),
		},
		{
			Name:  "kubeadm-init",
			Short: "a cluster kubeadm bootstraps: kubeadm init inside node 0 (all its phases; its output with -v 1; the kubelet started through devk's systemctl in the node); one that did not finish is kubeadm reset first",
			If:    KubeadmOnly(self),
			Needs: []string{"kubeadm-config"},
			IO: func(c *Cluster) ([]string, []string) {
				n := c.FirstNode().Files
				return []string{n.KubeadmConfig()}, []string{n.PKI(), n.Manifests(), n.Kubeconfig("admin"), n.KubeletRoot(), n.Etcd(), n.KubeadmDone(), "the cluster's objects (kubeadm's upload-config, bootstrap-token, addons)"}
			},
			Run: phase.Method((*Cluster).runKubeadmInit),
		},
		{Name: "certs", Short: "kubeadm's certificate set (reused while valid)", If: devkOnly(self), Children: certPhases()},
		{Name: "kubeconfig", Short: "kubeconfigs for admin, super-admin, controller-manager, scheduler, kubelet", If: devkOnly(self), Children: kubeconfigPhases()},
		phase.If(manifestPhase(StaticPods[0], "etcd"), devkOnly(self)),
		{Name: "control-plane", Short: "static pod manifests of the control plane, images by digest", If: devkOnly(self), Children: controlPlane},
		{
			Name:  "kubelet-start",
			If:    devkOnly(self),
			Short: "write the kubelet's config and start it as a supervised process (pid file, log file)",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.FirstNode().Files.Kubeconfig("kubelet")}, []string{c.FirstNode().Files.KubeletBinary(), c.FirstNode().Files.KubeletConfig(), c.FirstNode().Files.PIDFile("kubelet"), c.FirstNode().Files.LogFile("kubelet")}
			},
			Run: phase.Method((*Cluster).runKubeletStart),
		},
		{
			Name:  "pull",
			If:    devkOnly(self),
			Short: "pull the node's images (control plane, pause, addons) into its containerd, all at once, while the kubelet starts: the addons' are there when their pods are scheduled",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.Files.ConfigFile() + " (images)"}, []string{c.FirstNode().Files.ContainerdSocket() + " (images)"}
			},
			Run: phase.Method((*Cluster).runPull),
		},
		{
			Name:  "wait-control-plane",
			If:    devkOnly(self),
			Short: "wait for etcd, apiserver /readyz, controller-manager, scheduler and node Ready",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.Config.APIServerURL() + "/readyz", c.FirstNode().Files.Logs()}, nil
			},
			Run: phase.Method((*Cluster).runWait),
		},
		{
			Name:  "pod-network",
			Short: "record the node's pod subnet (Node spec.podCIDR, the one its CNI network uses) and route every node to every other node's pods",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{"node " + c.Config.FirstNode().Name + " spec.podCIDR"}, []string{c.Files.ConfigFile(), node.DescribeRoutes(c.Config.Network.Nodes)}
			},
			Run: phase.Method((*Cluster).runPodNetwork),
		},
		{
			Name:  "certs-expiry",
			If:    devkOnly(self),
			Short: "warn about node 0's certificates and kubeconfigs that expire within 30 days; with --renew-certs renew them all, restart what uses them and verify (devk certs renew all --node NODE0; behind HAProxy its API server is out of it meanwhile)",
			IO: func(c *Cluster) ([]string, []string) {
				if c.RenewCerts {
					w := []string{c.FirstNode().Files.PKI(), c.FirstNode().Files.Kubeconfig("admin") + " (and the other kubeconfigs)", "the control-plane pod sandboxes"}
					if c.Config.HA() {
						w = append(w, "the load balancer's server "+c.Config.FirstNode().Name+" (drained)")
					}
					return []string{c.FirstNode().Files.PKI()}, w
				}
				return []string{c.FirstNode().Files.PKI(), c.FirstNode().Files.Kubeconfig("admin") + " (and the other kubeconfigs)"}, nil
			},
			Run: phase.Method((*Cluster).runCertsExpiry),
		},
		{
			Name:  "upload-config",
			If:    devkOnly(self),
			Short: "store cluster.json in ConfigMap kube-system/devk-config; bind admin.conf's group to cluster-admin",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.Files.ConfigFile()}, []string{"configmap kube-system/" + bootstrap.ConfigMapName, "clusterrolebinding kubeadm:cluster-admins"}
			},
			Run: phase.Method((*Cluster).UploadConfig),
		},
		{
			Name:  "mark-control-plane",
			If:    devkOnly(self),
			Short: "label the node control-plane; no NoSchedule taint on this single node (kind's way) unless --keep-taint",
			IO: func(c *Cluster) ([]string, []string) {
				return nil, []string{"node " + c.Config.FirstNode().Name}
			},
			Run: phase.Method((*Cluster).runMarkControlPlane),
		},
		{
			Name:  "bootstrap-token",
			If:    devkOnly(self),
			Short: "a bootstrap token, its RBAC and the cluster-info ConfigMap, as kubeadm makes for joining",
			IO: func(c *Cluster) ([]string, []string) {
				return nil, []string{"secret kube-system/bootstrap-token-*", "configmap kube-public/cluster-info", c.Files.BootstrapToken()}
			},
			Run: phase.Method((*Cluster).runBootstrapToken),
		},
		{
			Name:  "kubelet-finalize",
			If:    devkOnly(self),
			Short: "move the kubelet's client credential to its rotating store and point kubelet.conf at it",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.FirstNode().Files.Kubeconfig("kubelet")}, []string{c.FirstNode().Files.KubeletClientCurrent(), c.FirstNode().Files.Kubeconfig("kubelet")}
			},
			Run: phase.Method((*Cluster).runKubeletFinalize),
		},
		{
			Name:  "kubeconfig-merge",
			Short: "add context devk-NAME to your kubeconfig ($KUBECONFIG or ~/.kube/config)",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.FirstNode().Files.Kubeconfig("admin")}, []string{c.UserKubeconfigFile()}
			},
			Run: phase.Method((*Cluster).MergeUserKubeconfig),
		},
		{
			Name:  "nodes",
			Short: "join workers (kubeadm's join: token discovery, TLS bootstrap) until the cluster has --nodes; start again those joined before",
			If:    nodesPhaseIf,
			IO: func(c *Cluster) ([]string, []string) {
				var outs []string
				for _, n := range c.nodesToJoin() {
					outs = append(outs, n.Role+" node "+n.Name+" (netns "+layout.NetNSName(n.Name)+", "+filepath.Join(c.Files.NodesDir(), n.Name)+")")
				}
				return []string{c.Files.BootstrapToken(), c.FirstNode().Files.KubeletBinary()}, append(outs, c.Files.ConfigFile())
			},
			Run: phase.Method((*Cluster).runNodes),
		},
		// Last: the addons are what a cluster needs to run pods, not to
		// be used, so a failure here leaves the user's context in place.
		{
			Name:     "addon",
			Short:    "kube-proxy and CoreDNS as kubeadm's addon phase makes them (CoreDNS forwards nothing beyond the cluster domain), then wait for both",
			Children: addonPhases(),
		},
		{
			Name:  "kubectl",
			Short: "install the tree's kubectl in devk's bin dir: built (incrementally) beside the phases since the images phase's compile, waited for here",
			If: func(c *Cluster) (bool, string) {
				if c.ImagesFrom != "" {
					return false, "images from a registry (--images-from): no build of the tree"
				}
				return true, ""
			},
			IO:  func(c *Cluster) ([]string, []string) { return nil, []string{c.KubectlPath()} },
			Run: phase.Method((*Cluster).runKubectl),
		},
	}
}

func manifestPhase(sp StaticPod, name string) *phase.Phase[*Cluster] {
	return &phase.Phase[*Cluster]{
		Name:  name,
		Short: "static pod manifest " + sp.Name + ".yaml",
		IO: func(c *Cluster) ([]string, []string) {
			writes := []string{c.FirstNode().Files.ManifestPath(sp.Name)}
			if sp.Name == "kube-apiserver" && c.Config.Spec.Audit.On() {
				writes = append([]string{c.FirstNode().Files.AuditPolicy()}, writes...)
			}
			return []string{c.Files.ConfigFile() + " (images)", c.FirstNode().Files.PKI()}, writes
		},
		Run: func(ctx context.Context, c *Cluster) (phase.Outcome, error) {
			return c.writeManifest(ctx, c.FirstNode(), sp)
		},
	}
}

// DownPhases are `devk down`: stop what up started, remove what it made.
func DownPhases() []*phase.Phase[*Cluster] {
	p := func(name, short string, f func(*Cluster, context.Context) (phase.Outcome, error)) *phase.Phase[*Cluster] {
		return &phase.Phase[*Cluster]{Name: name, Short: short, Run: phase.Method(f)}
	}
	return []*phase.Phase[*Cluster]{
		p("kwok", "stop kwok, which fakes the cluster's fake nodes, if it runs", (*Cluster).downKwok),
		p("kubelet", "stop the kubelet (so it restarts nothing)", (*Cluster).downKubelet),
		p("pods", "stop and remove the cluster's pod sandboxes and containers through CRI", (*Cluster).downPods),
		p("runtime", "stop the private containerd and any shim left behind", (*Cluster).downRuntime),
		p("load-balancer", "stop HAProxy (a cluster with more than one control-plane node)", (*Cluster).downLoadBalancer),
		p("registry", "stop the cluster's registry forwarders, and the embedded registry if devk started it and no other cluster uses it", (*Cluster).downRegistry),
		p("mounts", "end each node's mount namespace (its pods' volumes go with it) and unmount everything under the cluster directory", (*Cluster).downMounts),
		p("cgroups", "remove the kubepods and k8s.io cgroups (killing anything left in them)", (*Cluster).downCgroups),
		p("network", "stop anything left in the node's network namespace, delete it (its veth goes with it), devk's FORWARD rule (up --allow-bridge-forward) and devk's bridge on the host", (*Cluster).downNetwork),
		p("kubeconfig", "remove context devk-NAME from your kubeconfig", (*Cluster).downKubeconfig),
		phase.Needs(p("files", "remove the cluster directory (--keep-data keeps pki, etcd and cluster.json); refuses while anything is mounted beneath it or the kubelet or containerd runs", (*Cluster).downFiles), "mounts", "kubelet", "runtime"),
	}
}

// lock takes the cluster's lock and every node's (nodelock.AcquireCluster)
// for the whole of an up, a down, a node add or a node remove: each of
// them changes the set of nodes or more than one node, so no other job
// of the cluster (and no swap on any of its nodes) runs meanwhile.
func (c *Cluster) lock() (func(), error) {
	s, err := nodelock.AcquireCluster(c.FirstNode().Files.Dir, c.NodeManifests(), nodelock.Command())
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.Config.Name, err)
	}
	c.locks = s
	return func() {
		c.locks = nil
		s.Release()
	}, nil
}

// Lock takes what lock takes, for a command that changes the cluster's
// nodes outside up's and down's jobs (`devk certs renew`); the func it
// returns lets go.
func (c *Cluster) Lock() (func(), error) { return c.lock() }

// NodeManifests are the manifests dirs (the nodes' lock keys) of every
// node the cluster has, or is being given.
func (c *Cluster) NodeManifests() []string {
	var out []string
	for _, n := range c.Config.Network.Nodes {
		if p, err := c.Files.Node(c.Config, n.Name); err == nil {
			out = append(out, p.Manifests())
		}
	}
	return out
}

// lockNode takes the lock of a node the job adds (up's nodes phase),
// before it records it; the job holds the cluster's lock already.
func (c *Cluster) lockNode(n Node) error {
	if c.locks == nil {
		return nil // a phase run without the job's locks: a unit test
	}
	if err := c.locks.AddNode(n.Files.Manifests()); err != nil {
		return fmt.Errorf("cluster %s: node %s: %w", c.Config.Name, n.Name(), err)
	}
	return nil
}

// RunJob runs a job's phases as up, down, node add and node remove do:
// a dry run at once (it changes nothing: no root, no lock); a real run
// as root, holding the cluster's lock throughout, reporting through the
// cluster's reporter, its failpoints named job/<path>. after, when set,
// runs once the phases did, still under the lock.
func RunJob[S any](ctx context.Context, c *Cluster, verb, job string, phases []*phase.Phase[S], s S, popts phase.Options, after func(phase.Result, error)) (phase.Result, error) {
	if popts.DryRun {
		return phase.Run(ctx, phases, s, popts)
	}
	if err := needRoot(verb); err != nil {
		return phase.Result{}, err
	}
	unlock, err := c.lock()
	if err != nil {
		return phase.Result{}, err
	}
	defer unlock()
	popts.Reporter, popts.Job = c.Reporter, job
	res, err := phase.Run(ctx, phases, s, popts)
	if after != nil {
		after(res, err)
	}
	return res, err
}

// Up brings the cluster up (or resumes it, or confirms it is up).
func Up(ctx context.Context, o Options, popts phase.Options) (*Cluster, phase.Result, error) {
	c, err := Open(o)
	if err != nil {
		return nil, phase.Result{}, err
	}
	res, err := RunJob(ctx, c, "up", "up", UpPhases(), c, popts, func(res phase.Result, _ error) {
		c.stopKubectl()
		c.recordRun(res)
		if !c.Exists() {
			// Nothing was made (preflight refused): leave no trace either.
			os.Remove(filepath.Dir(c.FirstNode().Files.Dir))
		}
	})
	return c, res, err
}

// Down tears the cluster down.
func Down(ctx context.Context, o Options, popts phase.Options) (*Cluster, phase.Result, error) {
	c, err := Open(o)
	if err != nil {
		return nil, phase.Result{}, err
	}
	if !popts.DryRun {
		if _, err := os.Stat(c.FirstNode().Files.Dir); err != nil {
			if err := needRoot("down"); err != nil {
				return c, phase.Result{}, err
			}
			return c, phase.Result{}, c.noCluster()
		}
	}
	res, err := RunJob(ctx, c, "down", "down", DownPhases(), c, popts, func(res phase.Result, err error) {
		if err != nil || c.KeepData {
			c.recordRun(res)
		}
	})
	if _, serr := os.Stat(c.FirstNode().Files.Dir); !popts.DryRun && os.IsNotExist(serr) {
		os.Remove(filepath.Dir(c.FirstNode().Files.Dir)) // the clusters dir, if it is empty now
	}
	return c, res, err
}

// noCluster is the error of a command on a cluster that does not exist.
func (c *Cluster) noCluster() error { return layout.NoCluster(c.Home, c.Config.Name) }

// recordRun records the run's phase times in cluster.json; a run its
// preflight refused leaves the rest as it was (not a refused file's spec).
func (c *Cluster) recordRun(res phase.Result) {
	if slices.ContainsFunc(res.Timings, func(t phase.Timing) bool { return t.Path == "preflight" && t.Failed }) {
		disk, err := layout.ReadConfig(c.Files.ConfigFile())
		if err != nil {
			return
		}
		c.Config = disk
	} else if _, err := os.Stat(c.Files.ConfigFile()); err != nil {
		return
	}
	c.Config.LastRun = PhaseTimings(res)
	_ = c.SaveConfig()
}

// PhaseTimings are res's phases as cluster.json and the jobs' -o json
// results list them.
func PhaseTimings(res phase.Result) []layout.PhaseTiming {
	var out []layout.PhaseTiming
	for _, t := range res.Timings {
		out = append(out, layout.PhaseTiming{Phase: t.Path, Seconds: t.Duration.Seconds(), Skipped: t.Skipped, Failed: t.Failed, Changed: t.Changed})
	}
	return out
}

// needRoot refuses early, before anything is written, when not root.
func needRoot(verb string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("devk %s needs root: it runs containerd and the kubelet, mounts and cgroups; run it as root (sudo -E devk %s)", verb, verb)
	}
	return nil
}
