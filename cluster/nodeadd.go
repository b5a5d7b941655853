package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/cluster/internal/containerd"
	"github.com/devk/devk/cluster/internal/joinnode"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/cluster/internal/preflight"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/join"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// NodeOptions are what `devk node add` and `devk node remove` are told.
type NodeOptions struct {
	// Options name the cluster (Name, Home) and carry the reporter.
	Options
	// Node is the node's name; for add, empty means the next free name
	// in kind's style (<cluster>-worker, <cluster>-worker2, …).
	Node string
	// ControlPlane, for add, makes the node a control-plane node.
	ControlPlane bool
	// Token, for add, is the bootstrap token to join with (kubeadm's
	// --token); empty means the cluster's own, renewed first when it
	// expires within bootstrap.TokenMinLeft.
	Token string
	// CAHashes, for add, pin the cluster's CA (kubeadm's
	// --discovery-token-ca-cert-hash, sha256:<hex>); empty means the hash
	// of the cluster's own CA.
	CAHashes []string
	// DiscoveryTimeout, for add, bounds discovery; zero means
	// join.DefaultTimeout.
	DiscoveryTimeout time.Duration
}

// NodeJob is the state the join (node add) and node remove phases share:
// the cluster and the one node they act on.
type NodeJob struct {
	Cluster *Cluster
	// join is what add was told about discovery (token, pins, timeout).
	join NodeOptions
	// Node is the node joining or leaving.
	Node Node
	// resumed says the node is in cluster.json already: half joined by an
	// earlier add, or registered by this one.
	resumed bool
	// kubeletStarted is when this run started the node's kubelet.
	kubeletStarted time.Time
}

