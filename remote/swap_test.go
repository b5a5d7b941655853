package remote

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/build"
	"github.com/devk/devk/cluster/export"
	"github.com/devk/devk/internal/progress"
)

// swapTask is a swap of the API server on a kubeadm-layout node.
func swapTask() agent.Task {
	return agent.Task{Kind: agent.KindSwap, Swap: &agent.SwapTask{ManifestsDir: "/etc/kubernetes/manifests", CRISocket: "/run/containerd/containerd.sock",
		NodeName: "cp1", PKIDir: "/etc/kubernetes/pki", Components: []string{"apiserver"}, Timeout: time.Minute, State: &build.StateFile{}}}
}

// TestSwapPod: a swap's agent pod has its run's ServiceAccount's token,
// the node's network, the manifests' parent read-write with the PKI
// read-only over it, the lock dir made if missing; it is stamped by its
// client and bounded by its waits, with a grace that lets a deleted pod
// undo what it began.
func TestSwapPod(t *testing.T) {
	s, _ := session(t)
	p, err := s.PodFor("cp1", swapTask())
	if err != nil {
		t.Fatal(err)
	}
	spec, c := p.Spec, p.Spec.Containers[0]
	switch {
	case !*spec.AutomountServiceAccountToken || spec.ServiceAccountName != s.account():
		t.Errorf("token %v, account %q", *spec.AutomountServiceAccountToken, spec.ServiceAccountName)
	case !spec.HostNetwork || spec.HostPID || c.SecurityContext.Privileged != nil:
		t.Errorf("hostNetwork %v, hostPID %v, privileged %v", spec.HostNetwork, spec.HostPID, c.SecurityContext.Privileged)
	case *spec.ActiveDeadlineSeconds != int64((2*time.Minute+swapMargin)/time.Second) || *spec.TerminationGracePeriodSeconds != 120:
		t.Errorf("deadline %d, grace %d", *spec.ActiveDeadlineSeconds, *spec.TerminationGracePeriodSeconds)
	case p.Annotations[AnnotationHeartbeat] == "":
		t.Error("no heartbeat")
	}
	type mount struct {
		path string
		ro   bool
		typ  corev1.HostPathType
	}
	var got []mount
	for i, m := range c.VolumeMounts {
		got = append(got, mount{m.MountPath, m.ReadOnly, *spec.Volumes[i].HostPath.Type})
		if spec.Volumes[i].HostPath.Path != m.MountPath {
			t.Errorf("%s mounted at %s", spec.Volumes[i].HostPath.Path, m.MountPath)
		}
	}
	want := []mount{{"/etc/kubernetes", false, corev1.HostPathDirectory}, {"/etc/kubernetes/pki", true, corev1.HostPathDirectory},
		{"/run/containerd", true, corev1.HostPathDirectory}, {"/run/devk/locks", false, corev1.HostPathDirectoryOrCreate}}
	if !slices.Equal(got, want) {
		t.Errorf("mounts %v, want %v", got, want)
	}
}

// TestAccount: a run's ServiceAccount, ClusterRole (read pods and
// /version, nothing else) and binding are made once and deleted by
// Close; those of a killed run are deleted by a later Prepare once no
// pod of it runs, those of a live run and of a run whose swap still runs
// are kept.
func TestAccount(t *testing.T) {
	s, cs := session(t)
	ctx := context.Background()
	if err := s.ensureAccount(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.ensureAccount(ctx); err != nil {
		t.Fatalf("made twice: %v", err)
	}
	cr, err := cs.RbacV1().ClusterRoles().Get(ctx, s.account(), metav1.GetOptions{})
	if err != nil || !slices.EqualFunc(cr.Rules, agentRules, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.Resources, b.Resources)
	}) {
		t.Fatalf("role %+v: %v", cr, err)
	}
	crb, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, s.account(), metav1.GetOptions{})
	if err != nil || crb.Subjects[0].Name != s.account() || crb.Subjects[0].Namespace != Namespace || crb.Labels[LabelRun] != s.run {
		t.Fatalf("binding %+v: %v", crb, err)
	}
	s.Close()
	for what, err := range map[string]error{
		"serviceaccount": getErr(cs.CoreV1().ServiceAccounts(Namespace).Get(ctx, s.account(), metav1.GetOptions{})),
		"clusterrole":    getErr(cs.RbacV1().ClusterRoles().Get(ctx, s.account(), metav1.GetOptions{})),
		"binding":        getErr(cs.RbacV1().ClusterRoleBindings().Get(ctx, s.account(), metav1.GetOptions{})),
	} {
		if err == nil {
			t.Errorf("%s left after Close", what)
		}
	}

	// Three earlier runs: one killed with nothing running, one killed
	// whose swap still runs, one alive.
	stale := time.Now().Add(-heartbeatStale - time.Second).UTC().Format(time.RFC3339)
	var objs []runtime.Object
	for run, stamp := range map[string]string{"dead0000": stale, "swapping": stale, "alive000": now()} {
		meta := metav1.ObjectMeta{Name: "devk-agent-" + run, Labels: map[string]string{LabelManagedBy: ManagedBy, LabelRun: run}}
		sa := &corev1.ServiceAccount{ObjectMeta: meta}
		sa.Namespace, sa.Annotations = Namespace, map[string]string{AnnotationHeartbeat: stamp}
		objs = append(objs, sa, &rbacv1.ClusterRole{ObjectMeta: meta}, &rbacv1.ClusterRoleBinding{ObjectMeta: meta})
	}
	objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "devk-swap-cp1-swapping", Namespace: Namespace, CreationTimestamp: metav1.Now(),
		Labels:      map[string]string{LabelManagedBy: ManagedBy, LabelRun: "swapping", LabelTask: string(agent.KindSwap)},
		Annotations: map[string]string{AnnotationHeartbeat: stale}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	s, cs = session(t, objs...)
	s.tokens = true
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	sas, _ := cs.CoreV1().ServiceAccounts(Namespace).List(ctx, metav1.ListOptions{})
	crs, _ := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	crbs, _ := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if len(sas.Items) != 2 || len(crs.Items) != 2 || len(crbs.Items) != 2 {
		t.Errorf("left %d accounts, %d roles, %d bindings; want those of the live run and the running swap", len(sas.Items), len(crs.Items), len(crbs.Items))
	}
	for _, sa := range sas.Items {
		if sa.Labels[LabelRun] == "dead0000" {
			t.Error("the killed run's account was kept")
		}
	}
	if _, err := cs.CoreV1().Pods(Namespace).Get(ctx, "devk-swap-cp1-swapping", metav1.GetOptions{}); err != nil {
		t.Errorf("the running swap of a killed client was deleted: %v", err)
	}
}

