// Package noderemove is `devk node remove`: a node devk joined (by
// `devk node add` or `devk up --nodes`) drained, what runs on it stopped,
// what devk made for it taken away, and the node forgotten, on the phase
// engine under the cluster's lock, resumable after a kill.
package noderemove

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/drain"
	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/cluster/internal/teardown"
	"github.com/devk/devk/phase"
)

// Phases are `devk node remove`: drain the node, stop what runs on it,
// take away what devk made for it, and forget it.
func Phases() []*phase.Phase[*cluster.NodeJob] {
	on := func(f func(context.Context, cluster.Node) (phase.Outcome, error)) func(context.Context, *cluster.NodeJob) (phase.Outcome, error) {
		return func(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) { return f(ctx, j.Node) }
	}
	return []*phase.Phase[*cluster.NodeJob]{
		{
			Name:  "leaving",
			Short: "record the node in cluster.json as leaving: from here on up and node add leave it alone, and node remove again finishes it",
			IO: func(j *cluster.NodeJob) ([]string, []string) {
				return nil, []string{j.Cluster.Files.ConfigFile()}
			},
			Run: runMarkLeaving,
		},
		{
			Name:  "drain",
			Short: "cordon the node and evict its pods (not DaemonSet pods) through the API, honouring PodDisruptionBudgets; wait for them to go",
			IO: func(j *cluster.NodeJob) ([]string, []string) {
				return []string{"pods on node " + j.Node.Name()}, []string{"node " + j.Node.Name() + " (unschedulable)", "evictions"}
			},
			Run: runDrain,
		},
		{
			Name:  "load-balancer",
			Short: "a control-plane node: take its API server out of HAProxy (no new connections), wait for those it has to end",
			If:    cluster.BehindLoadBalancer,
			Run:   phase.Method((*cluster.NodeJob).LeaveLoadBalancer),
		},
		{
			Name:  "kubeadm-reset",
			Short: "a cluster kubeadm bootstraps: kubeadm reset -f inside the node, as a kubeadm user removes one (a control plane's etcd member goes with it)",
			If:    cluster.KubeadmOnly(cluster.JobCluster),
			Run: func(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
				return j.Cluster.KubeadmRunner(j.Node).Reset(ctx)
			},
		},
		{
			Name:  "etcd",
			Short: "a control-plane node: remove its etcd member through the other members (its etcd then stops); after kubeadm's reset, a check that it went",
			If:    cluster.IsControlPlane,
			IO: func(j *cluster.NodeJob) ([]string, []string) {
				return []string{"the etcd members of the other control-plane nodes"}, []string{"etcd member " + j.Cluster.PeerURL(j.Node)}
			},
			Run: func(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
				removed, err := j.RemoveEtcdMember(ctx)
				if err != nil {
					return phase.Done, err
				}
				if !removed {
					return phase.Unchanged("no member %s", j.Cluster.PeerURL(j.Node)), nil
				}
				return phase.Changed("member %s removed", j.Cluster.PeerURL(j.Node)), nil
			},
		},
		{Name: "kubelet", Short: "stop the node's kubelet", Run: on(cluster.StopKubelet)},
		{
			Name:  "pods",
			Short: "stop and remove the node's pod sandboxes and containers through CRI",
			Run: func(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
				return j.Cluster.RemovePods(ctx, j.Node)
			},
		},
		{Name: "runtime", Short: "stop the node's containerd and any shim left behind", Run: on(cluster.StopRuntime)},
		{
			Name:  "mounts",
			Short: "end the node's mount namespace (the pods' volumes go with it) and unmount everything under the node's directory",
			Run:   func(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) { return j.Node.RemoveMounts(ctx) },
		},
		{
			Name:  "cgroups",
			Short: "remove the node's kubelet cgroup root (killing anything left in it)",
			IO: func(j *cluster.NodeJob) ([]string, []string) {
				return nil, []string{"cgroup " + j.Node.Net.CgroupRoot}
			},
			Run: on(func(ctx context.Context, n cluster.Node) (phase.Outcome, error) {
				return teardown.RemoveCgroupRoot(ctx, n.Net.CgroupRoot, node.LeftoverGrace)
			}),
		},
		{
			Name:  "network",
			Short: "delete the other nodes' routes to the node's pods, then the node's network namespace (its veth goes with it)",
			IO: func(j *cluster.NodeJob) ([]string, []string) {
				return nil, []string{"netns " + j.Node.Net.NetNSPath(), "veth " + j.Node.Net.HostVeth, "routes to " + cmp.Or(j.Node.Net.PodCIDR, "(none)")}
			},
			Run: func(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
				routes := node.UnroutePods(ctx, j.Cluster.Config.Network.Nodes, j.Node.Net)
				did, err := node.DeleteNetwork(ctx, j.Node.Net)
				if err != nil {
					return phase.Done, err
				}
				did = append(did, fmt.Sprintf("%d routes", routes))
				return phase.ChangedIf(len(did) > 1 || routes > 0, "deleted %s", strings.Join(did, ", ")), nil
			},
		},
		{
			Name:  "node-object",
			Short: "delete the Node object and the pods still bound to it (its DaemonSets')",
			Run:   runDeleteNode,
		},
		{
			Name:  "files",
			Short: "remove the node's directory; refuses while anything is mounted beneath it or its kubelet or containerd runs",
			IO: func(j *cluster.NodeJob) ([]string, []string) {
				return nil, []string{j.Node.Files.Dir}
			},
			Run: runRemoveNodeFiles,
			// Needs are paths from the root of this job.
			Needs: []string{"kubelet", "runtime", "mounts"},
		},
		{
			Name:  "record",
			Short: "take the node out of cluster.json and ConfigMap kube-system/devk-config",
			IO: func(j *cluster.NodeJob) ([]string, []string) {
				return nil, []string{j.Cluster.Files.ConfigFile(), "configmap kube-system/" + bootstrap.ConfigMapName}
			},
			Run: func(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
				if err := ctx.Err(); err != nil {
					return phase.Done, err // interrupted: remove again finishes it
				}
				if err := j.Cluster.Config.RemoveNode(j.Node.Name()); err != nil {
					return phase.Done, err
				}
				if err := j.Cluster.SaveConfig(); err != nil {
					return phase.Done, err
				}
				if _, err := j.Cluster.UploadConfig(ctx); err != nil {
					return phase.Done, err
				}
				if j.Node.Net.KubeProxyImage != "" { // its own kube-proxy's DaemonSet goes
					if err := j.Cluster.ApplyKubeProxyAgain(ctx); err != nil {
						return phase.Done, err
					}
				}
				if j.Cluster.Config.HA() {
					if _, err := j.Cluster.ConfigureLoadBalancer(ctx); err != nil { // HAProxy without the node
						return phase.Done, err
					}
				}
				return phase.Changed("%d nodes left", len(j.Cluster.Config.Network.Nodes)), nil
			},
		},
	}
}

