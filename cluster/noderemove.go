package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// RemovePhases are `devk node remove`: drain the node, stop what runs on
// it, take away what devk made for it, and forget it.
func RemovePhases() []*phase.Phase[*NodeJob] {
	on := func(f func(context.Context, Node) (phase.Outcome, error)) func(context.Context, *NodeJob) (phase.Outcome, error) {
		return func(ctx context.Context, j *NodeJob) (phase.Outcome, error) { return f(ctx, j.Node) }
	}
	return []*phase.Phase[*NodeJob]{
		{
			Name:  "leaving",
			Short: "record the node in cluster.json as leaving: from here on up and node add leave it alone, and node remove again finishes it",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{j.Cluster.Files.ConfigFile()}
			},
			Run: phase.Method((*NodeJob).runMarkLeaving),
		},
		{
			Name:  "drain",
			Short: "cordon the node and evict its pods (not DaemonSet pods) through the API, honouring PodDisruptionBudgets; wait for them to go",
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{"pods on node " + j.Node.Name()}, []string{"node " + j.Node.Name() + " (unschedulable)", "evictions"}
			},
			Run: phase.Method((*NodeJob).runDrain),
		},
		{
			Name:  "load-balancer",
			Short: "a control-plane node: take its API server out of HAProxy (no new connections), wait for those it has to end",
			If:    behindLoadBalancer,
			Run:   phase.Method((*NodeJob).runLeaveLoadBalancer),
		},
		{
			Name:  "etcd",
			Short: "a control-plane node: remove its etcd member through the other members (its etcd then stops)",
			If:    isControlPlane,
			IO: func(j *NodeJob) ([]string, []string) {
				return []string{"the etcd members of the other control-plane nodes"}, []string{"etcd member " + j.Cluster.peerURL(j.Node)}
			},
			Run: func(ctx context.Context, j *NodeJob) (phase.Outcome, error) {
				removed, err := j.removeEtcdMember(ctx)
				if err != nil {
					return phase.Done, err
				}
				if !removed {
					return phase.Unchanged("no member %s", j.Cluster.peerURL(j.Node)), nil
				}
				return phase.Changed("member %s removed", j.Cluster.peerURL(j.Node)), nil
			},
		},
		{Name: "kubelet", Short: "stop the node's kubelet", Run: on(stopKubelet)},
		{
			Name:  "pods",
			Short: "stop and remove the node's pod sandboxes and containers through CRI",
			Run:   func(ctx context.Context, j *NodeJob) (phase.Outcome, error) { return j.Cluster.removePods(ctx, j.Node) },
		},
		{Name: "runtime", Short: "stop the node's containerd and any shim left behind", Run: on(stopRuntime)},
		{
			Name:  "mounts",
			Short: "end the node's mount namespace (the pods' volumes go with it) and unmount everything under the node's directory",
			Run:   on(removeNodeMounts),
		},
		{
			Name:  "cgroups",
			Short: "remove the node's kubelet cgroup root (killing anything left in it)",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{"cgroup " + j.Node.Net.CgroupRoot}
			},
			Run: on(func(ctx context.Context, n Node) (phase.Outcome, error) {
				removed, killed, err := removeCgroupRoot(ctx, n.Net.CgroupRoot)
				return phase.ChangedIf(removed > 0, "%d removed, %d leftover processes killed", removed, killed), err
			}),
		},
		{
			Name:  "network",
			Short: "delete the other nodes' routes to the node's pods, then the node's network namespace (its veth goes with it)",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{"netns " + j.Node.Net.NetNSPath(), "veth " + j.Node.Net.HostVeth, "routes to " + orNone(j.Node.Net.PodCIDR)}
			},
			Run: func(ctx context.Context, j *NodeJob) (phase.Outcome, error) {
				routes := j.Cluster.unroutePods(ctx, j.Node.Net)
				did, err := deleteNodeNetwork(ctx, j.Node.Net)
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
			Run:   phase.Method((*NodeJob).runDeleteNode),
		},
		{
			Name:  "files",
			Short: "remove the node's directory; refuses while anything is mounted beneath it or its kubelet or containerd runs",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{j.Node.Files.Dir}
			},
			Run: phase.Method((*NodeJob).runRemoveNodeFiles),
			// Needs are paths from the root of this job.
			Needs: []string{"kubelet", "runtime", "mounts"},
		},
		{
			Name:  "record",
			Short: "take the node out of cluster.json and ConfigMap kube-system/devk-config",
			IO: func(j *NodeJob) ([]string, []string) {
				return nil, []string{j.Cluster.Files.ConfigFile(), "configmap kube-system/" + bootstrap.ConfigMapName}
			},
			Run: func(ctx context.Context, j *NodeJob) (phase.Outcome, error) {
				if err := ctx.Err(); err != nil {
					return phase.Done, err // interrupted: remove again finishes it
				}
				if err := j.Cluster.Config.RemoveNode(j.Node.Name()); err != nil {
					return phase.Done, err
				}
				if err := j.Cluster.SaveConfig(); err != nil {
					return phase.Done, err
				}
				if _, err := j.Cluster.runUploadConfig(ctx); err != nil {
					return phase.Done, err
				}
				if j.Cluster.Config.HA() {
					if _, err := j.Cluster.runLoadBalancer(ctx); err != nil { // HAProxy without the node
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
func (j *NodeJob) runMarkLeaving(ctx context.Context) (phase.Outcome, error) {
	if j.Node.Net.Leaving {
		return phase.Unchanged("%s was being removed: finishing it", j.Node.Name()), nil
	}
	if err := ctx.Err(); err != nil {
		return phase.Done, err
	}
	j.Cluster.setLeaving(j.Node.Name())
	if err := j.Cluster.SaveConfig(); err != nil {
		return phase.Done, err
	}
	j.Node.Net.Leaving = true
	return phase.Changed("%s leaving", j.Node.Name()), nil
}

// setLeaving marks node name as being removed.
func (c *Cluster) setLeaving(name string) {
	for i := range c.Config.Network.Nodes {
		if c.Config.Network.Nodes[i].Name == name {
			c.Config.Network.Nodes[i].Leaving = true
		}
	}
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

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// RemoveNode removes a node that `devk node add` (or `devk up --nodes`)
// joined (`devk node remove`).
func RemoveNode(ctx context.Context, o NodeOptions, popts phase.Options) (*NodeJob, phase.Result, error) {
	j, err := openNodeJob(o, false)
	if err != nil {
		return nil, phase.Result{}, err
	}
	res, err := runJob(ctx, j.Cluster, "node remove", "node-remove", RemovePhases(), j, popts, nil)
	return j, res, err
}

// drained says whether drain moves pod p off its node: not a
// DaemonSet's (its controller would put it back; it goes with the node),
// not a mirror pod (the kubelet's static pod: it goes with the kubelet),
// not one that has finished. Drain evicts each such pod and waits until
// it is gone, terminating ones included.
func drained(p corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

// runDrain is `kubectl drain --ignore-daemonsets`: cordon, then evict
// every pod but DaemonSets' and mirror pods through the Eviction API, so
// PodDisruptionBudgets hold, and wait until they are gone. A node that
// never registered has nothing to drain.
func (j *NodeJob) runDrain(ctx context.Context) (phase.Outcome, error) {
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	name := j.Node.Name()
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return phase.Unchanged("no Node %s (it never registered)", name), nil
	}
	if err != nil {
		return phase.Done, fmt.Errorf("read node %s: %w (is the cluster up? `devk up%s`)", name, err, j.Cluster.nameFlag())
	}
	cordoned := false
	if !n.Spec.Unschedulable {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
			return phase.Done, fmt.Errorf("cordon node %s: %w", name, err)
		}
		cordoned = true
	}
	evicted := map[types.UID]bool{}
	var last string
	err = wait.PollUntilContextTimeout(ctx, joinPollInterval, drainTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		evict, waiting := drainStep(pods.Items, evicted)
		if len(waiting) == 0 {
			return true, nil
		}
		last = fmt.Sprintf("%d pods still on the node, e.g. %s/%s", len(waiting), waiting[0].Namespace, waiting[0].Name)
		for _, p := range evict {
			ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
			switch err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev); {
			case err == nil, apierrors.IsNotFound(err):
				evicted[p.UID] = true
			case apierrors.IsTooManyRequests(err):
				last = fmt.Sprintf("a PodDisruptionBudget does not allow pod %s/%s to be evicted yet", p.Namespace, p.Name)
			default:
				return false, fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		j.Cluster.Reporter.Progress(progress.StepOf(ctx), progress.Status{Note: "waiting: " + last})
		return false, nil
	})
	if poll.TimedOut(ctx, err) {
		return phase.Done, fmt.Errorf("drain node %s: %s after %s: delete those pods, or fix what holds them, and run it again", name, last, drainTimeout)
	}
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(cordoned || len(evicted) > 0, "cordoned, %d pods evicted", len(evicted)), nil
}

// drainStep is one look of drain at the pods on the node: those to
// evict now (drained ones not yet evicted and not already going), and
// those it still waits for (every drained one, and every pod it evicted
// until the pod is deleted: a pod that finished after its eviction is
// still there until its kubelet deletes it).
func drainStep(pods []corev1.Pod, evicted map[types.UID]bool) (evict, waiting []corev1.Pod) {
	for _, p := range pods {
		switch {
		case evicted[p.UID]:
			waiting = append(waiting, p)
		case drained(p):
			waiting = append(waiting, p)
			if p.DeletionTimestamp == nil {
				evict = append(evict, p)
			}
		}
	}
	return evict, waiting
}

// runDeleteNode deletes the Node and the pods still bound to it (its
// DaemonSet pods, whose kubelet is gone: the pod garbage collector would
// take them only after its quarantine), at once (grace 0: nothing runs
// them any more).
func (j *NodeJob) runDeleteNode(ctx context.Context) (phase.Outcome, error) {
	cs, err := j.Cluster.Client()
	if err != nil {
		return phase.Done, err
	}
	name := j.Node.Name()
	deleted := false
	switch err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); {
	case err == nil:
		deleted = true
	case !apierrors.IsNotFound(err):
		return phase.Done, fmt.Errorf("delete node %s: %w", name, err)
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return phase.Done, fmt.Errorf("list the pods of node %s: %w", name, err)
	}
	gone := 0
	for _, p := range pods.Items {
		err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return phase.Done, fmt.Errorf("delete pod %s/%s of node %s: %w", p.Namespace, p.Name, name, err)
		}
		gone++
	}
	if !deleted {
		return phase.ChangedIf(gone > 0, "no Node %s; %d pods of it deleted", name, gone), nil
	}
	return phase.Changed("deleted, and %d pods bound to it", gone), nil
}

// runRemoveNodeFiles removes the node's directory, after the checks
// down's files phase makes for the cluster's: a real directory under the
// cluster's nodes/, nothing mounted beneath it, no kubelet or containerd
// of the node running.
func (j *NodeJob) runRemoveNodeFiles(ctx context.Context) (phase.Outcome, error) {
	dir := j.Node.Files.Dir
	removeContainerLogLinks(dir)
	if filepath.Dir(dir) != j.Cluster.Files.NodesDir() {
		return phase.Done, fmt.Errorf("refusing to remove %s: not a node directory under %s", dir, j.Cluster.Files.NodesDir())
	}
	exists, err := removableDir(dir, []Node{j.Node}, "run all of `devk node remove"+j.Cluster.nameFlag()+" "+j.Node.Name()+"`")
	if err != nil || !exists {
		return phase.Unchanged("no %s", dir), err
	}
	if err := os.RemoveAll(dir); err != nil {
		return phase.Done, fmt.Errorf("remove %s: %w", dir, err)
	}
	os.Remove(j.Cluster.Files.NodesDir()) // when it was the last
	return phase.Changed("removed %s", dir), nil
}
