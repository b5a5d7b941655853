package trace

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/devk/devk/etcdwatch"
)

// The defaults of --settle and --for.
const (
	// DefaultSettle is how long the cluster must be quiet (no new write
	// request, etcd revision, rule or container change) after the
	// command for the trace to end.
	DefaultSettle = 2 * time.Second
	// DefaultFor bounds the wait after the command's exit.
	DefaultFor = 30 * time.Second
	// pollInterval is how often trace reads the audit logs, and the
	// nodes' rules and runtimes, while it waits: a quarter of the default
	// settle time.
	pollInterval = 500 * time.Millisecond
)

// settleState says where a wait for quiet stands.
type settleState int

const (
	waiting  settleState = iota
	quiet                // nothing happened for settle since the exit or the last activity
	timedOut             // max passed since the exit, and it was never quiet
)

// settled decides, at now, whether the trace of a command that exited at
// exit may end: when no follow-up is pending and nothing happened for
// settle since the later of exit and the last activity (last; zero when
// none), or when max has passed since exit.
func settled(exit, last, now time.Time, pending bool, settle, max time.Duration) settleState {
	since := exit
	if last.After(since) {
		since = last
	}
	switch {
	case !pending && now.Sub(since) >= settle:
		return quiet
	case now.Sub(exit) >= max:
		return timedOut
	}
	return waiting
}

// heartbeatFields are the fields whose change alone is a heartbeat: the
// kubelet's node status report moves them on an idle cluster, whatever
// the traced command did. The resourceVersion moves with any write.
var heartbeatFields = []string{"lastHeartbeatTime:", "renewTime:", "resourceVersion:"}

// heartbeat says whether an etcd write only moved heartbeat times (its
// diff changes no other line): recorded in the timeline, but no sign that
// the cluster is still busy with the command.
func heartbeat(w EtcdWrite) bool {
	if w.Type != etcdwatch.Modified || w.Diff == "" {
		return false
	}
	changed := 0
	for _, l := range strings.Split(w.Diff, "\n") {
		if strings.HasPrefix(l, "---") || strings.HasPrefix(l, "+++") || (!strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "-")) {
			continue
		}
		field := strings.TrimPrefix(strings.TrimSpace(l[1:]), "- ")
		if !slices.ContainsFunc(heartbeatFields, func(f string) bool { return strings.HasPrefix(field, f) }) {
			return false
		}
		changed++
	}
	return changed > 0
}

// heartbeatRequest says whether a write request is a kubelet's node
// status report, whose etcd write (heartbeat) tells whether it changed
// more than the times; with --no-etcd it counts as activity.
func heartbeatRequest(r Request) bool {
	return r.group == "" && r.resource == "nodes" && r.subresource == "status" && strings.HasPrefix(r.User, "system:node:")
}

// followUps is the work the trace saw start in its window and not yet
// finish, from the etcd writes: a pod written in the window that is not
// yet ready, and an object being deleted (its finalizers, a pod's grace
// period). While any is open the cluster is not quiet, whatever the
// time since the last write: between a pod's binding and its
// containers' start the cluster can write nothing for seconds.
type followUps map[objectKey]string

// maxNamesShown bounds the names followUps.String lists of each kind.
const maxNamesShown = 3

// stuckReasons are the reasons of a waiting container that no quiet
// interval ends: the kubelet retries them with a back-off, and the trace
// does not wait for that.
var stuckReasons = []string{"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// observe updates f with one etcd change.
func (f followUps) observe(c etcdwatch.Change) {
	k := objectKey{c.Group, c.Resource, c.Namespace, c.Name}
	if c.Type == etcdwatch.Deleted || c.After == nil {
		delete(f, k)
		return
	}
	obj, ok := c.After.Doc.(map[string]any)
	if !ok {
		delete(f, k)
		return
	}
	u := unstructured.Unstructured{Object: obj}
	switch {
	case u.GetDeletionTimestamp() != nil:
		f[k] = "being deleted"
	case c.Group == "" && c.Resource == "pods":
		if why := podUnfinished(obj); why != "" {
			f[k] = why
			return
		}
		delete(f, k)
	default:
		delete(f, k)
	}
}

// podUnfinished says what a pod waits for, or "" when it is done for the
// trace: ready, ended, unschedulable, or stuck in a back-off.
func podUnfinished(obj map[string]any) string {
	phase, _, _ := unstructured.NestedString(obj, "status", "phase")
	if phase == "Succeeded" || phase == "Failed" {
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		switch {
		case m["type"] == "Ready" && m["status"] == "True":
			return ""
		case m["type"] == "PodScheduled" && m["status"] == "False":
			return ""
		}
	}
	for _, list := range []string{"initContainerStatuses", "containerStatuses"} {
		statuses, _, _ := unstructured.NestedSlice(obj, "status", list)
		for _, s := range statuses {
			m, _ := s.(map[string]any)
			reason, _, _ := unstructured.NestedString(m, "state", "waiting", "reason")
			if slices.Contains(stuckReasons, reason) {
				return ""
			}
		}
	}
	if node, _, _ := unstructured.NestedString(obj, "spec", "nodeName"); node == "" {
		return "to be scheduled"
	}
	return "to be ready"
}

// String names what is open, for a trace that ran out of --for: "pods
// to be ready: default/web-1, default/web-2", at most three names each.
func (f followUps) String() string {
	if len(f) == 0 {
		return ""
	}
	type group struct {
		why, resource string
	}
	names := map[group][]string{}
	for k, why := range f {
		g := group{why, k.resource}
		names[g] = append(names[g], strings.TrimPrefix(k.namespace+"/"+k.name, "/"))
	}
	var parts []string
	for _, g := range slices.SortedFunc(maps.Keys(names), func(a, b group) int {
		return strings.Compare(a.resource+a.why, b.resource+b.why)
	}) {
		n := names[g]
		slices.Sort(n)
		shown := n[:min(len(n), maxNamesShown)]
		more := ""
		if len(n) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(n)-len(shown))
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s%s", g.resource, g.why, strings.Join(shown, ", "), more))
	}
	return strings.Join(parts, "; ")
}
