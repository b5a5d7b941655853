package remote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/swap"
)

// Namespace is where devk's node agents run. devk makes it, labelled for
// Pod Security Admission's privileged level (the agents mount host
// paths), and keeps it, empty, between commands.
const Namespace = "devk-system"

// The labels every object of a run carries.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "devk"
	LabelRun       = "devk.dev/run"
	LabelTask      = "devk.dev/task"
	LabelNode      = "devk.dev/node"
)

// psaEnforce is Pod Security Admission's namespace label; devk's
// namespace asks for the privileged level.
const psaEnforce = "pod-security.kubernetes.io/enforce"

// TaskDeadline bounds an agent pod (its activeDeadlineSeconds): nothing
// outlives it, even with no client left to delete it.
const TaskDeadline = 2 * time.Minute

// ExportDeadline bounds an export task's pod: collecting a node's logs,
// and the client reading them.
const ExportDeadline = 15 * time.Minute

// PullDeadline bounds a pull task's pod: CRI pulls of a swap's images.
const PullDeadline = 10 * time.Minute

// swapMargin is what a swap pod's deadline allows beyond its waits.
const swapMargin = 15 * time.Minute

// StreamDeadline bounds a streaming task's pod (etcd watch), which runs
// until the client deletes it: one whose client was killed ends by then,
// if no later devk deleted it first.
const StreamDeadline = 24 * time.Hour

// A streaming pod's client stamps it (AnnotationHeartbeat, RFC 3339)
// every heartbeatEvery; a running one whose stamp is older than
// heartbeatStale lost its client (killed), and the next devk deletes it.
const (
	AnnotationHeartbeat = "devk.dev/heartbeat"
	heartbeatEvery      = 10 * time.Second
	heartbeatStale      = time.Minute
)

// clientWait is how long a client waits for its agent's pod to end (a
// minute past its deadline); an ended pod younger than that may still be
// read by its client, and Prepare leaves it.
const clientWait = TaskDeadline + time.Minute

// podPoll is how often a waiting client looks at its agent's pod.
const podPoll = 500 * time.Millisecond

// Session is one command's use of the node agent: its run id, the agent
// image, the pods it made.
type Session struct {
	cs kubernetes.Interface
	// cfg is the client's config, for the streams of exec (nil in tests
	// that give a clientset).
	cfg   *rest.Config
	rep   progress.Reporter
	run   string
	image string
	// accountMade: the run's ServiceAccount and RBAC exist
	// (ensureAccount); stopAccount ends their heartbeat.
	accountMade bool
	stopAccount func()
	// tokens: the credentials may manage agents' ServiceAccounts and
	// RBAC (AccountNeeds were checked), so Prepare deletes those left.
	tokens bool
	// loading is --load's: the agent image loaded onto each node by
	// devk, not pulled from a registry (nil: pulled).
	loading *loadState
	// deleted are the ended agents' pods the session deleted, which
	// Close waits for (awaitDeleted).
	deleted   []string
	deletedMu sync.Mutex
}

// Open connects to the target's cluster for a run of the node agent
// (SetImage names its image).
func Open(t *Target, rep progress.Reporter) (*Session, error) {
	cfg, err := t.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	cs, err := kube.ClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s, err := NewSession(cs, rep)
	if err == nil {
		s.cfg = cfg
	}
	return s, err
}

// NewSession is Open with a clientset.
func NewSession(cs kubernetes.Interface, rep progress.Reporter) (*Session, error) {
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return &Session{cs: cs, rep: rep, run: hex.EncodeToString(id)}, nil
}

// SetImage is the agent image its pods run (by digest: PushAgent's).
func (s *Session) SetImage(ref string) { s.image = ref }

