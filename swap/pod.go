package swap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/crilog"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
)

// stage is how far a static pod's swap got: what Close must finish or
// undo if the run stops there.
type stage int

const (
	stageNone        stage = iota // nothing changed
	stageBegun                    // pending backup and journal written; the manifest untouched
	stageHandingOver              // the manifest may be moved out and the old container stopped
	stageWritten                  // the new manifest is in place
	stageReady                    // the new pod runs the digest healthy; no check about the node failed
	stageDone                     // finished: the journal is gone
)

// podSwap is one static pod's swap (or rollback) as its phases run it.
type podSwap struct {
	job    *Job
	target podImage
	m      Manifest
	// ctr is the container to go back to: the manifest's before a swap,
	// the backup's for a rollback (whose target it is).
	ctr    *corev1.Container
	health string
	// unchanged: the manifest names the target already.
	unchanged bool
	// before is the pod as the hand-over found it; after as ready saw it.
	before, after podState
	stage         stage
	res           *Result
	t0            time.Time
}

// newSwap is the swap of c to its last pushed image (with Debug, to
// the debug image or, stopping, the image it replaced).
func (j *Job) newSwap(c build.Component) (*podSwap, error) {
	if j.Debug != nil {
		return j.newDebugSwap(c)
	}
	cs, err := j.pushed(c.Name)
	if err != nil {
		return nil, err
	}
	t := podImage{Pod: c.Binary, Image: cs.Pushed.Ref, Tag: cs.Pushed.Tag}
	if c.Name == "apiserver" && cs.Binary != nil && cs.Binary.SHA256 == cs.Pushed.BinarySHA256 {
		t.Version = cs.Binary.Version
	}
	return j.newPodSwap(t, false)
}

// newPodSwap is the swap of the static pod t.Pod to t.Image, a digest
// reference; restore: to the image the manifest named before (debug's
// stop), which may be a tag (kubeadm's), resolved by the node's runtime
// as a rollback's is (start).
func (j *Job) newPodSwap(t podImage, restore bool) (*podSwap, error) {
	if digest.Of(t.Image) == "" && !restore {
		return nil, fmt.Errorf("%s is not a digest reference (repo@sha256:…): push it first (devk push)", t.Image)
	}
	m := ManifestFor(j.Node.ManifestsDir, t.Pod)
	m.Debug = j.Debug
	pod, data, err := m.Read()
	if err != nil {
		return nil, err
	}
	c, err := staticpod.Container(pod, t.Pod)
	if err != nil {
		return nil, err
	}
	t.Image = digest.TaggedLike(c.Image, t.Image, t.Tag)
	unchanged := c.Image == t.Image
	if unchanged && j.Debug != nil {
		// The debug image may run with other debugger flags.
		out, _, err := staticpod.WithImage(data, pod, t.Pod, t.Image, j.Debug.wrap(), time.Time{})
		if err != nil {
			return nil, err
		}
		want, err := staticpod.Parse(out)
		if err != nil {
			return nil, err
		}
		unchanged = staticpod.SameButStamp(pod, want)
	}
	p := &podSwap{job: j, target: t, m: m, ctr: c.DeepCopy(), health: healthURL(c), unchanged: unchanged}
	if j.atStart() {
		p.health = "" // the component waits before main: running is all it does
	}
	p.res = &Result{Pod: t.Pod, ImageChange: ImageChange{OldImage: c.Image, NewImage: t.Image, Unchanged: p.unchanged}}
	return p, nil
}

// newRollback is the rollback of c to the manifest its backup holds.
func (j *Job) newRollback(c build.Component) (*podSwap, error) {
	m := ManifestFor(j.Node.ManifestsDir, c.Binary)
	backup, err := m.ReadBackup()
	if err != nil {
		return nil, err
	}
	bc, err := staticpod.Container(backup, c.Binary)
	if err != nil {
		return nil, err
	}
	// What the dir names now: nothing after a swap killed while the
	// manifest was moved out.
	current := ""
	if pod, _, err := m.Read(); err == nil {
		c, err := staticpod.Container(pod, c.Binary)
		if err != nil {
			return nil, err
		}
		current = c.Image
	}
	p := &podSwap{job: j, target: podImage{Pod: c.Binary, Image: bc.Image}, m: m, ctr: bc.DeepCopy(), health: healthURL(bc), unchanged: bc.Image == current}
	p.res = &Result{Pod: c.Binary, ImageChange: ImageChange{OldImage: current, NewImage: bc.Image, Restored: true, Unchanged: p.unchanged}}
	return p, nil
}

func (p *podSwap) want() string { return p.target.digest() }

// reached records that the swap this run wrote got to st. A phase run
// alone (`devk swap phase apiserver/verify`) on a manifest this run did
// not write leaves the stage alone, so Close never undoes or finishes
// what it did not start.
func (p *podSwap) reached(st stage) {
	if p.stage >= stageWritten {
		p.stage = max(p.stage, st)
	}
}

