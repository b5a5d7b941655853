package swap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	appsac "k8s.io/client-go/applyconfigurations/apps/v1"
	coreac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// An addon (kube-proxy's DaemonSet, CoreDNS's Deployment) is swapped
// through the API server, not the node: set-image applies the pushed
// image to the workload's container, the workload's controller rolls it
// out, and verify checks every pod. The previous image is recorded on
// the object itself (addon.PreviousImageAnnotation), in the same apply
// that sets the new one: it survives a killed devk, needs no journal,
// and `--rollback` reads it from there. A rollout that fails or times
// out, a verification that fails and a Ctrl-C are undone by applying
// the previous image (and annotations) back and waiting for that
// rollout.

// AddonResult is the outcome of swapping one addon.
type AddonResult struct {
	Component string `json:"component"`
	// Workload names the object: DaemonSet kube-system/kube-proxy.
	Workload string `json:"workload"`
	ImageChange
	Checks []Check `json:"checks"`
	// RolledOut is when the controller had every pod on the new image
	// and available; Took includes the checks.
	RolledOut time.Duration `json:"rolledOut"`
	Took      time.Duration `json:"took"`
	// Pod is the pod whose failure stopped the swap, and Log the tail
	// of its container's log (through the API's pods/log).
	Pod string   `json:"pod,omitempty"`
	Log []string `json:"log,omitempty"`
}

// addonSwap is one addon's swap (or rollback) as its phases run it.
type addonSwap struct {
	job    *Job
	w      addon.Workload
	target string // the image to set
	// old and oldAnn are the image and swap annotations before: what an
	// undo applies back.
	old    string
	oldAnn map[string]string
	// unchanged: the workload names target already (as the debug swap
	// would write it). debugging: it runs under the debugger (`devk
	// debug`), so any swap changes its container.
	unchanged, debugging bool
	// applied: this run applied target, so a failure before verify
	// passed is undone; done: verify passed (or the undo ran).
	applied, done bool
	res           *AddonResult
	t0            time.Time
}

// swapAnnotations are the annotations among ann that a swap owns.
func swapAnnotations(ann map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{addon.SwappedImageAnnotation, addon.PreviousImageAnnotation} {
		if v, ok := ann[k]; ok {
			out[k] = v
		}
	}
	return out
}

// apiClient is the API server's clientset: the connected node's, else
// one from the kubeconfig (selection only reads, and a plan must not
// need the runtime or the node's lock).
func (j *Job) apiClient() (kubernetes.Interface, error) {
	if j.target != nil {
		return j.target.Client, nil
	}
	if j.api != nil {
		return j.api, nil
	}
	if j.Node.Kubeconfig == "" {
		return nil, j.noNode()
	}
	c, err := kube.Client(j.Node.Kubeconfig)
	if err != nil {
		return nil, err
	}
	j.api = c
	return c, nil
}

// getAddon reads w from the cluster (addon.Get: nil when it has none).
func (j *Job) getAddon(ctx context.Context, w addon.Workload) (*addon.State, error) {
	cs, err := j.apiClient()
	if err != nil {
		return nil, err
	}
	return addon.Get(ctx, cs, w)
}

// newAddonSwap is the swap of w to its last pushed image (a rollback: to
// the image its annotation recorded). The workload must exist.
func (j *Job) newAddonSwap(ctx context.Context, w addon.Workload) (*addonSwap, error) {
	a := &addonSwap{job: j, w: w}
	switch {
	case j.Debug != nil && !j.Debug.Stop:
		if a.target = j.Debug.Image; a.target == "" {
			cs := j.state.Components[w.Component]
			if cs == nil || cs.DebugPushed == nil {
				return nil, fmt.Errorf("no debug image of %s was pushed: run `devk debug %s`", w.Component, w.Component)
			}
			a.target = cs.DebugPushed.Ref
		}
	case j.Debug != nil: // stop: the image the kept container names, below
	case !j.Rollback:
		// What was pushed first: it needs no API server.
		ps, err := j.pushed(w.Component)
		if err != nil {
			return nil, err
		}
		a.target = ps.Pushed.Ref
		if digest.Of(a.target) == "" {
			return nil, fmt.Errorf("%s is not a digest reference (repo@sha256:…): push it first (devk push %s)", a.target, w.Component)
		}
	}
	s, err := j.getAddon(ctx, w)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%s: the cluster has no %s: `devk up` installs the addons", w.Component, w)
	}
	cur := s.Image()
	if cur == "" {
		return nil, fmt.Errorf("%s has no container %s", w, w.Container)
	}
	a.old, a.oldAnn = cur, swapAnnotations(s.Annotations)
	if j.Rollback {
		a.target = s.Annotations[addon.PreviousImageAnnotation]
		if a.target == "" {
			return nil, fmt.Errorf("%s has no %s annotation: no swap replaced its image, so there is nothing to roll back to", w, addon.PreviousImageAnnotation)
		}
	}
	a.debugging = s.Debugging()
	if j.Debug != nil && j.Debug.Stop {
		kept, err := s.DebugOriginal()
		if err != nil {
			return nil, err
		}
		a.target = kept.Image
	}
	// A debugged workload changes on any swap: a debug swap may change
	// the debugger's flags, any other puts the container back.
	a.unchanged = cur == a.target && !a.debugging && j.Debug == nil
	if j.Debug != nil && !j.Debug.Stop && a.debugging && cur == a.target {
		if same, err := a.sameDebug(s); err != nil || same {
			a.unchanged = true
		}
	}
	a.res = &AddonResult{Component: w.Component, Workload: w.String(), ImageChange: ImageChange{OldImage: cur, NewImage: a.target, Unchanged: a.unchanged, Restored: j.Rollback}}
	return a, nil
}

