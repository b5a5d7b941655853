package swap

import (
	"context"
	"fmt"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap/rollout"
)

// An addon (kube-proxy's DaemonSet, CoreDNS's Deployment) is swapped
// through the API server, not the node (swap/rollout): set-image applies the pushed
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
	n.Reporter.Infof("%s: %s -> %s", a.w.Component, digest.ShortRef(a.old), digest.ShortRef(a.target))
	a.applied = true // an apply that errs may still have landed
	if a.job.Debug != nil || a.debugging {
		if err := addon.SetDebug(ctx, n.Client, a.w, a.debug()); err != nil {
			return phase.Done, err
		}
	}
	if err := rollout.SetImage(ctx, n.Client, a.w, a.target, ann); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%s names %s (was %s)", a.w, digest.ShortRef(a.target), digest.ShortRef(a.old)), nil
}

// rollout waits for the controller to roll the target out to every pod.
func (a *addonSwap) rollout(ctx context.Context) (phase.Outcome, error) {
	n, err := a.start(ctx)
	if err != nil {
		return phase.Done, err
	}
	if a.res.Pod, err = rollout.Wait(ctx, n.Client, a.w, a.target, n.timeout()); err != nil {
		if !a.applied && !a.job.Rollback {
			return phase.Done, fmt.Errorf("%w (%s named %s before this swap; `%s --rollback %s` goes back to the image a swap replaced)", err, a.w, digest.ShortRef(a.target), n.command(), a.w.Component)
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
	a.res.Pod, a.res.Log = rollout.FailingPod(cctx, n.Client, a.w, a.target, max(n.LogLines, DefaultLogLines))
	a.res.RolledBack = true
	n.Reporter.Infof("%s: %v; rolling back to %s", a.w.Component, err, digest.ShortRef(a.old))
	if a.job.Debug != nil && !a.job.Debug.Stop && !a.debugging {
		// It was not debugged: the kept container goes back.
		if derr := addon.SetDebug(cctx, n.Client, a.w, addon.Debug{Stop: true}); derr != nil {
			return fmt.Errorf("%s: %w; and the rollback failed: %v (`%s` tries again)", a.w.Component, err, derr, n.command())
		}
	}
	if aerr := rollout.SetImage(cctx, n.Client, a.w, a.old, a.oldAnn); aerr != nil {
		return fmt.Errorf("%s: %w; and the rollback failed: %v (it named %s; `%s` tries again)", a.w.Component, err, aerr, a.old, n.command())
	}
	if _, werr := rollout.Wait(cctx, n.Client, a.w, a.old, n.timeout()); werr != nil {
		if cctx.Err() != nil {
			return fmt.Errorf("%s: %w; %s names %s again, stopped waiting for its rollout", a.w.Component, err, a.w, digest.ShortRef(a.old))
		}
		return fmt.Errorf("%s: %w; %s names %s again, but its rollout did not complete: %v", a.w.Component, err, a.w, digest.ShortRef(a.old), werr)
	}
	return fmt.Errorf("%s: %w: %w", a.w.Component, ErrRolledBack, err)
}
