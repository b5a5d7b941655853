package swap

import (
	"context"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/validname"
)

const (
	// KubeletBackoff is how long the kubelet makes a static pod wait when
	// its manifest arrives while the previous pod of that name is still
	// terminating (10-15 s); the hand-over waits at most that long for
	// the release, since waiting longer gains nothing.
	KubeletBackoff = 10 * time.Second
	// handoverPoll is how often the hand-over looks at the runtime and the
	// kubelet's pod directories: the release is timed to a relist (1 s).
	handoverPoll = 50 * time.Millisecond
	// startWait is how long after a manifest was written the kubelet
	// surely has a sandbox for its pod.
	startWait = 5 * time.Second
)

// handover runs between writing the backup and writing the new manifest:
// it vacates the manifest, stops the running container without grace (the
// kubelet would wait out the pod's termination grace period, 30 s for the
// apiserver; with StopGrace, a SIGTERM and that long at most: an API
// server behind a load balancer ends its connections gracefully, its
// HTTP/2 clients told to go elsewhere), and waits, at most KubeletBackoff, until the kubelet has
// released every pod of that name (see release.go), so the new pod starts
// at once instead of after the kubelet's back-off. "Every pod": after a
// swap killed midway, the kubelet may still be starting the pod it was
// handed.
func (n *Target) handover(ctx context.Context, m Manifest, podName string, old podState) func() {
	return func() {
		full := n.pod(podName, podName).FullName()
		ours := func(name string) bool { return name == full }
		uids := map[string]bool{}
		if old.podUID != "" {
			uids[old.podUID] = true
		}
		// A manifest written moments ago (by a swap killed right after
		// writing it) names a pod the kubelet is starting: let its
		// sandbox appear, so that the wait below knows that pod too.
		if fi, err := os.Stat(m.Path); err == nil && time.Since(fi.ModTime()) < startWait {
			_ = wait.PollUntilContextTimeout(ctx, handoverPoll, startWait-time.Since(fi.ModTime()), true, func(ctx context.Context) (bool, error) {
				uid := n.sandboxSince(ctx, ours, fi.ModTime())
				if uid != "" {
					uids[uid] = true
				}
				return uid != "", nil
			})
		}
		if err := m.Vacate(); err != nil {
			n.Reporter.Debugf("vacate %s: %v", m.Path, err)
			return
		}
		failpoint.Hit("swap/after-vacate")
		// The old pod's cgroup, while its container still runs: its
		// removal is the release (release.go).
		cgroup := ""
		if old.containerID != "" && old.podUID != "" {
			var err error
			if cgroup, err = n.Runtime.PodCgroup(ctx, old.containerID, old.podUID); err != nil {
				n.Reporter.Debugf("the old pod's cgroup (the release is then timed by the relist): %v", err)
			}
		}
		if old.containerID != "" {
			if err := n.Runtime.StopContainer(ctx, old.containerID, n.StopGrace); err != nil {
				n.Reporter.Debugf("stop old container: %v", err)
			}
		}
		if podName == etcdPod {
			n.stopAPIServer(ctx)
		}
		n.waitReleased(ctx, podName, ours, uids, cgroup)
	}
}

// etcdPod is the static pod whose hand-over stops the node's API server
// too (see stopAPIServer).
const etcdPod = "etcd"

// apiServerPod is the static pod stopAPIServer stops.
const apiServerPod = "kube-apiserver"

// stopAPIServer stops the node's API server containers (no grace) once
// etcd is gone: with etcd stopped, the kubelet's deletion of etcd's
// orphaned mirror pod, in its housekeeping, hangs on an API server that
// still accepts requests until each times out (34 s, again and again),
// and its sync loop starts the new etcd only after that: measured, the
// new etcd ran 1-2 minutes after the swap began, when the API server's
// liveness probe had it restarted and the deletion failed fast. An API
// server cannot serve without its etcd anyway; the kubelet restarts it
// and it reconnects to the new etcd.
func (n *Target) stopAPIServer(ctx context.Context) {
	full := n.pod(apiServerPod, apiServerPod).FullName()
	cts, err := n.Runtime.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, RunningOnly: true})
	if err != nil {
		n.Reporter.Debugf("list containers: %v", err)
		return
	}
	for _, ct := range cts {
		if ct.PodName != full {
			continue
		}
		if err := n.Runtime.StopContainer(ctx, ct.ID, 0); err != nil {
			n.Reporter.Debugf("stop %s %s: %v", apiServerPod, cri.ShortID(ct.ID), err)
			continue
		}
		n.Reporter.Debugf("stopped %s %s with etcd: it restarts on the new one", apiServerPod, cri.ShortID(ct.ID))
	}
}