// debug is how the swap changes the addon's container: under the
// debugger (the job's Debug), or back as it was before (a stop, or any
// other swap of a debugged addon), with the target image.
func (a *addonSwap) debug() addon.Debug {
	d := addon.Debug{Image: a.target, Stop: a.job.Debug == nil || a.job.Debug.Stop}
	if !d.Stop {
		d.Command, d.Port = a.job.Debug.Command, a.job.Debug.Port
		if c, err := build.Lookup(a.w.Component); err == nil {
			d.Entrypoint = c.Layout.Entrypoint
		}
	}
	return d
}

// sameDebug says whether the debugged workload s runs the container a
// debug swap would make (the same debugger flags).
func (a *addonSwap) sameDebug(s *addon.State) (bool, error) {
	kept, err := s.DebugOriginal()
	if err != nil {
		return false, err
	}
	want, err := addon.DebugContainer(*kept, s.Template.Spec.HostNetwork, a.debug())
	if err != nil {
		return false, err
	}
	return apiequality.Semantic.DeepEqual(want, *s.Container()), nil
}

// outdatedAddons are the addons the tree pushed whose workload, present
// on the cluster, names another image.
func (j *Job) outdatedAddons(ctx context.Context) ([]addon.Workload, error) {
	var out []addon.Workload
	for _, w := range addon.Workloads {
		cs := j.state.Components[w.Component]
		if cs == nil || cs.Pushed == nil {
			continue
		}
		s, err := j.getAddon(ctx, w)
		if err != nil {
			return nil, err
		}
		if s != nil && s.Image() != cs.Pushed.Ref {
			out = append(out, w)
		}
	}
	return out, nil
}

// start begins each of the addon's phases: it is the swap in flight and
// its result is reported.
func (a *addonSwap) start(ctx context.Context) (*Target, error) {
	a.job.currentAddon = a
	reportOnce(&a.t0, &a.job.Report.Addons, a.res)
	return a.job.connect(ctx)
}

// apply server-side applies image to the addon's container with the
// swap's annotations ann, as addon.FieldManager: only those fields, so
// `devk up`'s own stay its own. An annotation left out of ann that the
// swap applied before is removed.
func applyImage(ctx context.Context, cs kubernetes.Interface, w addon.Workload, image string, ann map[string]string) error {
	tmpl := coreac.PodTemplateSpec().WithSpec(coreac.PodSpec().WithContainers(coreac.Container().WithName(w.Container).WithImage(image)))
	opts := metav1.ApplyOptions{FieldManager: addon.FieldManager, Force: true}
	var err error
	switch w.Kind {
	case addon.DaemonSet:
		ac := appsac.DaemonSet(w.Name, w.Namespace).WithSpec(appsac.DaemonSetSpec().WithTemplate(tmpl))
		if len(ann) > 0 {
			ac.WithAnnotations(ann)
		}
		_, err = cs.AppsV1().DaemonSets(w.Namespace).Apply(ctx, ac, opts)
	case addon.Deployment:
		ac := appsac.Deployment(w.Name, w.Namespace).WithSpec(appsac.DeploymentSpec().WithTemplate(tmpl))
		if len(ann) > 0 {
			ac.WithAnnotations(ann)
		}
		_, err = cs.AppsV1().Deployments(w.Namespace).Apply(ctx, ac, opts)
	default:
		err = fmt.Errorf("unknown kind %q", w.Kind)
	}
	if err != nil {
		return fmt.Errorf("set the image of %s: %w", w, err)
	}
	return nil
}

