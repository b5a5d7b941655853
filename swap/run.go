package swap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/internal/staticpod"
)

// A `devk run` hands a static pod over to a process the way a swap hands
// it over to a new image: Manifest.BeginRun keeps the manifest as the
// pending backup and writes a journal naming the run; TakeOut moves the
// manifest out and waits until the kubelet has let go of the pod; the
// process runs; PutBack writes the manifest back and waits until the pod
// runs its image again, verified as a swap verifies. A run that was
// killed is put back by the next command that resumes the node's
// journals (ResumeAll: swap, watch, run) or writes its manifests
// (ReturnRun: up).

// RunStopGrace is how long a process a `devk run` left behind gets after
// SIGTERM before it is killed, when the command putting its pod back
// finds it still running (devk was killed and the process outlived it).
const RunStopGrace = 5 * time.Second

// TakeOut is a run's hand-over: the manifest (its container c) moves
// out of the manifests dir, the pod's container stops at once, and the
// kubelet lets go of the pod, so that its ports are free for the process
// run in its place. Manifest.BeginRun comes first.
func (n *Target) TakeOut(ctx context.Context, podName string, c *corev1.Container) error {
	m := ManifestFor(n.ManifestsDir, podName)
	before, err := n.observe(ctx, podName, c.Name, healthURL(c), true)
	if err != nil {
		return err
	}
	n.handover(ctx, m, podName, before)()
	failpoint.Hit("run/after-take-out")
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted while taking %s out: %w", podName, context.Cause(ctx))
	}
	return nil
}

// PutBack ends the run its journal j records: the process, if it still
// runs, is stopped; the manifest goes back (unless it is back already);
// the pod must run the manifest's image healthy; then the checks of a
// swap (manifest, CRI imageRef, mirror pod, health) must pass, and the
// journal goes. It runs on the cleanup context: a first Ctrl-C does not
// stop it (putting the pod back is what it asks for); a second leaves
// the journal for the next command.
func (n *Target) PutBack(ctx context.Context, podName string, j *Journal) (*Result, error) {
	return n.putBack(ctx, podName, j, false)
}

// putBack is PutBack; handover waits for the kubelet to let go of the
// pod before the manifest goes back, for a run whose take-out may not
// have finished (one that was killed).
func (n *Target) putBack(ctx context.Context, podName string, j *Journal, handover bool) (*Result, error) {
	cctx := interrupt.Cleanup(ctx)
	t0 := time.Now()
	m := ManifestFor(n.ManifestsDir, podName)
	res := &Result{Pod: podName, ImageChange: ImageChange{OldImage: j.OldImage}, Run: true}
	if j.Run != nil {
		if stopped, err := j.Run.Process.Stop(cctx, RunStopGrace); err != nil {
			return res, fmt.Errorf("%s: stop the process `devk run` left (pid %d): %w; the journal stays", podName, j.Run.Process.PID, err)
		} else if stopped {
			n.Reporter.Infof("%s: stopped the process `devk run` left running (pid %d)", podName, j.Run.Process.PID)
		}
	}
	backup, err := m.ReadBackup()
	if err != nil {
		return res, fmt.Errorf("put %s back: %w", podName, err)
	}
	old, err := staticpod.Container(backup, podName)
	if err != nil {
		return res, err
	}
	var h func()
	if handover {
		h = n.handover(cctx, m, podName, podState{})
	}
	if left, err := n.restoreOld(m, podName, old, j, currentImage(m, podName), h, res); left || err != nil {
		res.Took = time.Since(t0)
		return res, err
	}
	before := n.exitedBefore(cctx, podName, old)
	// The digest the pod must run: the image's own, or, for a manifest
	// that names a tag alone (kubeadm's), the runtime's for it.
	want := n.digestOf(cctx, j.OldImage)
	s, mirrorErr, err := n.settle(cctx, podName, old.Name, healthURL(old), before, want, t0, res)
	if err != nil {
		if cctx.Err() != nil {
			return res, fmt.Errorf("%s: stopped waiting for it: its manifest is back and the journal stays (`%s` finishes the job)", podName, n.command())
		}
		return res, fmt.Errorf("%s: its manifest is back, but %w", podName, err)
	}
	res.Checks = n.verify(cctx, podImage{Pod: podName, Image: j.OldImage, Digest: want}, s, healthURL(old))
	res.Took = time.Since(t0)
	if err := m.Discard(); err != nil {
		return res, err
	}
	if mirrorErr != nil {
		return res, fmt.Errorf("%s runs %s again and is healthy, but %w", podName, digest.ShortRef(j.OldImage), mirrorErr)
	}
	return res, checksError(res.Checks)
}

// currentImage is the image the manifest names for container podName,
// "" when there is no manifest (moved out) or it names none.
func currentImage(m Manifest, podName string) string {
	pod, _, err := m.Read()
	if err != nil {
		return ""
	}
	c, err := staticpod.Container(pod, podName)
	if err != nil {
		return ""
	}
	return c.Image
}

// ResumeAll finishes or undoes, pod by pod in the catalog's order, every
// interrupted swap and run of the node whose manifests dir is dir
// (Target.Resume), connecting to the node only when there is one. skip
// leaves a pod's journal alone (a --rollback of it restores instead).
// It returns what each resume did.
func ResumeAll(ctx context.Context, dir string, connect func(context.Context) (*Target, error), skip func(build.Component) bool) ([]*Result, error) {
	var out []*Result
	for _, c := range build.Catalog {
		if !c.StaticPod || (skip != nil && skip(c)) {
			continue
		}
		jr, err := ManifestFor(dir, c.Binary).InProgress()
		if err != nil {
			return out, err
		}
		if jr == nil {
			continue
		}
		n, err := connect(ctx)
		if err != nil {
			return out, err
		}
		res, err := n.Resume(ctx, c.Binary, jr)
		if res != nil {
			out = append(out, res)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// ReturnRun, for a job that writes the node's manifests itself (`devk
// up`), puts back the static pod of m that an interrupted `devk run`
// took out, as a file: a process the run left is stopped, the manifest
// is restored from the pending backup if it is not in place, and the
// journal goes. The job then writes the manifest as it would and waits
// for the pod itself. It reports whether there was such a run; a swap's
// journal is left to `devk swap`.
func (m Manifest) ReturnRun(ctx context.Context, container string) (bool, error) {
	j, err := m.InProgress()
	if err != nil || j == nil || j.Run == nil {
		return false, err
	}
	if _, err := j.Run.Process.Stop(ctx, RunStopGrace); err != nil {
		return true, fmt.Errorf("stop the process `devk run` left (pid %d): %w", j.Run.Process.PID, err)
	}
	if _, err := os.Stat(m.Path); errors.Is(err, fs.ErrNotExist) {
		if _, err := m.Restore(container, nil); err != nil {
			return true, fmt.Errorf("put back the manifest `devk run` took out: %w (it is at %s)", err, m.PendingPath())
		}
	}
	return true, m.Discard()
}