// JoinPhases are `devk node add`: kubeadm's join for a worker, on one
// machine. The node learns the cluster through the bootstrap token
// (discovery: cluster-info's signature checked, the CA pinned) and gets
// its kubelet's client certificate by TLS bootstrap (a CSR the
// controller-manager approves and signs), as a kubeadm node does.
func JoinPhases() []*phase.Phase[*NodeJob] {
	return []*phase.Phase[*NodeJob]{
		{
			Name:  "preflight",
			Short: "check root, the programs a node needs, a free name, and that the cluster's API server answers",
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{j.Cluster.Config.APIServerURL() + "/readyz", "PATH"}, nil
			},
			Run: phase.Method((*NodeJob).runJoinPreflight),
		},
		{
			Name:  "discovery",
			If:    devkOnly(JobCluster),
			Short: "read cluster-info with the bootstrap token: its JWS signature checked, the CA pinned by its public key's hash; write the node's CA and bootstrap kubeconfig",
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{j.Cluster.Files.BootstrapToken(), pki.CertPath(j.Cluster.caDir(), pki.CAName) + " (the pin)", "configmap kube-public/cluster-info"},
					[]string{pki.CertPath(j.Node.Files.PKI(), pki.CAName), j.Node.Files.Kubeconfig(kubeletconfig.BootstrapKubeconfig)}
			},
			Run: phase.Method((*NodeJob).runDiscovery),
		},
		{
			Name:  "register",
			Short: "record the node in cluster.json, as joining: from here on `devk node remove` or `devk down` takes away what the join made",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{j.Cluster.Files.ConfigFile()}
			},
			Run: func(ctx context.Context, j *NodeJob) (phase.Outcome, error) {
				if j.resumed {
					return phase.Unchanged("%s at %s recorded before", j.Node.Name(), j.Node.IP()), nil
				}
				if err := ctx.Err(); err != nil {
					return phase.Done, err
				}
				if err := j.Cluster.SaveConfig(); err != nil {
					return phase.Done, err
				}
				j.resumed = true
				return phase.Changed("%s at %s", j.Node.Name(), j.Node.IP()), nil
			},
		},
		{
			Name:  "network",
			Short: "the node's network namespace, its veth to devk's bridge, its address and sysctls",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{"netns " + j.Node.Net.NetNSPath() + " (node " + j.Node.IP() + ")", "veth " + j.Node.Net.HostVeth}
			},
			Run: func(ctx context.Context, j *NodeJob) (phase.Outcome, error) {
				ch, err := j.Cluster.wireBridge(ctx)
				if err != nil {
					return phase.Done, err
				}
				made, err := j.Node.Wire(ctx)
				return phase.ChangedIf(ch || made, "node %s at %s in netns %s", j.Node.Name(), j.Node.IP(), j.Node.Net.NetNS), err
			},
		},
		{
			Name:  "runtime",
			Short: "make the node's mount namespace (its own /var/lib/kubelet/device-plugins, /var/log/containers, /var/lib/cni, /run/containerd, /run/netns) and start its containerd in its network and mount namespaces (own config, root, state and socket; its CNI network comes once the node has a pod subnet)",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{j.Node.Files.MountNS(), j.Node.Files.ContainerdConfig(), j.Node.Files.ContainerdSocket(), j.Node.Files.PIDFile("containerd")}
			},
			Run: func(ctx context.Context, j *NodeJob) (phase.Outcome, error) {
				return j.Cluster.startRuntime(ctx, j.Node)
			},
		},
		{
			Name:  "kubeadm-join",
			Short: "a cluster kubeadm bootstraps: kubeadm join inside the node with a bootstrap token devk makes and the CA pinned (a control-plane node after node 0's kubeadm uploaded the shared certificates with a new key); one that did not finish is kubeadm reset first",
			If:    KubeadmOnly(JobCluster),
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{pki.CertPath(j.Cluster.caDir(), pki.CAName) + " (the pin)"}, []string{"secret kube-system/bootstrap-token-*", j.Node.Files.KubeadmBinary(), j.Node.Files.KubeadmConfig(), j.Node.Files.KubeletRoot(), j.Node.Files.KubeadmDone(), "node " + j.Node.Name()}
			},
			Run: phase.Method((*NodeJob).runKubeadmJoin),
		},
		{
			Name:     "control-plane-prepare",
			Short:    "a control-plane node: the cluster's shared certificates (kubeadm's upload-certs and download-certs), its own certificates and kubeconfigs",
			If:       phase.Both(IsControlPlane, devkOnly(JobCluster)),
			Children: controlPlaneJoinPhases(),
		},
		{
			Name:  "kubelet-start",
			Short: "start the node's kubelet with the bootstrap kubeconfig; wait for its CSR to be approved and signed and for its Node to register",
			If:    devkOnly(JobCluster),
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{j.Cluster.FirstNode().Files.KubeletBinary(), j.Node.Files.Kubeconfig(kubeletconfig.BootstrapKubeconfig)},
					[]string{j.Node.Files.KubeletBinary(), j.Node.Files.KubeletConfig(), j.Node.Files.Kubeconfig("kubelet"), j.Node.Files.PIDFile("kubelet"), "node " + j.Node.Name()}
			},
			Run: phase.Method((*NodeJob).runJoinKubelet),
		},
		{
			Name:  "etcd",
			Short: "a control-plane node: its etcd member added as a learner through the others, its static pod (--initial-cluster-state=existing), promoted once in sync",
			If:    phase.Both(IsControlPlane, devkOnly(JobCluster)),
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{"the etcd members of the other control-plane nodes"}, []string{"etcd member " + j.Cluster.PeerURL(j.Node), j.Node.Files.ManifestPath("etcd")}
			},
			Run: phase.Method((*NodeJob).runEtcdJoin),
		},
		{
			Name:  "control-plane",
			Short: "a control-plane node: its API server, controller-manager and scheduler static pods on its own address; wait until they are healthy",
			If:    phase.Both(IsControlPlane, devkOnly(JobCluster)),
			IO: func(j *NodeJob) ([]string, []string) {
				var outs []string
				for _, sp := range StaticPods[1:] {
					outs = append(outs, j.Node.Files.ManifestPath(sp.Name))
				}
				return []string{j.Cluster.Files.ConfigFile() + " (images)", j.Node.Files.PKI()}, outs
			},
			Run: phase.Method((*NodeJob).runNodeControlPlane),
		},
		{
			Name:  "pod-network",
			Short: "wait for the node's pod subnet (Node spec.podCIDR); write its CNI network and its pod rules (masquerade beyond the pod network; before kube-proxy, the kubernetes Service to the API server and other service addresses refused); route every node to every other node's pods",
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{"node " + j.Node.Name() + " spec.podCIDR"}, []string{j.Node.ConflistPath(), "routes in every node's netns"}
			},
			Run: phase.Method((*NodeJob).runJoinPodNetwork),
		},
		{
			Name:  "load-balancer",
			Short: "a control-plane node: HAProxy reloaded with its API server; wait until HAProxy's /readyz checks pass on it",
			If:    BehindLoadBalancer,
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{j.Cluster.Config.NodeAPIServerURL(j.Node.IP()) + "/readyz"}, []string{j.Cluster.loadBalancer().File}
			},
			Run: phase.Method((*NodeJob).runJoinLoadBalancer),
		},
		{
			Name:  "mark-control-plane",
			Short: "a control-plane node: label it control-plane (tainted only with --keep-taint, as node 0)",
			If:    phase.Both(IsControlPlane, devkOnly(JobCluster)),
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{"node " + j.Node.Name()}
			},
			Run: func(ctx context.Context, j *NodeJob) (phase.Outcome, error) {
				return j.Cluster.markControlPlane(ctx, j.Node)
			},
		},
		{
			Name:  "wait",
			Short: "wait for the node to be Ready and kube-proxy to run on it",
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{"node " + j.Node.Name(), "daemonset kube-system/kube-proxy"}, nil
			},
			Run: phase.Method((*NodeJob).runJoinWait),
		},
		{
			Name:  "record",
			Short: "mark the node joined in cluster.json and ConfigMap kube-system/devk-config",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{j.Cluster.Files.ConfigFile(), "configmap kube-system/" + bootstrap.ConfigMapName}
			},
			Run: func(ctx context.Context, j *NodeJob) (phase.Outcome, error) {
				if err := ctx.Err(); err != nil {
					return phase.Done, err // interrupted: the node stays joining, and add resumes it
				}
				if n, _, err := j.Cluster.Config.FindNode(j.Node.Name()); err == nil && !n.Joining {
					return phase.Unchanged("%s joined before (%d nodes)", j.Node.Name(), len(j.Cluster.Config.Network.Nodes)), nil
				}
				j.Cluster.setJoining(j.Node.Name(), false)
				if err := j.Cluster.SaveConfig(); err != nil {
					return phase.Done, err
				}
				if !j.Cluster.Config.Spec.Kubeadm() {
					if _, err := j.Cluster.UploadConfig(ctx); err != nil {
						return phase.Done, err
					}
				}
				return phase.Changed("%s joined (%d nodes)", j.Node.Name(), len(j.Cluster.Config.Network.Nodes)), nil
			},
		},
	}
}