// setImage applies the target image, recording the image it replaces
// (a rollback keeps the record: a second --rollback finds it restored).
func (a *addonSwap) setImage(ctx context.Context) (phase.Outcome, error) {
	n, err := a.start(ctx)
	if err != nil {
		return phase.Done, err
	}
	ann := map[string]string{addon.SwappedImageAnnotation: a.target, addon.PreviousImageAnnotation: a.old}
	if a.job.Rollback {
		ann[addon.PreviousImageAnnotation] = a.target
	}
	n.Reporter.Infof("%s: %s -> %s", a.w.Component, shortRef(a.old), shortRef(a.target))
	a.applied = true // an apply that errs may still have landed
	if a.job.Debug != nil || a.debugging {
		if err := addon.SetDebug(ctx, n.Client, a.w, a.debug()); err != nil {
			return phase.Done, err
		}
	}
	if err := applyImage(ctx, n.Client, a.w, a.target, ann); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%s names %s (was %s)", a.w, shortRef(a.target), shortRef(a.old)), nil
}

// rollout waits for the controller to roll the target out to every pod.
func (a *addonSwap) rollout(ctx context.Context) (phase.Outcome, error) {
	n, err := a.start(ctx)
	if err != nil {
		return phase.Done, err
	}
	if err := n.awaitRollout(ctx, a.w, a.target, a.res); err != nil {
		if !a.applied && !a.job.Rollback {
			return phase.Done, fmt.Errorf("%w (%s named %s before this swap; `%s --rollback %s` goes back to the image a swap replaced)", err, a.w, shortRef(a.target), n.command(), a.w.Component)
		}
		return phase.Done, err
	}
	a.res.RolledOut = time.Since(a.t0)
	return phase.Unchanged("rolled out in %s", progress.Round(a.res.RolledOut)), nil
}

// verify checks the workload and every pod against the target digest.
func (a *addonSwap) verify(ctx context.Context) (phase.Outcome, error) {
	n, err := a.start(ctx)
	if err != nil {
		return phase.Done, err
	}
	runtimes := digest.NodeRuntimes{n.NodeName: n.Runtime}
	for name, rt := range n.Others {
		runtimes[name] = rt
	}
	v, err := digest.ObserveAddon(ctx, n.Client, runtimes, a.w)
	if err != nil {
		return phase.Done, err
	}
	if !v.Present {
		return phase.Done, fmt.Errorf("%s is gone from the cluster", a.w)
	}
	a.res.Checks = digest.AddonChecks(digest.Of(a.target), v)
	a.res.Took = time.Since(a.t0)
	if err := checksError(a.res.Checks); err != nil {
		return phase.Done, err
	}
	a.done = true
	return phase.Unchanged("%d pods, %d checks passed", len(v.Pods), len(a.res.Checks)), nil
}

// undo ends an addon swap whose run failed (err): one this run applied
// and that did not verify is put back on the old image and annotations,
// and that rollout waited for, on the cleanup context (a second Ctrl-C
// stops the wait; the old image is applied by then). The result wraps
// err, and ErrRolledBack once the old image runs again.
func (a *addonSwap) undo(ctx context.Context, err error) error {
	n := a.job.target
	if a.done || !a.applied || a.job.Rollback || n == nil {
		return err
	}
	a.done = true
	defer func() { a.res.Took = time.Since(a.t0) }()
	cctx := interrupt.Cleanup(ctx)
	a.res.Pod, a.res.Log = n.failingPod(cctx, a.w, a.target)
	a.res.RolledBack = true
	n.Reporter.Infof("%s: %v; rolling back to %s", a.w.Component, err, shortRef(a.old))
	if a.job.Debug != nil && !a.job.Debug.Stop && !a.debugging {
		// It was not debugged: the kept container goes back.
		if derr := addon.SetDebug(cctx, n.Client, a.w, addon.Debug{Stop: true}); derr != nil {
			return fmt.Errorf("%s: %w; and the rollback failed: %v (`%s` tries again)", a.w.Component, err, derr, n.command())
		}
	}
	if aerr := applyImage(cctx, n.Client, a.w, a.old, a.oldAnn); aerr != nil {
		return fmt.Errorf("%s: %w; and the rollback failed: %v (it named %s; `%s` tries again)", a.w.Component, err, aerr, a.old, n.command())
	}
	var back AddonResult
	if werr := n.awaitRollout(cctx, a.w, a.old, &back); werr != nil {
		if cctx.Err() != nil {
			return fmt.Errorf("%s: %w; %s names %s again, stopped waiting for its rollout", a.w.Component, err, a.w, shortRef(a.old))
		}
		return fmt.Errorf("%s: %w; %s names %s again, but its rollout did not complete: %v", a.w.Component, err, a.w, shortRef(a.old), werr)
	}
	return fmt.Errorf("%s: %w: %w", a.w.Component, ErrRolledBack, err)
}