// waitReleased waits, at most KubeletBackoff, until the kubelet has let
// go of every pod of the name (uids are those known so far; more may
// show up). cgroup, when known, is the old pod's cgroup: while that pod
// is the only one, its removal is the release.
func (n *Target) waitReleased(ctx context.Context, podName string, ours func(string) bool, uids map[string]bool, cgroup string) {
	rc := releaseClock{checkDir: n.KubeletRootDir != ""}
	t0 := time.Now()
	failpoint.Hit("swap/handover")
	err := wait.PollUntilContextTimeout(ctx, handoverPoll, KubeletBackoff, true, func(ctx context.Context) (bool, error) {
		n.stopRestarted(ctx, podName, ours, uids)
		ready := false
		if sbs, err := n.Runtime.Sandboxes(ctx, metav1.NamespaceSystem); err == nil {
			for _, sb := range sbs {
				if ours(sb.PodName) && sb.Ready {
					ready = true
					uids[sb.PodUID] = true
				}
			}
		}
		dirs := false
		for uid := range uids {
			if dir, err := validname.PathIn(n.KubeletRootDir, "pods", uid); err == nil {
				dirs = dirs || (rc.checkDir && exists(dir))
			}
		}
		// Another pod of the name (one the kubelet was starting) has a
		// cgroup of its own: the relist and the directories then decide.
		rc.checkCgroup = cgroup != "" && len(uids) == 1
		if len(uids) > 0 && rc.released(time.Now(), ready, dirs, rc.checkCgroup && exists(cgroup)) {
			how := "its sandbox stopped a relist ago, its directory gone"
			if rc.checkCgroup {
				how = "its cgroup removed"
			}
			n.Reporter.Debugf("the kubelet released the old pod in %s (%s)", progress.Round(time.Since(t0)), how)
			return true, nil
		}
		// No pod of that name ran: nothing to wait for.
		return len(uids) == 0 && time.Since(t0) > relistWait, nil
	})
	if err != nil && ctx.Err() == nil {
		n.Reporter.Infof("%s: the kubelet has not let go of the old pod after %s; the new one may wait out the kubelet's %s back-off", podName, progress.Round(time.Since(t0)), KubeletBackoff)
	}
}

// stopRestarted stops every running container of the pod's name: a sync
// the kubelet's pod worker had queued before it saw the manifest go can
// restart the container just stopped, which it would then kill with the
// pod's grace period (30 s for the apiserver).
func (n *Target) stopRestarted(ctx context.Context, podName string, ours func(string) bool, uids map[string]bool) {
	cts, err := n.Runtime.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, RunningOnly: true})
	if err != nil {
		return
	}
	for _, ct := range cts {
		if !ours(ct.PodName) {
			continue
		}
		uids[ct.PodUID] = true
		n.Reporter.Debugf("a container of %s still runs (%s); stopping it", podName, cri.ShortID(ct.ID))
		if err := n.Runtime.StopContainer(ctx, ct.ID, 0); err != nil {
			n.Reporter.Debugf("stop %s: %v", cri.ShortID(ct.ID), err)
		}
	}
}

// sandboxSince is the UID of a sandbox of the pod made after t, if any.
func (n *Target) sandboxSince(ctx context.Context, ours func(string) bool, t time.Time) string {
	sbs, err := n.Runtime.Sandboxes(ctx, metav1.NamespaceSystem)
	if err != nil {
		return ""
	}
	for _, sb := range sbs {
		if ours(sb.PodName) && !sb.CreatedAt.Before(t) {
			return sb.PodUID
		}
	}
	return ""
}