// runMarkLeaving records, before anything is taken from the node, that
// it is being removed: a removal killed after its etcd phase must not
// have up join the node again (a new learner, and etcd restarted on the
// removed member's data).
func runMarkLeaving(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
	if j.Node.Net.Leaving {
		return phase.Unchanged("%s was being removed: finishing it", j.Node.Name()), nil
	}
	if err := ctx.Err(); err != nil {
		return phase.Done, err
	}
	j.Cluster.Config.SetLeaving(j.Node.Name())
	if err := j.Cluster.SaveConfig(); err != nil {
		return phase.Done, err
	}
	j.Node.Net.Leaving = true
	return phase.Changed("%s leaving", j.Node.Name()), nil
}

// Run removes a node that `devk node add` (or `devk up --nodes`) joined
// (`devk node remove`).
func Run(ctx context.Context, o cluster.NodeOptions, popts phase.Options) (*cluster.NodeJob, phase.Result, error) {
	j, err := cluster.OpenNodeJob(o, false)
	if err != nil {
		return nil, phase.Result{}, err
	}
	res, err := cluster.RunJob(ctx, j.Cluster, "node remove", "node-remove", Phases(), j, popts, nil)
	return j, res, err
}

// runDrain drains the node (drain.Node).
func runDrain(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	return drain.Node(ctx, cs, j.Node.Name(), "devk up"+j.Cluster.NameFlag(), j.Cluster.Reporter)
}

// runDeleteNode deletes the Node and the pods still bound to it.
func runDeleteNode(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	return drain.DeleteNode(ctx, cs, j.Node.Name())
}

// runRemoveNodeFiles removes the node's directory, after the checks
// down's files phase makes for the cluster's.
func runRemoveNodeFiles(ctx context.Context, j *cluster.NodeJob) (phase.Outcome, error) {
	return teardown.RemoveNodeDir(j.Node.Files.Dir, j.Cluster.Files.NodesDir(), cluster.NodeProcs(j.Node),
		"run all of `devk node remove"+j.Cluster.NameFlag()+" "+j.Node.Name()+"`")
}