// awaitRollout polls until the workload's controller has rolled image
// out: every pod on it and available, no old pod left. A pod of image
// whose container crash-loops or cannot get its image fails the wait at
// once, naming the pod and its container's state; so does the workload
// naming another image (someone changed it meanwhile) or vanishing.
func (n *Target) awaitRollout(ctx context.Context, w addon.Workload, image string, res *AddonResult) error {
	timeout := n.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	stage := "the controller to start the rollout"
	pending := "" // a pod of image that is not ready, and why
	var doneSince time.Time
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		s, err := addon.Get(ctx, n.Client, w)
		if err != nil {
			stage = err.Error()
			return false, nil // the API may blink: look again
		}
		if s == nil {
			return false, fmt.Errorf("%s was deleted during the rollout", w)
		}
		if got := s.Image(); got != image {
			return false, fmt.Errorf("%s names %s now, not %s: changed by someone else during the rollout", w, got, image)
		}
		pods, err := s.Pods(ctx, n.Client)
		if err != nil {
			stage = err.Error()
			return false, nil
		}
		pending = ""
		for i := range pods {
			p := &pods[i]
			if w.PodImage(p) != image {
				continue
			}
			if why := w.Failing(p); why != "" {
				res.Pod = p.Name
				return false, fmt.Errorf("the rollout of %s failed: pod %s: %s", shortRef(image), p.Name, why)
			}
			if why := w.NotReady(p); why != "" && pending == "" {
				pending = "; pod " + p.Name + ": " + why
			}
		}
		done, why := s.RolledOut()
		if !done {
			stage = why
			doneSince = time.Time{}
			return false, nil
		}
		// A container without a readiness probe counts as ready the
		// moment it runs, so one that exits at once can look rolled out
		// for a relist or two: it must stay so for addonSettle (a
		// quarter of a short timeout).
		if doneSince.IsZero() {
			doneSince = time.Now()
		}
		stage = "the rolled-out pods to keep running"
		return time.Since(doneSince) >= min(addonSettle, timeout/4), nil
	})
	switch {
	case err == nil:
		return nil
	case poll.TimedOut(ctx, err):
		return fmt.Errorf("timed out after %s waiting for %s to roll out %s: waiting for %s%s", timeout, w, shortRef(image), stage, pending)
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted during the rollout of %s: %w", w, context.Cause(ctx))
	}
	return err
}

// failingPod is the pod of image whose container failed, with the last
// lines of its log through the API (the previous container's when the
// kubelet restarted it); empty when no pod of image fails.
func (n *Target) failingPod(ctx context.Context, w addon.Workload, image string) (string, []string) {
	s, err := addon.Get(ctx, n.Client, w)
	if err != nil || s == nil {
		return "", nil
	}
	pods, err := s.Pods(ctx, n.Client)
	if err != nil {
		return "", nil
	}
	// The failing pod first; else any pod of the new image: a container
	// that exits at once can look ready for a moment (no readiness
	// probe), and verify, not the rollout, is what caught it.
	pick := -1
	for i := range pods {
		if w.PodImage(&pods[i]) != image {
			continue
		}
		if w.Failing(&pods[i]) != "" {
			pick = i
			break
		}
		if pick < 0 {
			pick = i
		}
	}
	if pick >= 0 {
		p := &pods[pick]
		st := w.ContainerStatus(p)
		previous := st != nil && st.State.Terminated == nil && st.LastTerminationState.Terminated != nil
		lines, err := podLog(ctx, n.Client, p, w.Container, previous, max(n.LogLines, DefaultLogLines))
		if err != nil {
			lines = []string{"(no log: " + err.Error() + ")"}
		}
		return p.Name, lines
	}
	return "", nil
}

// podLog is the tail of a container's log through the API's pods/log.
func podLog(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, container string, previous bool, lines int) ([]string, error) {
	tail := int64(lines)
	rc, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container, Previous: previous, TailLines: &tail}).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxLogBytes))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	text := strings.TrimRight(string(data), "\n")
	if text == "" {
		return nil, nil
	}
	return strings.Split(text, "\n"), nil
}

// maxLogBytes bounds the log a failed rollout shows.
const maxLogBytes = 64 << 10