// Registered says the node is in cluster.json: a join that failed after
// it can be resumed or removed; one that failed before changed nothing.
func (j *NodeJob) Registered() bool { return j.resumed }

// setJoining marks node name as being joined (or not any more).
func (c *Cluster) setJoining(name string, joining bool) {
	for i := range c.Config.Network.Nodes {
		if c.Config.Network.Nodes[i].Name == name {
			c.Config.Network.Nodes[i].Joining = joining
		}
	}
}

// OpenNodeJob opens the cluster (it must exist) and finds or adds the
// node: for add, a new node (or one an earlier add left half joined,
// which it resumes); for remove, an existing one.
func OpenNodeJob(o NodeOptions, add bool) (*NodeJob, error) {
	c, err := Open(o.Options)
	if err != nil {
		return nil, err
	}
	if !c.Exists() {
		return nil, c.noCluster()
	}
	if !add {
		if o.Node == "" {
			return nil, fmt.Errorf("name the node to remove; cluster %s has: %s", c.Config.Name, strings.Join(c.Config.NodeNames(), ", "))
		}
		if _, i, err := c.Config.FindNode(o.Node); err != nil {
			return nil, err
		} else if i == 0 {
			return nil, c.Config.RemoveNode(o.Node) // says why node 0 cannot go
		}
		n, err := c.nodeNamed(o.Node)
		return &NodeJob{Cluster: c, Node: n}, err
	}
	role := layout.RoleWorker
	if o.ControlPlane {
		if err := c.checkJoinControlPlane(); err != nil {
			return nil, err
		}
		role = layout.RoleControlPlane
	}
	name := o.Node
	if name == "" {
		name = c.Config.NextNodeName(role)
	}
	if n, _, err := c.Config.FindNode(name); err == nil && n.Leaving {
		return nil, fmt.Errorf("node %s of cluster %s was being removed: run `devk node remove%s %s` to finish, then add it again", name, c.Config.Name, c.nameFlag(), name)
	}
	if n, _, err := c.Config.FindNode(name); err == nil && !n.Joining {
		return nil, fmt.Errorf("cluster %s has a node %s already: choose another name, or leave it out for the next free one (`devk status` lists the nodes; `devk node remove%s %s` removes it)", c.Config.Name, name, c.nameFlag(), name)
	}
	return c.joinJob(name, o)
}

