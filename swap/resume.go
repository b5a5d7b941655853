package swap

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/internal/staticpod"
)

// rollBack undoes a swap whose new manifest is in place: the old one goes
// back at once, then the old pod must run healthy again, and only then is
// the journal discarded. A first Ctrl-C does not stop this (undoing is
// what it asks for); a second stops the waiting and leaves the journal,
// so the next `devk swap` finishes the job.
func (n *Target) rollBack(ctx context.Context, m Manifest, podName string, c *corev1.Container, why error) error {
	cctx := interrupt.Cleanup(ctx)
	cur, _ := n.observe(cctx, podName, c.Name, healthURL(c), true)
	if _, err := m.Restore(c.Name, n.handover(cctx, m, podName, cur)); err != nil {
		return fmt.Errorf("%s: %v; and the rollback failed: %w (the old manifest is at %s; `%s` tries again)", podName, why, err, m.PendingPath(), n.command())
	}
	return n.awaitRestored(ctx, m, podName, c, fmt.Errorf("%w: %w", ErrRolledBack, why))
}

// awaitRestored waits, on the cleanup context, for the old pod to run
// healthy on its image after its manifest was put back, then discards
// the journal; the result is why (what made the swap go back) or the
// reason the old pod is not back.
func (n *Target) awaitRestored(ctx context.Context, m Manifest, podName string, c *corev1.Container, why error) error {
	cctx := interrupt.Cleanup(ctx)
	if ctx.Err() != nil {
		n.Reporter.Infof("%s: the old manifest is back; waiting for the old pod (interrupt again to stop waiting)", podName)
	}
	if _, err := n.waitFor(cctx, podName, c.Name, healthURL(c), putBackContainer, n.digestOf(cctx, c.Image), false); err != nil {
		if cctx.Err() != nil {
			return fmt.Errorf("%s: %w; stopped waiting for the old pod: its manifest is in place and the journal stays (`%s` finishes the job)", podName, why, n.command())
		}
		return fmt.Errorf("%s: %w; and the old pod is not healthy again: %v", podName, why, err)
	}
	if err := m.Discard(); err != nil {
		return fmt.Errorf("%s: %w; the old pod runs again, but %v", podName, why, err)
	}
	return fmt.Errorf("%s: %w", podName, why)
}

// restoreOld is what undoing an interrupted swap and ending a run share
// once the manifest does not name the swap's new image: a manifest moved
// out (current "") is restored from the backup after handover (when not
// nil); one naming the old image stays; one naming another image (it was
// rewritten since, by `devk up` or by hand) is left alone, the journal
// dropped, and left is true. res says what the pod runs.
func (n *Target) restoreOld(m Manifest, podName string, old *corev1.Container, j *Journal, current string, handover func(), res *Result) (left bool, err error) {
	res.NewImage, res.Restored = j.OldImage, true
	switch current {
	case "":
		if _, err := m.Restore(old.Name, handover); err != nil {
			return false, fmt.Errorf("put %s back: %w (the manifest is at %s; `%s` tries again)", podName, err, m.PendingPath(), n.command())
		}
		failpoint.Hit("swap/after-put-back")
	case j.OldImage:
	default:
		n.Reporter.Infof("%s: its manifest names %s now, not %s as before (it was rewritten since): left as it is", podName, digest.ShortRef(current), digest.ShortRef(j.OldImage))
		res.NewImage, res.Restored, res.Unchanged = current, false, true
		return true, m.Discard()
	}
	return false, nil
}

// exitedBefore is the state to wait for a put-back pod from: any
// container on the image will do, but the one the hand-over (or an
// interrupted swap's) stopped exited before, and that is not the
// put-back pod failing.
func (n *Target) exitedBefore(ctx context.Context, podName string, c *corev1.Container) podState {
	before := putBackContainer
	if st, err := n.observe(ctx, podName, c.Name, healthURL(c), true); err == nil {
		before.crashed = st.crashed
	}
	return before
}

// Resume completes a swap that a kill or a second Ctrl-C interrupted,
// from what its journal and the node show: a new manifest in place is
// waited for and kept if its pod runs healthy on the journal's digest
// (else rolled back, as the swap would have); a vacated manifest is put
// back; a manifest back on the old image has its pod waited for; a
// manifest that names neither image (rewritten since, by `devk up` or by
// hand) is left alone. An interrupted `devk run` (j.Run) is put back
// (putBack). The journal is gone afterwards.
func (n *Target) Resume(ctx context.Context, podName string, j *Journal) (*Result, error) {
	if j.Run != nil {
		n.Reporter.Infof("%s: `devk run` took it out at %s and was interrupted; putting it back", podName, j.Started.Local().Format("15:04:05"))
		res, err := n.putBack(ctx, podName, j, true)
		if res != nil {
			res.Resumed = true
		}
		return res, err
	}
	t0 := time.Now()
	m := ManifestFor(n.ManifestsDir, podName)
	backup, err := m.ReadBackup()
	if err != nil {
		return nil, fmt.Errorf("finish the interrupted swap of %s: %w", podName, err)
	}
	old, err := staticpod.Container(backup, podName)
	if err != nil {
		return nil, err
	}
	current := currentImage(m, podName)
	res := &Result{Pod: podName, ImageChange: ImageChange{OldImage: j.OldImage, NewImage: j.NewImage}, Resumed: true}
	n.Reporter.Infof("%s: a swap to %s was interrupted at %s; finishing it", podName, digest.ShortRef(j.NewImage), j.Started.Local().Format("15:04:05"))
	if current == j.NewImage {
		// As the swap would have: ready, then the mirror pod catching up
		// (restarting devk's kubelet if it lags after an API server swap).
		s, mirrorErr, err := n.settle(ctx, podName, old.Name, healthURL(old), anyContainer, digest.Of(j.NewImage), t0, res)
		if err == nil {
			res.Checks = n.verify(ctx, podImage{Pod: podName, Image: j.NewImage}, s, healthURL(old))
			if err := m.Finish(); err != nil {
				return res, err
			}
			res.Took = time.Since(t0)
			if mirrorErr != nil {
				return res, fmt.Errorf("%s runs the interrupted swap's digest and is healthy, but %w", podName, mirrorErr)
			}
			return res, checksError(res.Checks)
		}
		if ctx.Err() != nil {
			return res, err
		}
		res.RolledBack = true
		err = n.rollBack(ctx, m, podName, old, err)
		res.Took = time.Since(t0)
		return res, err
	}
	if left, err := n.restoreOld(m, podName, old, j, current, n.handover(ctx, m, podName, podState{}), res); left || err != nil {
		res.Took = time.Since(t0)
		return res, err
	}
	before := n.exitedBefore(ctx, podName, old)
	if _, err := n.waitFor(ctx, podName, old.Name, healthURL(old), before, n.digestOf(ctx, j.OldImage), false); err != nil {
		return res, fmt.Errorf("%s: put back on %s after an interrupted swap, but %w", podName, digest.ShortRef(j.OldImage), err)
	}
	res.Took = time.Since(t0)
	return res, m.Discard()
}