// Prepare makes devk's namespace when it is missing and deletes the agent
// pods of earlier runs that have ended (a client killed before it
// deleted them) and whose client would have given up waiting; pods
// still running, or ended so recently that another devk may be reading
// them, are left.
func (s *Session) Prepare(ctx context.Context) error {
	ns, err := s.cs.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: map[string]string{
			LabelManagedBy: ManagedBy,
			psaEnforce:     "privileged", "pod-security.kubernetes.io/warn": "privileged", "pod-security.kubernetes.io/audit": "privileged",
		}}}
		if _, err := s.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("make namespace %s for devk's node agent: %w", Namespace, err)
		}
	case err != nil:
		return fmt.Errorf("namespace %s: %w", Namespace, err)
	case ns.Labels[psaEnforce] != "" && ns.Labels[psaEnforce] != "privileged":
		return fmt.Errorf("namespace %s enforces Pod Security level %q, and devk's node agent mounts host paths: allow it with `kubectl label namespace %s %s=privileged --overwrite`, or run devk on the node", Namespace, ns.Labels[psaEnforce], Namespace, psaEnforce)
	}
	pods, err := s.cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{LabelManagedBy: ManagedBy}.String()})
	if err != nil {
		return err
	}
	n := 0
	var kept []corev1.Pod
	for _, p := range pods.Items {
		lost := lostClient(p.Annotations)
		switch {
		case p.Labels[LabelTask] == string(agent.KindSwap) && (!podEnded(&p) || !lost):
			// A swap runs to its end, client or not; an ended one is
			// its client's to read while it is there.
			kept = append(kept, p)
			continue
		case p.Labels[LabelTask] == string(agent.KindSwap):
			s.reportLost(ctx, &p)
		case podEnded(&p) && time.Since(p.CreationTimestamp.Time) < clientWait:
			kept = append(kept, p) // its client may still be reading it
			continue
		case !podEnded(&p) && !lost:
			kept = append(kept, p)
			continue
		}
		if err := s.cs.CoreV1().Pods(Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s/%s, left by an earlier devk: %w", Namespace, p.Name, err)
		}
		n++
	}
	if n > 0 {
		s.rep.Infof("deleted %d agent pods an earlier devk left in %s (ended, or streaming to a client that is gone)", n, Namespace)
	}
	if s.loading != nil {
		n, err := s.deleteLostLoaders(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			s.rep.Infof("deleted %d loader ConfigMaps an earlier devk left in %s", n, Namespace)
		}
	}
	if s.tokens {
		runs, err := s.deleteLostAccounts(ctx, kept)
		if err != nil {
			return err
		}
		if runs > 0 {
			s.rep.Infof("deleted the ServiceAccount and RBAC of %d runs of an earlier devk that was killed", runs)
		}
	}
	return nil
}

// lostClient says the client of an object of its run (a streaming pod, a
// swap pod, a run's ServiceAccount), stamped by annotations, is gone: it
// ran on this machine and its process is no more, or it stopped stamping
// the object a while ago. One never stamped has no client to lose.
func lostClient(annotations map[string]string) bool {
	v, ok := annotations[AnnotationHeartbeat]
	if !ok {
		return false
	}
	if host, pid, ok := parseClient(annotations[AnnotationClient]); ok && host == hostname() && !processRuns(pid) {
		return true
	}
	t, err := time.Parse(time.RFC3339, v)
	return err != nil || time.Since(t) > heartbeatStale
}

// AnnotationClient names the client of a run's objects: HOST/PID.
const AnnotationClient = "devk.dev/client"

// clientStamp are the annotations of a run's object its client stamps:
// the heartbeat, and who the client is.
func clientStamp() map[string]string {
	return map[string]string{AnnotationHeartbeat: now(), AnnotationClient: fmt.Sprintf("%s/%d", hostname(), os.Getpid())}
}

// parseClient reads an AnnotationClient value.
func parseClient(v string) (host string, pid int, ok bool) {
	host, p, ok := strings.Cut(v, "/")
	if !ok {
		return "", 0, false
	}
	pid, err := strconv.Atoi(p)
	return host, pid, err == nil && pid > 0
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// processRuns says process pid of this machine runs (is not gone, nor a
// zombie: killed, not yet reaped).
func processRuns(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// now is the time as a heartbeat stamps it.
func now() string { return time.Now().UTC().Format(time.RFC3339) }

// heartbeat stamps an object with patch every heartbeatEvery until ctx
// ends; a stamp that fails is tried again at the next tick.
func (s *Session) heartbeat(ctx context.Context, patch func(ctx context.Context, data []byte) error) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = patch(ctx, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationHeartbeat, now()))
	}
}