// start begins each of the pod's phases: the pod is the one in flight,
// its result is reported, and the node is connected.
func (p *podSwap) start(ctx context.Context) (*Target, error) {
	p.job.current = p
	reportOnce(&p.t0, &p.job.Report.StaticPods, p.res)
	n, err := p.job.connect(ctx)
	if err == nil && p.target.digest() == "" {
		p.target.Digest = n.digestOf(ctx, p.target.Image) // a rollback to kubeadm's tag
	}
	return n, err
}

// reportOnce starts a swap's clock (t0) and adds its result to the
// report (list), on its first phase only.
func reportOnce[R any](t0 *time.Time, list *[]*R, res *R) {
	if t0.IsZero() {
		*t0 = time.Now()
		*list = append(*list, res)
	}
}

// pull pulls the new image through CRI before the manifest changes: the
// old pod serves meanwhile, and the kubelet then starts the new one from
// a local image.
func (p *podSwap) pull(ctx context.Context) (phase.Outcome, error) {
	n, err := p.start(ctx)
	if err != nil {
		return phase.Done, err
	}
	n.Reporter.Infof("%s: %s -> %s", p.target.Pod, digest.ShortRef(p.ctr.Image), digest.ShortRef(p.target.Image))
	t0 := time.Now()
	if _, err := n.Runtime.PullImage(ctx, p.target.Image); err != nil {
		return phase.Done, fmt.Errorf("%w; nothing was changed", err)
	}
	failpoint.Hit("swap/after-pull")
	return phase.Changed("pulled %s in %s", shortDigest(p.want()), progress.Round(time.Since(t0))), nil
}

// backup keeps the manifest as the pending backup and writes the journal.
func (p *podSwap) backup(ctx context.Context) (phase.Outcome, error) {
	if _, err := p.start(ctx); err != nil {
		return phase.Done, err
	}
	if _, err := p.m.Begin(p.ctr.Name, p.target.Image); err != nil {
		return phase.Done, err
	}
	p.stage = stageBegun
	return phase.Changed("kept %s", p.m.PendingPath()), nil
}

// handOver moves the manifest out, stops the old container and waits
// for the kubelet to let go of the old pod (Target.handover).
func (p *podSwap) handOver(ctx context.Context) (phase.Outcome, error) {
	n, err := p.start(ctx)
	if err != nil {
		return phase.Done, err
	}
	before, err := n.observe(ctx, p.target.Pod, p.ctr.Name, p.health, true)
	if err != nil {
		return phase.Done, err
	}
	p.before = before
	p.stage = max(p.stage, stageHandingOver)
	t0 := time.Now()
	n.handover(ctx, p.m, p.target.Pod, before)()
	if ctx.Err() != nil {
		return phase.Done, fmt.Errorf("interrupted during the hand-over: %w", context.Cause(ctx))
	}
	return phase.Changed("old pod released in %s", progress.Round(time.Since(t0))), nil
}

// write puts the new manifest in place (for a rollback: the backup).
func (p *podSwap) write(ctx context.Context) (phase.Outcome, error) {
	if _, err := p.start(ctx); err != nil {
		return phase.Done, err
	}
	if p.job.Rollback {
		if _, err := p.m.Restore(p.ctr.Name, nil); err != nil {
			return phase.Done, err
		}
		p.stage = stageWritten
		return phase.Changed("restored %s", p.m.Path), nil
	}
	if err := p.m.WriteImage(p.ctr.Name, p.target.Image); err != nil {
		return phase.Done, err
	}
	p.stage = stageWritten
	failpoint.Hit("swap/after-write")
	return phase.Changed("%s names %s", p.m.Path, digest.ShortRef(p.target.Image)), nil
}

// ready waits until a new container runs the digest and is healthy.
func (p *podSwap) ready(ctx context.Context) (phase.Outcome, error) {
	n, err := p.start(ctx)
	if err != nil {
		return phase.Done, err
	}
	failpoint.Hit("swap/wait-ready")
	s, err := n.ready(ctx, p.target.Pod, p.ctr.Name, p.health, p.before, p.want(), p.t0, p.res)
	p.after = s
	if err != nil {
		return phase.Done, err
	}
	p.reached(stageReady)
	return phase.Changed("ready in %s", progress.Round(p.res.Ready)), nil
}

