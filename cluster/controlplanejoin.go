package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/cluster/internal/etcdmember"
	"github.com/devk/devk/cluster/internal/joinnode"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/join/certshare"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// How long a control-plane join waits, and how often it looks.
const (
	// etcdJoinTimeout bounds the wait for the new etcd member to start
	// and catch up with the leader (its promotion), and for the node's
	// control plane to be ready.
	etcdJoinTimeout = 3 * time.Minute
	// leaveIdleWait bounds the wait for a leaving API server's
	// connections through HAProxy to end: short requests end in it;
	// watches (every kubelet's, kube-proxy's) end only when the server
	// stops, and their clients watch again through another.
	leaveIdleWait = 5 * time.Second
)

// nodeControlPlaneKubeconfigs are the kubeconfigs a control-plane node
// gets besides its kubelet's (which TLS bootstrap gives it), as kubeadm's
// join writes them.
var nodeControlPlaneKubeconfigs = []string{"admin", "controller-manager", "scheduler"}

// BehindLoadBalancer runs a join or remove phase only for a control-plane
// node of a cluster with a load balancer.
func BehindLoadBalancer(j *NodeJob) (bool, string) {
	if ok, why := IsControlPlane(j); !ok {
		return ok, why
	}
	return haIf(j.Cluster)
}

// IsControlPlane runs a join phase only for a control-plane node.
func IsControlPlane(j *NodeJob) (bool, string) {
	if !j.Node.Net.IsControlPlane() {
		return false, "a worker"
	}
	return true, ""
}

// controlPlaneJoinPhases are kubeadm's control-plane-prepare phases: the
// shared certificates downloaded, the node's own certificates and
// kubeconfigs.
func controlPlaneJoinPhases() []*phase.Phase[*NodeJob] {
	return []*phase.Phase[*NodeJob]{
		{
			Name:  "download-certs",
			Short: "kubeadm's upload-certs on the cluster (the shared CAs and keys encrypted in Secret kube-system/kubeadm-certs under a new certificate key, owned by a 2 h token), then download-certs with the bootstrap token into the node's pki",
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{j.Cluster.caDir() + " (ca, front-proxy-ca, etcd/ca, sa)"}, []string{"secret kube-system/" + certshare.SecretName, j.Node.Files.PKI()}
			},
			Run: phase.Method((*NodeJob).runDownloadCerts),
		},
		{
			Name:  "certs",
			Short: "the node's own certificates, signed by the downloaded CAs: its API server's (its address and the load balancer's in the SANs), etcd server and peer, the clients'",
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{j.Node.Files.PKI() + " (the CAs)"}, []string{j.Node.Files.PKI()}
			},
			Run: phase.Method((*NodeJob).runNodeCerts),
		},
		{
			Name:  "kubeconfig",
			Short: "the node's admin, controller-manager and scheduler kubeconfigs, naming the control-plane endpoint",
			IO: func(j *NodeJob) ([]string, []string) {
				var outs []string
				for _, k := range nodeControlPlaneKubeconfigs {
					outs = append(outs, j.Node.Files.Kubeconfig(k))
				}
				return []string{j.Node.Files.PKI() + "/ca.key"}, outs
			},
			Run: phase.Method((*NodeJob).runNodeKubeconfigs),
		},
	}
}

// runDownloadCerts is kubeadm's upload-certs then download-certs: devk
// is on both sides of the join, so it uploads with the cluster's admin
// credential and a certificate key of this join only, then downloads as
// the joining node does, with the bootstrap token alone.
func (j *NodeJob) runDownloadCerts(ctx context.Context) (phase.Outcome, error) {
	if certshare.Shared(j.Cluster.caDir(), j.Node.Files.PKI()) {
		// A join resumed (or up again) after the download: no new key,
		// token and Secret for files the node has already.
		return phase.Unchanged("the node has the shared certificates already"), nil
	}
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	written, err := joinnode.ShareCerts(ctx, cs, j.Cluster.caDir(), j.Node.Files.PKI(), j.Node.Files.Kubeconfig(kubeletconfig.BootstrapKubeconfig), apiRequestTimeout)
	if err != nil {
		return phase.Done, err
	}
	if len(written) == 0 {
		return phase.Unchanged("the shared certificates were there already"), nil
	}
	return phase.Changed("%d files into %s", len(written), j.Node.Files.PKI()), nil
}