// stampPod is heartbeat's patch of agent pod name.
func (s *Session) stampPod(name string) func(context.Context, []byte) error {
	return func(ctx context.Context, data []byte) error {
		_, err := s.cs.CoreV1().Pods(Namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
}

// PodFor is the agent pod of task t on node: pinned to the node (no
// scheduler), tolerating every taint, never restarted, the task's host
// paths at their own paths (read-only but where it writes), bounded by
// its deadline (deadlineOf), a streaming task's or a swap's stamped with
// its client's heartbeat. Only a task that uses the API (a swap) gets a
// token: its run's ServiceAccount (ensureAccount).
func (s *Session) PodFor(node string, t agent.Task) (*corev1.Pod, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	task, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	var mounts []corev1.VolumeMount
	var vols []corev1.Volume
	for i, m := range t.Mounts() {
		name := fmt.Sprintf("host-%d", i)
		typ := corev1.HostPathDirectory
		if m.Create {
			typ = corev1.HostPathDirectoryOrCreate
		}
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.Path, Type: &typ}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.Path, ReadOnly: !m.Write})
	}
	deadline, grace := deadlineOf(t)
	token, root := t.UsesAPI(), int64(0)
	no, yes := false, true
	var annotations map[string]string
	if t.Streams() || t.Waits() || t.Kind == agent.KindSwap {
		annotations = clientStamp()
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        podName(string(t.Kind), node, s.run),
			Namespace:   Namespace,
			Labels:      map[string]string{LabelManagedBy: ManagedBy, LabelRun: s.run, LabelTask: string(t.Kind), LabelNode: labelValue(node)},
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			HostNetwork:                   t.HostNetwork(),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &token,
			EnableServiceLinks:            &no,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			// The agent is not the container's PID 1, which the kernel
			// shields from signals it has no handler for: it dies of
			// what kills a process (the OOM killer, a test's kill -9).
			ShareProcessNamespace: &yes,
			Containers: []corev1.Container{{
				Name:            "agent",
				Image:           s.image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{agent.BinaryPath, "agent"},
				Env:             agentEnv(string(task)),
				SecurityContext: &corev1.SecurityContext{RunAsUser: &root},
				VolumeMounts:    mounts,
			}},
			Volumes: vols,
		},
	}
	if token {
		pod.Spec.ServiceAccountName = s.account()
	}
	if t.Stdin() {
		c := &pod.Spec.Containers[0]
		c.Stdin, c.StdinOnce = true, true
	}
	if t.Privileged() {
		pod.Spec.Containers[0].SecurityContext.Privileged = &yes
	}
	if t.HostPID() {
		// Among the host's processes the agent is not PID 1 either.
		pod.Spec.HostPID, pod.Spec.ShareProcessNamespace = true, nil
	}
	if t.Work() {
		// Its own directory: what the client reads from it, a load's
		// registry.
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "work", MountPath: agent.WorkDir})
		c.Env = append(c.Env, corev1.EnvVar{Name: "TMPDIR", Value: agent.WorkDir})
	}
	return pod, nil
}

// EnvAgentFailpoint, in the client's environment, is DEVK_FAILPOINT in
// its agents' (a failpoints build's agent image acts on it): tests kill
// an agent at a step as they kill a local devk.
const EnvAgentFailpoint = "DEVK_AGENT_FAILPOINT"

// agentEnv is an agent container's environment: its task, and the
// failpoint the client was given for it.
func agentEnv(task string) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: agent.EnvTask, Value: task}}
	if fp := os.Getenv(EnvAgentFailpoint); fp != "" {
		env = append(env, corev1.EnvVar{Name: "DEVK_FAILPOINT", Value: fp})
	}
	return env
}