// verify waits for the mirror pod to show the new pod, then checks every
// view of what runs. A check about the node that fails rolls the swap
// back; a lagging mirror pod fails the swap but keeps it.
func (p *podSwap) verify(ctx context.Context) (phase.Outcome, error) {
	n, err := p.start(ctx)
	if err != nil {
		return phase.Done, err
	}
	s := p.after
	var mirrorErr error
	if p.unchanged {
		if s, err = n.observe(ctx, p.target.Pod, p.ctr.Name, p.health, true); err != nil {
			return phase.Done, err
		}
		if p.job.Rollback {
			p.stage = stageReady // already on the backup's image: Close drops the journal
		}
	} else if !p.job.atStart() {
		s, mirrorErr = n.awaitMirror(ctx, p.target.Pod, p.ctr.Name, p.health, p.before, p.after, p.want(), p.res)
		if !p.job.Rollback {
			failpoint.Hit("swap/verify")
		}
	}
	p.res.Checks = n.verify(ctx, p.target, s, p.health)
	if p.job.atStart() {
		// Until a client continues it the component serves nothing: its
		// health and its pod's report through the API wait for that.
		p.res.Checks = slices.DeleteFunc(nodeChecks(p.res.Checks), func(c Check) bool { return c.Name == checkHealthy })
	}
	p.res.Took = time.Since(p.t0)
	if err := checksError(nodeChecks(p.res.Checks)); err != nil {
		if (p.stage == stageWritten || p.stage == stageReady) && !p.job.Rollback {
			p.stage = stageWritten // the node does not run what was pushed: roll back
		}
		return phase.Done, err
	}
	p.reached(stageReady)
	if mirrorErr != nil {
		if p.job.Rollback {
			return phase.Done, fmt.Errorf("%s runs the restored image and is healthy, but %w", p.target.Pod, mirrorErr)
		}
		return phase.Done, fmt.Errorf("%s runs the pushed digest and is healthy, but %w (the kubelet updates mirror pods lazily; `devk digest verify %s` checks again)", p.target.Pod, mirrorErr, p.target.Pod)
	}
	if err := checksError(p.res.Checks); err != nil {
		return phase.Done, err
	}
	if p.job.atStart() {
		return phase.Unchanged("%d checks passed; %s waits before main for a debugger client: health and the mirror pod are checked once it runs on (devk digest verify)", len(p.res.Checks), p.target.Pod), nil
	}
	return phase.Unchanged("%d checks passed", len(p.res.Checks)), nil
}

// finish ends the swap: what it replaced becomes the backup for
// --rollback and the journal goes (a rollback only drops the journal).
func (p *podSwap) finish(ctx context.Context) (phase.Outcome, error) {
	if _, err := p.start(ctx); err != nil {
		return phase.Done, err
	}
	if p.job.Rollback {
		if err := p.m.Discard(); err != nil {
			return phase.Done, err
		}
		p.stage = stageDone
		return phase.Changed("journal dropped; %s stays", p.m.BackupPath()), nil
	}
	if err := p.m.Finish(); err != nil {
		return phase.Done, err
	}
	p.stage = stageDone
	if p.res.Took == 0 {
		p.res.Took = time.Since(p.t0)
	}
	return phase.Changed("the replaced manifest is %s", p.m.BackupPath()), nil
}

// undo ends a swap whose run failed (err) at its stage: a journal with
// nothing changed is dropped; a manifest moved out is put back and the
// old pod waited for; a new manifest in place is rolled back (with the
// failed container's last log lines in the result); a new pod that runs
// healthy is kept. A rollback that stopped after the hand-over still
// writes the backup. The result wraps err.
func (p *podSwap) undo(ctx context.Context, err error) error {
	n := p.job.target
	if p.stage == stageDone || n == nil {
		return err
	}
	defer func() {
		p.stage = stageDone
		p.res.Took = time.Since(p.t0)
	}()
	if p.job.Rollback {
		switch p.stage {
		case stageHandingOver:
			if _, rerr := p.m.Restore(p.ctr.Name, nil); rerr != nil {
				return errors.Join(err, rerr)
			}
		case stageReady:
			return errors.Join(err, p.m.Discard())
		}
		return err
	}
	switch p.stage {
	case stageBegun:
		// Interrupted before the node was touched: nothing to undo.
		return errors.Join(err, p.m.Discard())
	case stageHandingOver:
		// The old manifest goes back; the swap ends when its pod runs.
		p.res.RolledBack = true
		return n.awaitRestored(ctx, p.m, p.target.Pod, p.ctr, p.m.putBack(p.ctr.Name, err))
	case stageWritten:
		// Log of the failed container first, then the old manifest.
		if cr := p.after.crashed; cr != nil && cr.LogPath != "" {
			p.res.Log, _ = crilog.Tail(cr.LogPath, max(n.LogLines, DefaultLogLines))
		}
		if len(p.res.Log) == 0 {
			p.res.Log = n.lastLog(ctx, p.target.Pod, p.ctr.Name, p.before.containerID)
		}
		p.res.RolledBack = true
		n.Reporter.Infof("%s: %v; rolling back to %s", p.target.Pod, err, digest.ShortRef(p.ctr.Image))
		return n.rollBack(ctx, p.m, p.target.Pod, p.ctr, err)
	case stageReady:
		// The new pod runs healthy on the digest: keep it.
		return errors.Join(err, p.m.Finish())
	}
	return err
}