// runNodeCerts issues the node's own certificates from the CAs it
// downloaded (the CAs themselves are reused, never made here).
func (j *NodeJob) runNodeCerts(ctx context.Context) (phase.Outcome, error) {
	v, n := j.Cluster, j.Node
	var made []string
	for _, s := range pki.Specs(pki.Config{}) {
		if s.IsCA() {
			if err := pki.Check(n.Files.PKI(), s, time.Now()); err != nil {
				return phase.Done, fmt.Errorf("the downloaded CA %s: %w (run the download-certs phase again)", s.Name, err)
			}
			continue
		}
		out, err := v.ensureCert(n, s.Name)
		if err != nil {
			return phase.Done, err
		}
		if out.Changed {
			made = append(made, s.Name)
		}
	}
	if len(made) == 0 {
		return phase.Unchanged("reused"), nil
	}
	return phase.Changed("issued %s", strings.Join(made, ", ")), nil
}

func (j *NodeJob) runNodeKubeconfigs(ctx context.Context) (phase.Outcome, error) {
	v, n := j.Cluster, j.Node
	var made []string
	for _, k := range nodeControlPlaneKubeconfigs {
		out, err := v.ensureKubeconfig(n, k)
		if err != nil {
			return phase.Done, err
		}
		if out.Changed {
			made = append(made, k)
		}
	}
	if len(made) == 0 {
		return phase.Unchanged("reused"), nil
	}
	return phase.Changed("wrote %s", strings.Join(made, ", ")), nil
}

// etcdClient connects to the etcd members of the cluster's other
// control-plane nodes with the etcd client certificate in pkiDir: a
// joining node's own (as kubeadm's join talks to the existing members),
// or, for a removal, node 0's (the leaving node's files may be gone
// already: a removal killed after its files phase).
func (j *NodeJob) etcdClient(ctx context.Context, pkiDir string) (*etcdwatch.Client, error) {
	var eps []string
	for _, n := range j.Cluster.Config.ControlPlanes() {
		if n.Name != j.Node.Name() && !n.Joining && !n.Leaving {
			eps = append(eps, controlplane.EtcdClientURL(j.Cluster.Config, n.IP))
		}
	}
	return etcdmember.Connect(ctx, eps, pkiDir, j.Cluster.EtcdCommandTimeout)
}

// PeerURL is node n's etcd peer URL.
func (c *Cluster) PeerURL(n Node) string { return controlplane.EtcdPeerURL(c.Config, n.IP()) }

// runEtcdJoin is kubeadm's etcd join: the node's member added to the
// cluster as a learner (it does not count for quorum, so a member that
// never starts costs the cluster nothing), its static pod with
// --initial-cluster-state=existing, and once it has caught up with the
// leader its promotion to a voting member. A join resumed after any step
// finds its member by its peer URL and goes on from there.
func (j *NodeJob) runEtcdJoin(ctx context.Context) (phase.Outcome, error) {
	cli, err := j.etcdClient(ctx, j.Node.Files.PKI())
	if err != nil {
		return phase.Done, fmt.Errorf("the cluster's etcd: %w", err)
	}
	defer cli.Close()
	peer := j.Cluster.PeerURL(j.Node)
	ms, self, added, err := etcdmember.Ensure(ctx, cli, peer)
	if err != nil {
		return phase.Done, err
	}
	v, n := j.Cluster, j.Node
	in := controlplane.ManifestInput{EtcdInitialCluster: etcdmember.InitialCluster(ms, self, j.Node.Name())}
	if old := controlplane.InstalledPod(n.Files.ManifestPath("etcd")); old != nil {
		// etcd reads --initial-cluster once, on its first start: keep
		// what it started with, so that a later run rewrites nothing.
		if ic := staticpod.Flags(old, "etcd")["initial-cluster"]; ic != "" {
			in.EtcdInitialCluster = ic
		}
	}
	wrote, err := v.writeManifestWith(ctx, n, StaticPods[0], in)
	if err != nil {
		return phase.Done, err
	}
	notStarted := func() string { return "the member has not started (see " + v.containerLog(n, "etcd") + ")" }
	if err := etcdmember.WaitVoting(ctx, cli, peer, j.Node.Name(), notStarted, etcdJoinTimeout); err != nil {
		return phase.Done, err
	}
	members := len(ms)
	switch {
	case added:
		return phase.Changed("member %s added as a learner, started, promoted (%d members)", peer, members), nil
	case wrote.Changed:
		return phase.Changed("member %s: manifest written, promoted (%d members)", peer, members), nil
	}
	return phase.Unchanged("member %s, voting (%d members)", peer, members), nil
}

