package swap

import (
	"errors"
	"io/fs"
	"os"
	"time"
)

// The kubelet starts a static pod only once no other pod of the same full
// name is started: a new pod that arrives while the old one's pod worker
// is still finishing is re-queued with a 10-15 s back-off. Nothing outside
// the kubelet shows the moment the worker lets go (pkg/kubelet/pod_workers:
// completeTerminated), but its steps are visible and timed (measured with
// --vmodule=pod_workers=4 on a devk cluster):
//
//  1. SyncTerminatingPod stops the containers and the sandbox: CRI shows
//     the sandbox NOTREADY.
//  2. The worker then waits for a pod-cache entry newer than that, i.e.
//     the next PLEG relist (every 1 s), and for the pod's volumes to be
//     unmounted, removes the pod cgroup and lets go: 0.9 s after step 1.
//  3. Housekeeping (every 2 s) removes the pod's directory under the
//     kubelet root once its volumes are unmounted: before or after step 2.
//
// So the old pod counts as released once its sandbox has been stopped
// for longer than a relist and its directory has been gone for a moment.
// One step is exact: the last of step 2, the removal of the pod's cgroup,
// comes right before the worker lets go. When the old container's pod
// cgroup is known (cri.Client.PodCgroup), its removal is the release,
// without waiting out a whole relist or the housekeeping.
const (
	relistWait = 1250 * time.Millisecond
	dirMargin  = 300 * time.Millisecond
	// cgroupMargin is how long after the pod cgroup is gone the release
	// counts: the worker's last steps after it take microseconds.
	cgroupMargin = 50 * time.Millisecond
)

// releaseClock turns polls of the old pod's sandbox and directory into the
// decision that the kubelet has let go of it.
type releaseClock struct {
	// checkDir is false when the kubelet root is unknown.
	checkDir bool
	// checkCgroup says the old pod's cgroup is known: its removal, not
	// the relist and the directory, is the release.
	checkCgroup    bool
	sandboxStopped time.Time
	dirGone        time.Time
	cgroupGone     time.Time
}

// released records one poll at now (is any sandbox of the pod's name
// ready, does any of their directories exist, does the old pod's cgroup)
// and reports whether the kubelet has let go of them.
// A sandbox that is ready again, or a directory that is back (a pod the
// kubelet was still starting), starts the clock over.
func (r *releaseClock) released(now time.Time, sandboxReady, dirExists, cgroupExists bool) bool {
	switch {
	case sandboxReady:
		r.sandboxStopped = time.Time{}
	case r.sandboxStopped.IsZero():
		r.sandboxStopped = now
	}
	switch {
	case dirExists && r.checkDir:
		r.dirGone = time.Time{}
	case r.dirGone.IsZero():
		r.dirGone = now
	}
	if r.checkCgroup {
		switch {
		case cgroupExists:
			r.cgroupGone = time.Time{}
		case r.cgroupGone.IsZero():
			r.cgroupGone = now
		}
		if r.sandboxStopped.IsZero() || r.cgroupGone.IsZero() {
			return false
		}
		return now.Sub(r.cgroupGone) >= cgroupMargin && now.Sub(r.sandboxStopped) >= cgroupMargin
	}
	if r.sandboxStopped.IsZero() || r.dirGone.IsZero() {
		return false
	}
	return now.Sub(r.sandboxStopped) >= relistWait && (!r.checkDir || now.Sub(r.dirGone) >= dirMargin)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