// deadlineOf is the activeDeadlineSeconds and termination grace of task
// t's pod: TaskDeadline, a streaming task's StreamDeadline, a pull's
// PullDeadline; a swap's covers its waits (each pod's --timeout, twice:
// the swap and a rollback) and the grace lets a deleted swap pod undo
// what it began.
func deadlineOf(t agent.Task) (deadline, grace int64) {
	switch {
	case t.Streams():
		return int64(StreamDeadline / time.Second), 10
	case t.Kind == agent.KindPull:
		return int64(PullDeadline / time.Second), 10
	case t.Kind == agent.KindLoad:
		return int64(LoadDeadline / time.Second), 10
	case t.Kind == agent.KindKubelet:
		// The binary sent, the restart, a rollback's restart.
		return int64((LoadDeadline + 2*t.Kubelet.Wait()) / time.Second), 10
	case t.Kind == agent.KindExport:
		return int64(ExportDeadline / time.Second), 10
	case t.Kind == agent.KindSwap:
		timeout := t.Swap.Timeout
		if timeout == 0 {
			timeout = swap.DefaultTimeout
		}
		d := 2*timeout*time.Duration(len(t.Swap.Components)) + swapMargin
		return int64(d / time.Second), int64((timeout + time.Minute) / time.Second)
	}
	return int64(TaskDeadline / time.Second), 10
}

// podName is <devk>-<task>-<node>-<run>, cut to a valid pod name.
func podName(task, node, run string) string {
	max := validation.DNS1123SubdomainMaxLength - len(run) - 1
	base := strings.Trim(strings.ToLower("devk-"+task+"-"+node), "-.")
	if len(base) > max {
		base = strings.TrimRight(base[:max], "-.")
	}
	return base + "-" + run
}

// labelValue is node as a label value (63 characters at most).
func labelValue(node string) string {
	if len(node) > validation.LabelValueMaxLength {
		return strings.TrimRight(node[:validation.LabelValueMaxLength], "-._")
	}
	return node
}

// Do runs task t on node: it makes the agent pod, waits for it to end,
// reads its result from the pod's log and deletes the pod.
func (s *Session) Do(ctx context.Context, node string, t agent.Task) (json.RawMessage, error) {
	pod, remove, err := s.start(ctx, node, t)
	if err != nil {
		return nil, err
	}
	defer remove()
	ended, err := s.waitPod(ctx, node, pod.Name, podEnded)
	if err != nil {
		return nil, err
	}
	logs, err := s.cs.CoreV1().Pods(Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("node %s: read the agent's log (pod %s/%s): %w", node, Namespace, pod.Name, err)
	}
	return result(node, ended, logs)
}

// Stream runs streaming task t on node (t.Streams): it makes the agent
// pod and follows its log, writing what the task prints to out and its
// notes to the reporter, until the task ends or ctx does (Ctrl-C), then
// deletes the pod.
func (s *Session) Stream(ctx context.Context, node string, t agent.Task, out io.Writer) error {
	pod, remove, err := s.start(ctx, node, t)
	if err != nil {
		return err
	}
	defer remove()
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.heartbeat(hctx, s.stampPod(pod.Name))
	last, err := s.followPod(ctx, node, pod.Name, out)
	switch {
	case err != nil:
		return err
	case last.Error != "":
		return fmt.Errorf("node %s: %s", node, last.Error)
	}
	return nil
}