// joinJob is the join of worker name: one cluster.json has already
// (half joined, or joined: its phases start again what does not run) is
// resumed; any other is added to the config as joining, and register
// saves it.
func (c *Cluster) joinJob(name string, o NodeOptions) (*NodeJob, error) {
	j := &NodeJob{Cluster: c, join: o}
	if _, _, err := c.Config.FindNode(name); err == nil {
		j.resumed = true
	} else {
		role := layout.RoleWorker
		if o.ControlPlane {
			role = layout.RoleControlPlane
		}
		if _, err := c.Config.AddNode(name, role, layout.Configs(c.Home, c.Config.Name)); err != nil {
			return nil, err
		}
		c.setJoining(name, true)
	}
	var err error
	j.Node, err = c.nodeNamed(name)
	return j, err
}

// AddNode joins a worker node to a running cluster (`devk node add`).
func AddNode(ctx context.Context, o NodeOptions, popts phase.Options) (*NodeJob, phase.Result, error) {
	j, err := OpenNodeJob(o, true)
	if err != nil {
		return nil, phase.Result{}, err
	}
	res, err := RunJob(ctx, j.Cluster, "node add", "node-add", JoinPhases(), j, popts, nil)
	return j, res, err
}

func (j *NodeJob) runJoinPreflight(ctx context.Context) (phase.Outcome, error) {
	in := preflight.JoinInput{Kubelet: j.Cluster.FirstNode().Files.KubeletBinary(), Net: j.Node.Net, New: !j.resumed, Socket: j.Node.Files.ContainerdSocket()}
	if in.New {
		in.Memory = node.MemoryProblem([]string{j.Node.Net.Role}, node.MemAvailable())
	}
	probs := preflight.Join(in, exec.LookPath, containerd.CNIBinDir())
	if len(probs) > 0 {
		return phase.Done, &PreflightError{Problems: probs}
	}
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return phase.Done, fmt.Errorf("the cluster's API server at %s is not ready (%v): run `devk up%s` first", j.Cluster.Config.APIServerURL(), err, j.Cluster.nameFlag())
	}
	if !j.resumed {
		if _, err := cs.CoreV1().Nodes().Get(ctx, j.Node.Name(), metav1.GetOptions{}); err == nil {
			return phase.Done, fmt.Errorf("the cluster has a Node %s already, which devk did not make: choose another name", j.Node.Name())
		}
	}
	verb := "joining"
	if j.resumed {
		verb = "resuming"
	}
	return phase.Unchanged("%s %s at %s", verb, j.Node.Name(), j.Node.IP()), nil
}

// joinEndpoint is where a joining node finds the API server: the
// control-plane endpoint (the load balancer), else node 0's address on
// devk's bridge.
func (c *Cluster) joinEndpoint() string {
	if c.Config.HA() {
		return c.Config.ControlPlaneEndpoint
	}
	return net.JoinHostPort(c.Config.FirstNode().IP, strconv.Itoa(c.Config.Ports.APIServer))
}

// runDiscovery is kubeadm's token discovery: the token devk up made, the
// CA pinned by the hash of the cluster CA's public key (what
// `kubeadm token create --print-join-command` prints as
// --discovery-token-ca-cert-hash).
func (j *NodeJob) runDiscovery(ctx context.Context) (phase.Outcome, error) {
	tok, err := j.joinToken(ctx)
	if err != nil {
		return phase.Done, err
	}
	pins, err := joinnode.Pins(j.join.CAHashes, pki.CertPath(j.Cluster.caDir(), pki.CAName))
	if err != nil {
		return phase.Done, err
	}
	changed, detail, err := joinnode.Discover(ctx, j.Cluster.joinEndpoint(), tok, pins, j.join.DiscoveryTimeout, j.Node.Files)
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(changed, "%s", detail), nil
}

