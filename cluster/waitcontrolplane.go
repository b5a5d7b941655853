package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"
)

// readiness is one check of wait-control-plane (and of status).
type readiness struct {
	Name string
	// Log is where to look when it fails.
	Log   func() string
	Check func(ctx context.Context, cs kubernetes.Interface) error
}

// checks are the node's: its control plane's health, then its Node's
// readiness.
func (c *Cluster) checks(n Node) []readiness {
	var out []readiness
	for _, ch := range controlplane.Checks(c.Config, n.Net) {
		out = append(out, readiness{ch.Name, func() string { return c.containerLog(n, ch.Name) }, func(ctx context.Context, _ kubernetes.Interface) error {
			return ch.Healthy(ctx)
		}})
	}
	return append(out, readiness{"node", func() string { return n.Files.LogFile("kubelet") }, func(ctx context.Context, cs kubernetes.Interface) error {
		return c.nodeReady(ctx, cs, n)
	}})
}

// nodeReady checks that the node is Ready, and, when this run started the
// kubelet, that the new kubelet said so itself (not the one before).
func (c *Cluster) nodeReady(ctx context.Context, cs kubernetes.Interface, nd Node) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, nd.Name(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	if why := nodeNotReady(n, c.kubeletStarted); why != "" {
		return fmt.Errorf("node %s: %s", nd.Name(), why)
	}
	return nil
}

// containerLog is the newest log file of a control-plane container, or
// the kubelet's log when the container never started.
func (c *Cluster) containerLog(n Node, name string) string {
	if l := controlplane.ContainerLog(n.Files.PodLogs(), n.Name(), name); l != "" {
		return l
	}
	return n.Files.LogFile("kubelet")
}

// runsRewrittenManifest says why the static pod name does not run the
// manifest this run rewrote yet (nil when it does, or when this run left
// its manifest alone): until the kubelet has replaced the container, the
// old one answers the health checks.
func (c *Cluster) runsRewrittenManifest(ctx context.Context, n Node, name string) error {
	written, ok := c.manifestsWritten[n.Files.ManifestPath(name)]
	if !ok {
		return nil
	}
	rt, err := cri.Dial(c.criSocket(n))
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

// waitEach polls, at most timeout, until check has passed once for every
// item, and gives up at once when node n's kubelet is gone (nothing would
// become ready then). check returns the item's name; took says when
// each passed ("etcd 4.3s"), pending which never did. After each look
// it reports for the step ctx runs under how many are ready and what the
// first pending one is waiting for.
func waitEach[T any](ctx context.Context, c *Cluster, n Node, interval, timeout time.Duration, items []T, check func(context.Context, T) (string, error)) (took []string, pending []T, err error) {
	t0 := time.Now()
	step := progress.StepOf(ctx)
	pending = slices.Clone(items)
	err = wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		var still []T
		var waiting string
		for _, it := range pending {
			name, err := check(ctx, it)
			if err != nil {
				if waiting == "" {
					waiting = fmt.Sprintf("waiting for %s: %v", name, err)
				}
				still = append(still, it)
				continue
			}
			took = append(took, fmt.Sprintf("%s %.1fs", name, time.Since(t0).Seconds()))
		}
		pending = still
		if len(pending) == 0 {
			return true, nil
		}
		c.Reporter.Progress(step, waitStatus(len(items)-len(pending), len(items), waiting))
		if _, ok := n.Files.Procs().Running("kubelet"); !ok {
			return false, fmt.Errorf("the kubelet is not running; its log ends:\n%s", supervise.Tail(n.Files.LogFile("kubelet"), 20))
		}
		return false, nil
	})
	return took, pending, err
}

// runWait waits, at most WaitTimeout, until every check passes; it gives
// up at once when the kubelet is gone.
func (c *Cluster) runWait(ctx context.Context) (phase.Outcome, error) {
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	n := c.FirstNode()
	took, err := c.waitChecks(ctx, cs, n, c.WaitTimeout, c.checks(n))
	if err != nil {
		return phase.Done, err
	}
	return phase.Unchanged("%s", took), nil
}

// waitStaticPods waits, at most timeout, until node n's static pods are
// healthy on its address (a joining control-plane node: its kubelet and
// Node are the join's own phases).
func (c *Cluster) waitStaticPods(ctx context.Context, n Node, timeout time.Duration) (string, error) {
	return c.waitChecks(ctx, nil, n, timeout, slices.DeleteFunc(c.checks(n), func(r readiness) bool { return r.Name == "node" }))
}

// waitChecks waits, at most timeout, until every check of node n passes,
// and says when each did; it gives up at once when the kubelet is gone.
func (c *Cluster) waitChecks(ctx context.Context, cs kubernetes.Interface, n Node, timeout time.Duration, list []readiness) (string, error) {
	lastErr := map[string]error{}
	took, pending, err := waitEach(ctx, c, n, controlPlanePollInterval, timeout, list, func(ctx context.Context, ch readiness) (string, error) {
		err := c.runsRewrittenManifest(ctx, n, ch.Name)
		if err == nil {
			err = ch.Check(ctx, cs)
		}
		if err != nil && ctx.Err() == nil { // not the wait's own deadline cutting the check short
			lastErr[ch.Name] = err
		}
		return ch.Name, err
	})
	if poll.TimedOut(ctx, err) {
		var b strings.Builder
		for _, ch := range pending {
			log := ch.Log()
			why := lastErr[ch.Name]
			if why == nil {
				why = fmt.Errorf("no answer within %s", timeout)
			}
			fmt.Fprintf(&b, "\n%s: %v\n  last lines of %s:\n", ch.Name, why, log)
			for _, l := range strings.Split(supervise.Tail(log, 12), "\n") {
				b.WriteString("    " + l + "\n")
			}
		}
		return "", fmt.Errorf("the control plane of node %s was not ready after %s (raise --wait, or read the logs under %s):%s",
			n.Name(), timeout, n.Files.Logs(), strings.TrimRight(b.String(), "\n"))
	}
	if err != nil {
		return "", err
	}
	return strings.Join(took, ", "), nil
}

// waitStatus is a wait's progress: ready of total, and what the first
// pending item is waiting for (the error its last check gave, on one
// line).
func waitStatus(ready, total int, waiting string) progress.Status {
	if i := strings.IndexByte(waiting, '\n'); i >= 0 {
		waiting = waiting[:i]
	}
	return progress.Status{Verb: "ready", Done: int64(ready), Total: int64(total), Note: waiting}
}
