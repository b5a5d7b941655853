package swap

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
)

const (
	// DefaultTimeout bounds the wait for a new pod to run healthy before
	// the swap is rolled back (--timeout).
	DefaultTimeout = 3 * time.Minute
	// pollInterval is how often a wait looks at the node: a tenth of a
	// second, so that ready and verified are reported within that of the
	// moment (each look is a CRI list, a probe and, for the mirror pod, a
	// GET).
	pollInterval = 100 * time.Millisecond
	// mirrorGrace is how long after ready the mirror pod gets before devk
	// says why it waits (and, on its own cluster, restarts the kubelet).
	mirrorGrace = 2 * time.Second
	// crashSlack is how long before a wait began a container that exited
	// may have been created and still count as the new one (the
	// runtime's clock and ours).
	crashSlack = time.Second
)

// waitFor polls until a container other than before's runs digest, is
// healthy, and (with mirror) the mirror pod shows the running pod's
// config hash and the digest.
func (n *Target) waitFor(ctx context.Context, podName, container, health string, before podState, want string, mirror bool) (podState, error) {
	since := time.Now()
	timeout := n.timeout()
	var last podState
	stage := "the kubelet to start the new container"
	restarted := "" // a put-back container that exited, which the kubelet restarts
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		s, err := n.observe(ctx, podName, container, health, mirror)
		if err != nil {
			return false, nil // the runtime may be busy: look again
		}
		last = s
		if cr := s.crashed; cr != nil && digest.Of(cr.ImageRef) == want && cr.CreatedAt.After(since.Add(-crashSlack)) && !before.hadCrashed(cr) {
			if !before.restarts {
				return false, fmt.Errorf("the new container exited with code %d (%s)", cr.ExitCode, cr.Reason)
			}
			restarted = fmt.Sprintf(" (a container of it exited with code %d (%s), and the kubelet restarts it)", cr.ExitCode, cr.Reason)
		}
		switch {
		case s.containerID == "" || s.containerID == before.containerID || digest.Of(s.imageRef) != want:
			stage = "the kubelet to start a container of " + shortDigest(want)
		case !s.healthy:
			stage = fmt.Sprintf("%s to be healthy (%v)", health, s.healthErr)
		case !mirror:
			return true, nil
		case s.configHash != s.podUID:
			// A static pod's UID is its config hash: the mirror pod
			// shows the new pod once its hash is the running pod's
			// UID. (Comparing with the hash before the swap is wrong
			// when the mirror pod still lags behind an earlier edit.)
			stage = "the mirror pod's " + digest.ConfigHashAnnotation + " to become " + s.podUID
		case digest.Of(s.mirrorImage) != want:
			stage = "the mirror pod to report the new imageID"
		default:
			return true, nil
		}
		return false, nil
	})
	switch {
	case err == nil:
		return last, nil
	case poll.TimedOut(ctx, err):
		return last, fmt.Errorf("timed out after %s waiting for %s%s", timeout, stage, restarted)
	case ctx.Err() != nil:
		return last, ctx.Err()
	}
	return last, err
}

// ready waits for the new container to run want and be healthy; then the
// pod is ready, recorded in res.Ready (from t0), and res.Started is when
// the runtime started that container: Ready - Started is the component's
// own start-up, Started what the swap took before it.
func (n *Target) ready(ctx context.Context, podName, container, health string, before podState, want string, t0 time.Time, res *Result) (podState, error) {
	s, err := n.waitFor(ctx, podName, container, health, before, want, false)
	if err != nil {
		return s, err
	}
	res.Ready = time.Since(t0)
	if st, err := n.Runtime.ContainerStatus(ctx, s.containerID); err == nil && !st.StartedAt.IsZero() {
		res.Started = st.StartedAt.Sub(t0)
	}
	started := ""
	if res.Started > 0 {
		started = fmt.Sprintf(" (its container started at %s)", progress.Round(res.Started))
	}
	n.Reporter.Infof("%s: ready in %s%s, running %s", podName, progress.Round(res.Ready), started, shortDigest(want))
	return s, nil
}

// awaitMirror waits, after ready, for the mirror pod to show the new pod.
// It cannot fail the swap: a mirror pod that lags is returned as
// mirrorErr, with the last observation.
//
// The mirror pod lags when the API server itself was restarted: the
// kubelet learns of mirror pods through its pod watch, whose reflector
// backs off on every failed attempt while the API server is down
// (client-go: 0.8 s doubling to 30 s, jittered up to twice that, reset
// only after two quiet minutes; a watch resumed on the new API server
// with an old resourceVersion fails once more), and until that watch sees
// the new mirror pod the kubelet's status manager drops the pod's status
// ("Pod was deleted and then recreated, skipping status update"). API
// server swaps less than two minutes apart thus wait longer each time,
// up to two minutes. A kubelet devk supervises is restarted instead
// (n.Relist): it lists at once, and its pods keep running.
func (n *Target) awaitMirror(ctx context.Context, podName, container, health string, before, ready podState, want string, res *Result) (podState, error) {
	gctx, cancel := context.WithTimeout(ctx, mirrorGrace)
	ms, err := n.waitFor(gctx, podName, container, health, before, want, true)
	cancel()
	if err == nil {
		return ms, nil
	}
	if ctx.Err() != nil {
		return ready, ctx.Err()
	}
	if n.Relist != nil {
		n.Reporter.Infof("%s: the kubelet has not reported the new pod in its mirror pod (its pod watch backs off after an API server restart); restarting devk's kubelet so that it lists pods again", podName)
		if err := n.Relist(ctx); err != nil {
			n.Reporter.Infof("%s: restart the kubelet: %v", podName, err)
		} else {
			res.KubeletRestarted = true
		}
	} else {
		n.Reporter.Infof("%s: waiting for the kubelet to report the new pod in its mirror pod (after an API server restart the kubelet's pod watch backs off, up to two minutes)", podName)
	}
	ms, err = n.waitFor(ctx, podName, container, health, before, want, true)
	if err != nil {
		return ready, err
	}
	return ms, nil
}

// settle is ready, then awaitMirror: what a swap, a rollback and a resumed
// swap wait for once the manifest is written. Only the first wait can
// fail (err); a lagging mirror pod is mirrorErr.
func (n *Target) settle(ctx context.Context, podName, container, health string, before podState, want string, t0 time.Time, res *Result) (s podState, mirrorErr, err error) {
	failpoint.Hit("swap/wait-ready")
	s, err = n.ready(ctx, podName, container, health, before, want, t0, res)
	if err != nil {
		return s, nil, err
	}
	s, mirrorErr = n.awaitMirror(ctx, podName, container, health, before, s, want, res)
	return s, mirrorErr, nil
}

// healthURL is the HTTP(S) endpoint of the container's readiness probe
// (or startup, or liveness probe), as the kubelet would call it.
func healthURL(c *corev1.Container) string {
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.StartupProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			continue
		}
		g := p.HTTPGet
		host := g.Host
		if host == "" {
			host = "127.0.0.1"
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		port := g.Port.String()
		if g.Port.IntValue() == 0 {
			for _, cp := range c.Ports {
				if cp.Name == g.Port.StrVal {
					port = strconv.Itoa(int(cp.ContainerPort))
				}
			}
		}
		return scheme + "://" + net.JoinHostPort(host, port) + g.Path
	}
	return ""
}
