package controlplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/supervise"
)

// logLines is how much of a failed check's log the timeout's error
// quotes.
const logLines = 12

// Readiness is one check of wait-control-plane (and of status).
type Readiness struct {
	Name string
	// Log is where to look when it fails.
	Log   func() string
	Check func(ctx context.Context, cs kubernetes.Interface) error
}

// Wait is wait-control-plane's wait for a node's checks.
type Wait struct {
	// Node is the node's name and Logs its logs dir, for the error.
	Node, Logs        string
	Interval, Timeout time.Duration
	// Written are the manifests (by path) this run rewrote, and when;
	// ManifestPath is where the node's manifest of a static pod is.
	// Until the kubelet runs a container of a rewritten manifest (on
	// the runtime at CRISocket), the old one answers the checks, and
	// the check does not count.
	Written      map[string]time.Time
	ManifestPath func(pod string) string
	CRISocket    string
	// After is poll.Each's: told after each look how many checks passed;
	// an error from it ends the wait (the kubelet is gone).
	After func(ready int, waiting string) error
}

// For waits, at most w.Timeout, until every check in list passes, and
// says when each did.
func (w Wait) For(ctx context.Context, cs kubernetes.Interface, list []Readiness) (string, error) {
	lastErr := map[string]error{}
	took, pending, err := poll.Each(ctx, w.Interval, w.Timeout, list, func(ctx context.Context, ch Readiness) (string, error) {
		err := w.runsRewrittenManifest(ctx, ch.Name)
		if err == nil {
			err = ch.Check(ctx, cs)
		}
		if err != nil && ctx.Err() == nil { // not the wait's own deadline cutting the check short
			lastErr[ch.Name] = err
		}
		return ch.Name, err
	}, w.After)
	if poll.TimedOut(ctx, err) {
		var b strings.Builder
		for _, ch := range pending {
			log := ch.Log()
			why := lastErr[ch.Name]
			if why == nil {
				why = fmt.Errorf("no answer within %s", w.Timeout)
			}
			fmt.Fprintf(&b, "\n%s: %v\n  last lines of %s:\n", ch.Name, why, log)
			for _, l := range strings.Split(supervise.Tail(log, logLines), "\n") {
				b.WriteString("    " + l + "\n")
			}
		}
		return "", fmt.Errorf("the control plane of node %s was not ready after %s (raise --wait, or read the logs under %s):%s",
			w.Node, w.Timeout, w.Logs, strings.TrimRight(b.String(), "\n"))
	}
	if err != nil {
		return "", err
	}
	return strings.Join(took, ", "), nil
}

// runsRewrittenManifest says why the static pod name does not run the
// manifest this run rewrote yet (nil when it does, or when this run left
// its manifest alone): until the kubelet has replaced the container, the
// old one answers the health checks.
func (w Wait) runsRewrittenManifest(ctx context.Context, name string) error {
	written, ok := w.Written[w.ManifestPath(name)]
	if !ok {
		return nil
	}
	rt, err := cri.Dial(w.CRISocket)
	if err != nil {
		return err
	}
	defer rt.Close()
	cts, err := rt.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, Container: name, RunningOnly: true})
	if err != nil {
		return err
	}
	if len(cts) == 0 || cts[0].CreatedAt.Before(written) {
		return fmt.Errorf("%s: the kubelet has not started a container of its new manifest yet", name)
	}
	return nil
}