// followPod follows agent pod name's log until its final line, which it
// returns: the task's output goes to out, its notes and progress to the
// reporter (under the node). A log stream that is cut (the API server or
// the kubelet restarted) is read again, the lines seen skipped. An error
// is the pod's failing with no final line, or ctx ending.
func (s *Session) followPod(ctx context.Context, node, name string, out io.Writer) (*agent.Line, error) {
	if _, err := s.waitPod(ctx, node, name, func(p *corev1.Pod) bool { return p.Status.Phase != corev1.PodPending }); err != nil {
		return nil, err
	}
	pods := s.cs.CoreV1().Pods(Namespace)
	seen := 0
	for {
		// Whether the pod had ended before its log is read: then the
		// read has all of it, and a log with no final line never gets one.
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			var rc io.ReadCloser
			if rc, err = pods.GetLogs(name, &corev1.PodLogOptions{Container: "agent", Follow: true}).Stream(ctx); err == nil {
				var last *agent.Line
				last, err = s.follow(rc, node, &seen, out)
				rc.Close()
				switch {
				case err != nil:
					return nil, err
				case last != nil:
					return last, nil
				case podEnded(p):
					// No result: result says why, with what else it wrote.
					logs, err := pods.GetLogs(name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
					if err != nil {
						return nil, fmt.Errorf("node %s: read the agent's log (pod %s/%s): %w", node, Namespace, name, err)
					}
					_, err = result(node, p, logs)
					return nil, err
				}
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil && !retriable(err) {
			return nil, fmt.Errorf("node %s: follow the agent's log (pod %s/%s): %w", node, Namespace, name, err)
		}
		time.Sleep(podPoll)
	}
}

// follow reads an agent's log, writing the Output of each line after
// *seen to out, its Info and progress Events to the reporter; it returns
// the final line, or nil when the log ends before one.
func (s *Session) follow(r io.Reader, node string, seen *int, out io.Writer) (*agent.Line, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), logLineMax)
	for sc.Scan() {
		var l agent.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Seq <= *seen {
			continue
		}
		*seen = l.Seq
		switch {
		case l.Final():
			return &l, nil
		case l.Event != nil:
			progress.Replay(progress.Under(s.rep, node), *l.Event)
		case l.Info != "":
			s.rep.Infof("node %s: %s", node, l.Info)
		default:
			if _, err := io.WriteString(out, l.Output); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil // a cut stream: the caller looks again
}

// retriable says a request through the API server may succeed when made
// again: the server (one being swapped) or its connection went away, or
// it is starting: an API server that has just started refuses requests
// (Forbidden, Unauthorized) until its RBAC and token caches have synced,
// and the access reviews before the command began said the credentials
// may do what it does (the waits are bounded all the same).
func retriable(err error) bool {
	return kube.Transient(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}

// logLineMax is the longest line of an agent's log devk reads.
const logLineMax = 16 << 20

// start makes the agent pod of task t on node; remove deletes it, on the
// way out even when ctx was cancelled (a pod left behind is deleted by
// the next command, but not leaving one is better), and it is gone when
// the command ends: a waiting or streaming agent's at once, an ended
// one's by Close (awaitDeleted).
func (s *Session) start(ctx context.Context, node string, t agent.Task) (*corev1.Pod, func(), error) {
	if s.loading != nil {
		if err := s.ensureAgent(ctx, node); err != nil {
			return nil, nil, err
		}
	}
	pod, err := s.PodFor(node, t)
	if err != nil {
		return nil, nil, err
	}
	pods := s.cs.CoreV1().Pods(Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("node %s: make the agent pod %s/%s: %w", node, Namespace, pod.Name, err)
	}
	return pod, func() {
		// Made again while the API server is being swapped (or is
		// starting), at most goneWait.
		var err error
		_ = wait.PollUntilContextTimeout(context.WithoutCancel(ctx), podPoll, goneWait, true, func(ctx context.Context) (bool, error) {
			err = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{})
			return err == nil || apierrors.IsNotFound(err) || !retriable(err), nil
		})
		if err != nil && !apierrors.IsNotFound(err) {
			s.rep.Infof("could not delete the agent pod %s/%s (the next devk deletes it): %v", Namespace, pod.Name, err)
			return
		}
		if !t.Waits() && !t.Streams() {
			// It had ended; Close waits for it with the others.
			s.deletedMu.Lock()
			s.deleted = append(s.deleted, pod.Name)
			s.deletedMu.Unlock()
			return
		}
		// Gone, not terminating, before the command goes on (an
		// agent that waits ends on the deletion's SIGTERM): at most
		// goneWait, then the deletion finishes on its own.
		_ = s.gone(context.WithoutCancel(ctx), pod.Name, goneWait)
	}, nil
}

// awaitDeleted waits, at most goneWait in all, until every ended agent's
// pod the session deleted is gone: the kubelet finishes such a deletion
// a second or so later with writes of its own (the pod's last status,
// the deletion itself) that would otherwise land in the next command's
// etcd diff or trace. One wait for all, at the end, so that a command
// on several nodes waits about once.
func (s *Session) awaitDeleted() {
	s.deletedMu.Lock()
	names := s.deleted
	s.deleted = nil
	s.deletedMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), goneWait)
	defer cancel()
	for _, name := range names {
		if s.gone(ctx, name, goneWait) != nil {
			return // the rest finish on their own
		}
	}
}