func getErr[T any](_ T, err error) error { return err }

// TestReportLost: an ended swap pod of a killed client is reported by the
// next command (what it swapped, or that it rolled back) and deleted.
func TestReportLost(t *testing.T) {
	stale := time.Now().Add(-heartbeatStale - time.Second).UTC().Format(time.RFC3339)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "devk-swap-cp2-dead0000", Namespace: Namespace, CreationTimestamp: metav1.Now(),
		Labels:      map[string]string{LabelManagedBy: ManagedBy, LabelRun: "dead0000", LabelTask: string(agent.KindSwap)},
		Annotations: map[string]string{AnnotationHeartbeat: stale}},
		Spec:   corev1.PodSpec{NodeName: "cp2"},
		Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	s, cs := session(t, pod)
	var notes []string
	s.rep = noteTaker{Reporter: progress.Discard(), notes: &notes}
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The fake clientset's log is "fake logs": no result, which is said.
	if len(notes) == 0 || !strings.Contains(notes[0], "node cp2: the swap a killed devk began at") {
		t.Errorf("notes %q", notes)
	}
	if _, err := cs.CoreV1().Pods(Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{}); err == nil {
		t.Error("the ended swap pod was kept")
	}
	r, err := swapResult("cp2", &agent.Line{Result: []byte(`{"staticPods":[{"pod":"kube-apiserver","rolledBack":true}]}`), Error: "swap failed and was rolled back"})
	if err == nil || len(r.StaticPods) != 1 || !r.StaticPods[0].RolledBack {
		t.Errorf("a failed swap's report %+v, %v: want both", r, err)
	}
}

// noteTaker keeps the notes a command prints.
type noteTaker struct {
	progress.Reporter
	notes *[]string
}

func (n noteTaker) Infof(format string, args ...any) {
	*n.notes = append(*n.notes, fmt.Sprintf(format, args...))
}

// TestLostClient: a run's client on this machine whose process has ended
// is lost at once, its stamp fresh or not; a live one, or one elsewhere
// with a fresh stamp, is not; a stale stamp is lost wherever.
func TestLostClient(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := time.Now().Add(-heartbeatStale - time.Second).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		client, stamp string
		lost          bool
	}{
		{fmt.Sprintf("%s/%d", hostname(), gone.Process.Pid), now(), true},
		{fmt.Sprintf("%s/%d", hostname(), os.Getpid()), now(), false},
		{fmt.Sprintf("elsewhere.example/%d", gone.Process.Pid), now(), false},
		{"elsewhere.example/1", stale, true},
		{"", now(), false},
	} {
		if got := lostClient(map[string]string{AnnotationHeartbeat: tc.stamp, AnnotationClient: tc.client}); got != tc.lost {
			t.Errorf("client %q stamped %s: lost %v, want %v", tc.client, tc.stamp, got, tc.lost)
		}
	}
	if lostClient(map[string]string{AnnotationClient: "x/1"}) {
		t.Error("an object never stamped has no client to lose")
	}
}

// TestExportPod: an export's agent pod has its own work directory (the
// tarball the client reads by exec), no token, its node's files
// read-only, a client stamp, and the export's deadline.
func TestExportPod(t *testing.T) {
	s, _ := session(t)
	p, err := s.PodFor("w1", agent.Task{Kind: agent.KindExport, Export: &export.NodeFiles{PodLogsDir: "/var/log/pods", CRISocket: "/run/containerd/containerd.sock"}})
	if err != nil {
		t.Fatal(err)
	}
	spec, c := p.Spec, p.Spec.Containers[0]
	var work, ro int
	for i, m := range c.VolumeMounts {
		switch {
		case m.MountPath == agent.WorkDir && spec.Volumes[i].EmptyDir != nil:
			work++
		case m.ReadOnly && spec.Volumes[i].HostPath != nil:
			ro++
		default:
			t.Errorf("mount %+v of %+v", m, spec.Volumes[i])
		}
	}
	if work != 1 || ro != 2 || *spec.AutomountServiceAccountToken || *spec.ActiveDeadlineSeconds != int64(ExportDeadline/time.Second) || p.Annotations[AnnotationClient] == "" {
		t.Errorf("work %d, read-only %d, token %v, deadline %d, annotations %v", work, ro, *spec.AutomountServiceAccountToken, *spec.ActiveDeadlineSeconds, p.Annotations)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "TMPDIR" && e.Value == agent.WorkDir }) {
		t.Errorf("env %v", c.Env)
	}
}