// joinToken is the token the node joins with: --token, else the
// cluster's own, which up's bootstrap-token phase renews here first if it
// expires soon (a node added a day after up still joins).
func (j *NodeJob) joinToken(ctx context.Context) (join.Token, error) {
	if j.join.Token != "" {
		return join.ParseToken(j.join.Token)
	}
	if _, err := j.Cluster.runBootstrapToken(ctx); err != nil {
		return join.Token{}, fmt.Errorf("the cluster's bootstrap token: %w", err)
	}
	data, err := os.ReadFile(j.Cluster.Files.BootstrapToken())
	if err != nil {
		return join.Token{}, fmt.Errorf("read the bootstrap token: %w (run `devk up%s phase bootstrap-token`)", err, j.Cluster.nameFlag())
	}
	tok, err := join.ParseToken(strings.TrimSpace(string(data)))
	if err != nil {
		return join.Token{}, fmt.Errorf("%s: %w (run `devk up%s phase bootstrap-token`)", j.Cluster.Files.BootstrapToken(), err, j.Cluster.nameFlag())
	}
	return tok, nil
}

func (j *NodeJob) runJoinKubelet(ctx context.Context) (phase.Outcome, error) {
	t0 := time.Now()
	src, err := j.Cluster.kubeletFor(ctx, j.Node, j.Cluster.FirstNode().Files.KubeletBinary())
	if err != nil {
		return phase.Done, err
	}
	out, err := j.Cluster.startKubelet(ctx, j.Node, src)
	if err != nil {
		return out, err
	}
	if out.Changed {
		j.kubeletStarted = t0
	}
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	if err := joinnode.WaitRegistered(ctx, cs, j.Node.Name(), j.Node.Files); err != nil {
		return phase.Done, err
	}
	return phase.Outcome{Detail: out.Detail + "; client certificate by TLS bootstrap, Node registered", Changed: out.Changed}, nil
}

func (j *NodeJob) runJoinPodNetwork(ctx context.Context) (phase.Outcome, error) {
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	cidr, err := j.Node.WaitPodCIDR(ctx, cs, j.Cluster.FirstNode().Files.PodLogs())
	if err != nil {
		return phase.Done, err
	}
	changed := j.Node.Net.PodCIDR != cidr
	j.Node.Net.PodCIDR = cidr
	j.Cluster.setPodCIDR(j.Node.Name(), cidr)
	if err := j.Cluster.SaveConfig(); err != nil {
		return phase.Done, err
	}
	w, err := j.Node.WriteConflist(cidr)
	if err != nil {
		return phase.Done, err
	}
	if err := j.Node.EnsurePodRules(ctx, cidr); err != nil {
		return phase.Done, err
	}
	routes, err := j.Cluster.routePods(ctx)
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(changed || w, "pods %s; %d routes between nodes", cidr, routes), nil
}

func (j *NodeJob) runJoinWait(ctx context.Context) (phase.Outcome, error) {
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	// kube-proxy runs on the node once its DaemonSet is there (a node
	// that up joins comes before the addons); nil: not waited for. A
	// node with a tree of its own runs that tree's.
	w := addonWorkload(addons.KubeProxy)
	if n, _, _ := j.Cluster.Config.FindNode(j.Node.Name()); n.KubeProxyImage != "" {
		w = addons.NodeKubeProxy(n.Name)
	}
	proxy, _ := addon.Get(ctx, cs, w)
	note := func(why string) {
		j.Cluster.Reporter.Progress(progress.StepOf(ctx), progress.Status{Note: "waiting: " + why})
	}
	if err := joinnode.WaitReady(ctx, cs, j.Node.Name(), j.Node.Files, j.kubeletStarted, proxy, note); err != nil {
		return phase.Done, err
	}
	if proxy != nil {
		return phase.Unchanged("node Ready, kube-proxy running"), nil
	}
	return phase.Unchanged("node Ready"), nil
}