// gone waits, at most limit, until agent pod name is deleted.
func (s *Session) gone(ctx context.Context, name string, limit time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, podPoll/5, limit, true, func(ctx context.Context) (bool, error) {
		_, err := s.cs.CoreV1().Pods(Namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// goneWait is how long a command waits for an agent pod it deleted to be
// gone.
const goneWait = 15 * time.Second

// podEnded says the agent pod has ended.
func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// waitPod waits, at most clientWait, until agent pod name is as until
// says, and returns it; a pod that cannot start is an error saying why.
func (s *Session) waitPod(ctx context.Context, node, name string, until func(*corev1.Pod) bool) (*corev1.Pod, error) {
	pods := s.cs.CoreV1().Pods(Namespace)
	var found *corev1.Pod
	created := time.Now()
	err := wait.PollUntilContextTimeout(ctx, podPoll, clientWait, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil && retriable(err) {
			return false, nil // the API server is being swapped: look again
		}
		if err != nil {
			return false, err
		}
		if until(p) {
			found = p
			return true, nil
		}
		if err := stuck(p); err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodPending && time.Since(created) > pendingEvents {
			return false, s.failedEvent(ctx, p)
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: the agent pod %s/%s: %w", node, Namespace, name, err)
	}
	return found, nil
}

// doStep is Do on node reported as step <node>/<what>, the agent's
// result decoded into v; detail is the step's line once done.
func (s *Session) doStep(ctx context.Context, node, what string, t agent.Task, v any, detail func() string) error {
	start, step := time.Now(), node+"/"+what
	s.rep.Start(step)
	data, err := s.Do(ctx, node, t)
	if err == nil {
		if err = json.Unmarshal(data, v); err != nil {
			err = fmt.Errorf("node %s: the agent's %s: %w", node, what, err)
		}
	}
	if err != nil {
		s.rep.Fail(step, time.Since(start), err)
		return err
	}
	s.rep.Done(step, time.Since(start), detail())
	return nil
}

// pendingEvents is how long an agent pod may stay pending before devk
// reads its events for a reason it cannot start (a host path that is not
// there, a volume that does not mount).
const pendingEvents = 5 * time.Second

// failedEvent is an error when one of pod p's events says it cannot
// start (FailedMount, Failed); nil when none does.
func (s *Session) failedEvent(ctx context.Context, p *corev1.Pod) error {
	evs, err := s.cs.CoreV1().Events(Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err != nil {
		return nil // the events only explain: the deadline still ends a pod that never starts
	}
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning && (e.Reason == "FailedMount" || e.Reason == "Failed" || e.Reason == "FailedCreatePodSandBox") {
			return fmt.Errorf("%s: %s", e.Reason, e.Message)
		}
	}
	return nil
}

// stuck is an error when pod p cannot start: its image cannot be pulled,
// or its container cannot be made. nil while it may yet run.
func stuck(p *corev1.Pod) error {
	for _, cs := range p.Status.ContainerStatuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
			return fmt.Errorf("the node cannot pull devk's agent image %s (%s: %s): give --registry a registry the nodes pull from", cs.Image, w.Reason, w.Message)
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return fmt.Errorf("%s: %s", w.Reason, w.Message)
		}
	}
	if p.Status.Phase == corev1.PodPending && p.Status.Reason != "" {
		return fmt.Errorf("%s: %s", p.Status.Reason, p.Status.Message)
	}
	return nil
}

// result is the agent's answer: the Line its log ends with, and its exit
// code when that says it failed.
func result(node string, p *corev1.Pod, logs []byte) (json.RawMessage, error) {
	var last *agent.Line
	sc := bufio.NewScanner(bytes.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64*1024), logLineMax)
	var other []string
	for sc.Scan() {
		var l agent.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			other = append(other, sc.Text()) // not the agent's: a panic's
			continue
		}
		if !l.Final() {
			continue
		}
		last = &l
	}
	code, reason := -1, p.Status.Reason
	if len(p.Status.ContainerStatuses) > 0 {
		if t := p.Status.ContainerStatuses[0].State.Terminated; t != nil {
			code, reason = int(t.ExitCode), t.Reason
		}
	}
	switch {
	case last != nil && last.Error != "":
		return last.Result, fmt.Errorf("node %s: %s", node, last.Error)
	case last != nil && code == 0:
		return last.Result, nil
	}
	msg := fmt.Sprintf("node %s: devk's agent ended with no result (exit code %d, %s)", node, code, reason)
	if len(other) > 0 {
		msg += ":\n" + strings.Join(other, "\n")
	}
	return nil, errors.New(msg)
}

