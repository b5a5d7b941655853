package trace

import (
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/devk/devk/etcdwatch"
)

func TestSettled(t *testing.T) {
	exit := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return exit.Add(d) }
	const settle, max = 2 * time.Second, 30 * time.Second
	tests := []struct {
		name      string
		last, now time.Time
		pending   bool
		want      settleState
	}{
		{"nothing happened, just exited", time.Time{}, at(0), false, waiting},
		{"nothing happened for the settle time", time.Time{}, at(settle), false, quiet},
		{"activity before the exit counts from the exit", at(-5 * time.Second), at(time.Second), false, waiting},
		{"activity before the exit, quiet since", at(-5 * time.Second), at(settle), false, quiet},
		{"activity after the exit restarts the wait", at(time.Second), at(2500 * time.Millisecond), false, waiting},
		{"quiet since the last activity", at(time.Second), at(3 * time.Second), false, quiet},
		{"quiet, but a follow-up is pending", at(time.Second), at(10 * time.Second), true, waiting},
		{"busy until --for", at(29900 * time.Millisecond), at(max), false, timedOut},
		{"pending until --for", at(time.Second), at(max), true, timedOut},
		{"quiet wins at --for", at(27 * time.Second), at(max), false, quiet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := settled(exit, tt.last, tt.now, tt.pending, settle, max); got != tt.want {
				t.Errorf("settled = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseFilter(t *testing.T) {
	f, err := ParseFilter([]string{"resource=services", "resource=endpointslices.discovery.k8s.io", "namespace=default", "user-agent=kubectl"})
	if err != nil {
		t.Fatal(err)
	}
	req := func(group, resource, ns, ua string) Request {
		return Request{group: group, resource: resource, Namespace: ns, UserAgent: ua}
	}
	tests := []struct {
		name string
		r    Request
		want bool
	}{
		{"all match", req("", "services", "default", "kubectl/v1.34.4"), true},
		{"a resource by group", req("discovery.k8s.io", "endpointslices", "default", "kubectl/v1.34.4"), true},
		{"another resource", req("", "pods", "default", "kubectl/v1.34.4"), false},
		{"another namespace", req("", "services", "kube-system", "kubectl/v1.34.4"), false},
		{"another client", req("", "services", "default", "kube-controller-manager/v1.34.4"), false},
	}
	for _, tt := range tests {
		if got := f.Request(tt.r); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, bad := range []string{"resource", "resource=", "verb=get"} {
		if _, err := ParseFilter([]string{bad}); err == nil {
			t.Errorf("--filter %s accepted", bad)
		}
	}
}

func TestHeartbeat(t *testing.T) {
	node := func(beat, ready, rv string) string {
		return "apiVersion: v1\nkind: Node\nmetadata:\n  name: devk-control-plane\n  resourceVersion: \"" + rv + "\"\nstatus:\n  conditions:\n" +
			"  - lastHeartbeatTime: \"" + beat + "\"\n    lastTransitionTime: \"2026-12-02T10:00:00Z\"\n    reason: KubeletReady\n    status: \"" + ready + "\"\n    type: Ready\n" +
			"  - lastHeartbeatTime: \"" + beat + "\"\n    lastTransitionTime: \"2026-12-02T10:00:00Z\"\n    reason: KubeletHasSufficientMemory\n    status: \"False\"\n    type: MemoryPressure\n"
	}
	write := func(typ etcdwatch.ChangeType, from, to string) EtcdWrite {
		return EtcdWrite{Type: typ, Diff: etcdwatch.UnifiedDiff("a", "b", from, to)}
	}
	tests := []struct {
		name string
		w    EtcdWrite
		want bool
	}{
		{"the kubelet's status report, times only", write(etcdwatch.Modified, node("2026-12-02T10:00:00Z", "True", "100"), node("2026-12-02T10:00:10Z", "True", "107")), true},
		{"a status report that changes a condition", write(etcdwatch.Modified, node("2026-12-02T10:00:00Z", "True", "100"), node("2026-12-02T10:00:10Z", "False", "107")), false},
		{"a label added", write(etcdwatch.Modified, node("x", "True", "1"), strings.Replace(node("x", "True", "2"), "  name:", "  labels:\n    a: b\n  name:", 1)), false},
		{"a creation", write(etcdwatch.Added, "", node("x", "True", "1")), false},
		{"a write with no diff (not decoded)", EtcdWrite{Type: etcdwatch.Modified}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := heartbeat(tt.w); got != tt.want {
				t.Errorf("heartbeat = %v, want %v; diff:\n%s", got, tt.want, tt.w.Diff)
			}
		})
	}
}

// TestFollowUps follows a Deployment's pod through the states its etcd
// writes show, and a namespace through its deletion.
func TestFollowUps(t *testing.T) {
	change := func(typ etcdwatch.ChangeType, resource, ns, name, doc string) etcdwatch.Change {
		c := etcdwatch.Change{Type: typ, KeyInfo: etcdwatch.KeyInfo{Resource: resource, Namespace: ns, Name: name}}
		if doc != "" {
			var v any
			if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
				t.Fatal(err)
			}
			c.After = &etcdwatch.Value{Doc: v, HasDoc: true}
		}
		return c
	}
	const pod = "metadata: {name: web-1, namespace: default}\n"
	steps := []struct {
		name string
		c    etcdwatch.Change
		want string
	}{
		{"created", change(etcdwatch.Added, "pods", "default", "web-1", pod+"status: {phase: Pending}"), "pods to be scheduled: default/web-1"},
		{"a ConfigMap changes nothing", change(etcdwatch.Added, "configmaps", "default", "c", "metadata: {name: c}\ndata: {a: b}"), "pods to be scheduled: default/web-1"},
		{"bound", change(etcdwatch.Modified, "pods", "default", "web-1", pod+"spec: {nodeName: devk-worker}\nstatus: {phase: Pending, conditions: [{type: PodScheduled, status: 'True'}]}"), "pods to be ready: default/web-1"},
		{"running, not ready", change(etcdwatch.Modified, "pods", "default", "web-1", pod+"spec: {nodeName: devk-worker}\nstatus: {phase: Running, conditions: [{type: Ready, status: 'False'}]}"), "pods to be ready: default/web-1"},
		{"ready", change(etcdwatch.Modified, "pods", "default", "web-1", pod+"spec: {nodeName: devk-worker}\nstatus: {phase: Running, conditions: [{type: Ready, status: 'True'}]}"), ""},
		{"being deleted", change(etcdwatch.Modified, "pods", "default", "web-1", "metadata: {name: web-1, namespace: default, deletionTimestamp: '2026-12-02T10:00:00Z'}\nstatus: {phase: Running}"), "pods being deleted: default/web-1"},
		{"deleted", change(etcdwatch.Deleted, "pods", "default", "web-1", ""), ""},
		{"a pod stuck pulling its image", change(etcdwatch.Added, "pods", "default", "bad", "metadata: {name: bad}\nspec: {nodeName: n}\nstatus: {phase: Pending, containerStatuses: [{name: c, state: {waiting: {reason: ImagePullBackOff}}}]}"), ""},
		{"an unschedulable pod", change(etcdwatch.Added, "pods", "default", "big", "metadata: {name: big}\nstatus: {phase: Pending, conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]}"), ""},
		{"a namespace terminating", change(etcdwatch.Modified, "namespaces", "", "t", "metadata: {name: t, deletionTimestamp: '2026-12-02T10:00:00Z'}"), "namespaces being deleted: t"},
		{"a pod in another namespace", change(etcdwatch.Added, "pods", "a", "p4", "metadata: {name: p4}"), "namespaces being deleted: t; pods to be scheduled: a/p4"},
	}
	f := followUps{}
	for _, s := range steps {
		f.observe(s.c)
		if got := f.String(); got != s.want {
			t.Fatalf("%s: open is %q, want %q", s.name, got, s.want)
		}
	}
	for _, n := range []string{"p1", "p2", "p3"} {
		f.observe(change(etcdwatch.Added, "pods", "a", n, "metadata: {name: "+n+"}"))
	}
	if got, want := f.String(), "namespaces being deleted: t; pods to be scheduled: a/p1, a/p2, a/p3 and 1 more"; got != want {
		t.Errorf("open is %q, want %q", got, want)
	}
}