// nodesPhaseIf says whether up's nodes phase has work: nodes besides
// node 0 to bring back, or more wanted.
func nodesPhaseIf(c *Cluster) (bool, string) {
	if len(c.Config.Network.Nodes) <= 1 && c.Nodes <= 1 && c.ControlPlanes <= 1 {
		return false, "a single-node cluster (--nodes N for more)"
	}
	return true, ""
}

// nodesToJoin are the nodes up's nodes phase joins: every node the
// cluster has besides node 0 (joined before: their runtime and kubelet
// are started again if they are not running), then new control-plane
// nodes until it has c.ControlPlanes, then new workers until it has
// c.Nodes, named as the config file names them, else kind's way.
func (c *Cluster) nodesToJoin() []config.Node {
	out, _ := c.nodesToJoinIn(c.Config) // Open checked (checkNodeCount)
	return out
}

// nodesToJoinIn is nodesToJoin for cfg, and why it falls short of
// c.Nodes, if it does (joinnode.ToJoin).
func (c *Cluster) nodesToJoinIn(cfg layout.Config) ([]config.Node, error) {
	return joinnode.ToJoin(cfg, c.fileNodes, c.ControlPlanes, c.Nodes)
}

// countFlags are the --nodes and --control-planes this run of up was
// given (" --nodes 4 --control-planes 3"): the nodes not yet recorded
// in cluster.json are joined only when they are asked for again.
func (c *Cluster) countFlags() string {
	s := ""
	if c.Nodes > 1 {
		s += fmt.Sprintf(" --nodes %d", c.Nodes)
	}
	if c.ControlPlanes > 1 {
		s += fmt.Sprintf(" --control-planes %d", c.ControlPlanes)
	}
	return s
}

// runNodes is up's nodes phase: the join phases (JoinPhases) for every
// node but node 0, each reported under nodes/<node>/.
func (c *Cluster) runNodes(ctx context.Context) (phase.Outcome, error) {
	var joined, resumed []string
	for _, want := range c.nodesToJoin() {
		name := want.Name
		if n, _, err := c.Config.FindNode(name); err == nil && !n.Joining {
			resumed = append(resumed, name)
		} else {
			joined = append(joined, name)
		}
		j, err := c.joinJob(name, NodeOptions{ControlPlane: want.Role == layout.RoleControlPlane})
		if err != nil {
			return phase.Done, err
		}
		if err := c.lockNode(j.Node); err != nil {
			return phase.Done, err
		}
		step := progress.StepOf(ctx) + "/" + name
		if _, err := phase.Run(ctx, JoinPhases(), j, phase.Options{Reporter: progress.Under(c.Reporter, step), Job: "up/nodes"}); err != nil {
			return phase.Done, fmt.Errorf("node %s: %w (`devk up%s%s` again resumes it; `devk node remove %s%s` removes it)", name, err, c.nameFlag(), c.countFlags(), name, c.nameFlag())
		}
	}
	var out phase.Outcome
	switch {
	case len(joined) == 0:
		out = phase.Unchanged("%d nodes; running: %s", len(c.Config.Network.Nodes), strings.Join(resumed, ", "))
	case len(resumed) == 0:
		out = phase.Changed("%d nodes; joined: %s", len(c.Config.Network.Nodes), strings.Join(joined, ", "))
	default:
		out = phase.Changed("%d nodes; joined: %s; running: %s", len(c.Config.Network.Nodes), strings.Join(joined, ", "), strings.Join(resumed, ", "))
	}
	// A node a killed `node remove` left is not started again (its etcd
	// member may be gone); removing it is the user's command to finish.
	if note := c.leavingNote(); note != "" {
		out.Detail += "; " + note
		c.Reporter.Infof("%s", note)
	}
	return out, nil
}

// leavingNote says which nodes a removal left half done, and what
// finishes them ("" when none).
func (c *Cluster) leavingNote() string {
	var notes []string
	for _, name := range c.Config.LeavingNodes() {
		notes = append(notes, fmt.Sprintf("node %s was being removed: run `devk node remove%s %s` to finish", name, c.nameFlag(), name))
	}
	return strings.Join(notes, "; ")
}