// agentTag names the agent image in a registry for people; pods pull it
// by digest.
const agentTag = "devk"

// PushAgent pushes the node agent's image of the running devk (its layer
// cached in home's agent cache) to registry and returns its reference by
// digest.
func PushAgent(ctx context.Context, home, registry, version string, o image.RemoteOptions) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	img, err := agent.Image(layout.HomeFiles(home).AgentCache(), self, version)
	if err != nil {
		return "", err
	}
	r, err := image.NewRemote(registry, o)
	if err != nil {
		return "", err
	}
	ref, err := r.PushTagged(ctx, agent.Repo, agentTag, img)
	if err != nil {
		return "", fmt.Errorf("push devk's agent image: %w", err)
	}
	return ref, nil
}

// Agent says where a session's agent image comes from: Registry, which
// the nodes pull from (--registry), or devk itself, loaded onto each node
// (Load, --load).
type Agent struct {
	Registry string
	Load     bool
}

// Connect is a session through the cluster d names, ready for agent
// pods: the credentials checked for the agent's needs and more (nothing
// made if any is missing), devk's agent image pushed to a.Registry (with
// o; its keychain defaults to the home's) or made to be loaded
// (a.Load), devk's namespace made and ended pods of earlier runs
// deleted.
func Connect(ctx context.Context, d Decision, a Agent, version string, o image.RemoteOptions, rep progress.Reporter, more []Need) (*Session, error) {
	home, err := layout.HomeDir("")
	if err != nil {
		return nil, err
	}
	switch {
	case a.Registry != "" && a.Load:
		return nil, fmt.Errorf("--registry and --load are two ways for the nodes to get devk's images: give one")
	case a.Registry == "" && !a.Load:
		return nil, fmt.Errorf("through the cluster devk runs its node agent on the nodes, from an image they get: pass --registry, a registry they pull from, or --load to send it through the API (or --name for a devk cluster of this machine; there is none named %q in %s)", layout.DefaultName, home)
	}
	s, err := Open(d.Target, rep)
	if err != nil {
		return nil, err
	}
	needs := append(slices.Clone(AgentNeeds), more...)
	if a.Load {
		needs = append(needs, LoadNeeds...)
	}
	if err := s.Check(ctx, needs); err != nil {
		return nil, err
	}
	// A command whose agents get tokens also deletes the accounts a
	// killed one left.
	s.tokens = slices.Contains(needs, AccountNeeds[0])
	if a.Load {
		if err := s.setLoad(home, version); err != nil {
			return nil, err
		}
		return s, s.Prepare(ctx)
	}
	if o.Keychain == nil {
		o.Keychain = image.KeychainFor(home)
	}
	ref, err := PushAgent(ctx, home, a.Registry, version, o)
	if err != nil {
		return nil, err
	}
	s.SetImage(ref)
	return s, s.Prepare(ctx)
}