// RemoveEtcdMember removes node n's member from the cluster's etcd
// through the other control-plane nodes' members (node remove of a
// control-plane node); it reports whether there was one.
func (j *NodeJob) RemoveEtcdMember(ctx context.Context) (bool, error) {
	cli, err := j.etcdClient(ctx, j.Cluster.caDir())
	if err != nil {
		return false, fmt.Errorf("the cluster's etcd: %w", err)
	}
	defer cli.Close()
	return etcdmember.Remove(ctx, cli, j.Cluster.PeerURL(j.Node))
}

// runNodeControlPlane writes the node's API server, controller-manager
// and scheduler manifests (its own address, its own etcd member) and
// waits until they are healthy on the node's address.
func (j *NodeJob) runNodeControlPlane(ctx context.Context) (phase.Outcome, error) {
	v, n := j.Cluster, j.Node
	var wrote []string
	for _, sp := range StaticPods[1:] {
		out, err := v.writeManifest(ctx, n, sp)
		if err != nil {
			return phase.Done, err
		}
		if out.Changed {
			wrote = append(wrote, sp.Component)
		}
	}
	took, err := v.waitStaticPods(ctx, n, etcdJoinTimeout)
	if err != nil {
		return phase.Done, err
	}
	out := phase.Unchanged("%s", took)
	if len(wrote) > 0 {
		out = phase.Changed("wrote %s; %s", strings.Join(wrote, ", "), took)
	}
	return out, nil
}

// runJoinLoadBalancer puts the node's API server behind the load
// balancer (HAProxy reloaded with it) and waits until HAProxy's checks
// pass on it.
func (j *NodeJob) runJoinLoadBalancer(ctx context.Context) (phase.Outcome, error) {
	out, err := j.Cluster.ConfigureLoadBalancer(ctx)
	if err != nil {
		return out, err
	}
	if err := j.Cluster.loadBalancer().API().WaitAPIServerUp(ctx, j.Node.Name(), j.Cluster.FirstNode().Files.Logs()); err != nil {
		return phase.Done, fmt.Errorf("%w (%s)", err, j.Cluster.containerLog(j.Node, "kube-apiserver"))
	}
	out.Detail += "; " + j.Node.Name() + " UP"
	return out, nil
}

// checkJoinControlPlane refuses a control-plane join the cluster cannot
// take: one made without a load balancer.
func (c *Cluster) checkJoinControlPlane() error {
	if !c.Config.HA() {
		return c.noEndpoint("--control-plane")
	}
	return nil
}

// LeaveLoadBalancer takes a leaving control-plane node's API server
// out of HAProxy: drained (at most leaveIdleWait for its connections to
// end), then maint (no traffic at all); record then reloads HAProxy
// without it.
func (j *NodeJob) LeaveLoadBalancer(ctx context.Context) (phase.Outcome, error) {
	api := j.Cluster.loadBalancer().API()
	if _, err := api.Server(ctx, loadbalancer.BackendName, j.Node.Name()); err != nil {
		return phase.Unchanged("not in HAProxy (%v)", err), nil
	}
	if err := api.DrainAPIServer(ctx, j.Node.Name(), leaveIdleWait, j.Cluster.Reporter.Debugf); err != nil {
		return phase.Done, err
	}
	if err := api.SetState(ctx, loadbalancer.BackendName, j.Node.Name(), loadbalancer.Maint); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%s out of HAProxy", j.Node.Name()), nil
}
