// Package rollout is the API server's side of an addon's swap: the
// image set on the workload's container by server-side apply (as
// addon.FieldManager, with the swap's annotations), the wait for its
// controller to roll it out, failing at once at a pod that crash-loops
// or cannot get its image, and that pod's log through pods/log.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	appsac "k8s.io/client-go/applyconfigurations/apps/v1"
	coreac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/poll"
)

const (
	// pollInterval is how often Wait looks at the workload.
	pollInterval = 250 * time.Millisecond
	// settle is how long a rolled-out addon's pods must keep running
	// before the rollout counts: longer than the kubelet's relist (1 s)
	// and status update, so a container that exits at start shows.
	settle = 3 * time.Second
)

// SetImage server-side applies image to the addon's container with the
// swap's annotations ann, as addon.FieldManager: only those fields, so
// `devk up`'s own stay its own. An annotation left out of ann that the
// swap applied before is removed.
func SetImage(ctx context.Context, cs kubernetes.Interface, w addon.Workload, image string, ann map[string]string) error {
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

// Wait polls until the workload's controller has rolled image out, for
// at most timeout: every pod on it and available, no old pod left. A pod
// of image whose container crash-loops or cannot get its image fails the
// wait at once, naming the pod and its container's state (failing is its
// name); so does the workload naming another image (someone changed it
// meanwhile) or vanishing.
func Wait(ctx context.Context, cs kubernetes.Interface, w addon.Workload, image string, timeout time.Duration) (failing string, err error) {
	stage := "the controller to start the rollout"
	pending := "" // a pod of image that is not ready, and why
	var doneSince time.Time
	err = wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		s, err := addon.Get(ctx, cs, w)
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
		pods, err := s.Pods(ctx, cs)
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
				failing = p.Name
				return false, fmt.Errorf("the rollout of %s failed: pod %s: %s", digest.ShortRef(image), p.Name, why)
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
		// for a relist or two: it must stay so for settle (a quarter of
		// a short timeout).
		if doneSince.IsZero() {
			doneSince = time.Now()
		}
		stage = "the rolled-out pods to keep running"
		return time.Since(doneSince) >= min(settle, timeout/4), nil
	})
	switch {
	case err == nil:
		return "", nil
	case poll.TimedOut(ctx, err):
		return failing, fmt.Errorf("timed out after %s waiting for %s to roll out %s: waiting for %s%s", timeout, w, digest.ShortRef(image), stage, pending)
	case ctx.Err() != nil:
		return failing, fmt.Errorf("interrupted during the rollout of %s: %w", w, context.Cause(ctx))
	}
	return failing, err
}

// FailingPod is the pod of image whose container failed, with the last
// lines of its log through the API (the previous container's when the
// kubelet restarted it); empty when no pod of image fails.
func FailingPod(ctx context.Context, cs kubernetes.Interface, w addon.Workload, image string, lines int) (string, []string) {
	s, err := addon.Get(ctx, cs, w)
	if err != nil || s == nil {
		return "", nil
	}
	pods, err := s.Pods(ctx, cs)
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
		log, err := podLog(ctx, cs, p, w.Container, previous, lines)
		if err != nil {
			log = []string{"(no log: " + err.Error() + ")"}
		}
		return p.Name, log
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
