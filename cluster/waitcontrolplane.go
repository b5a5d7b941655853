package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/cluster/internal/joinnode"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"
)

// checks are the node's: its control plane's health, then its Node's
// readiness.
func (c *Cluster) checks(n Node) []controlplane.Readiness {
	var out []controlplane.Readiness
	for _, ch := range controlplane.Checks(c.Config, n.Net) {
		out = append(out, controlplane.Readiness{Name: ch.Name, Log: func() string { return c.containerLog(n, ch.Name) }, Check: func(ctx context.Context, _ kubernetes.Interface) error {
			return ch.Healthy(ctx)
		}})
	}
	return append(out, controlplane.Readiness{Name: "node", Log: func() string { return n.Files.LogFile("kubelet") }, Check: func(ctx context.Context, cs kubernetes.Interface) error {
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
	if why := joinnode.NotReady(n, c.kubeletStarted); why != "" {
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

// waitEach is poll.Each reporting, for the step ctx runs under, how many
// items are ready and what the first pending one is waiting for, and
// giving up at once when node n's kubelet is gone (nothing would become
// ready then).
func waitEach[T any](ctx context.Context, c *Cluster, n Node, interval, timeout time.Duration, items []T, check func(context.Context, T) (string, error)) (took []string, pending []T, err error) {
	return poll.Each(ctx, interval, timeout, items, check, c.afterLook(ctx, n, len(items)))
}

// afterLook is what a wait of up does after each look at its total
// items: report, and give up when node n's kubelet is gone.
func (c *Cluster) afterLook(ctx context.Context, n Node, total int) func(ready int, waiting string) error {
	step := progress.StepOf(ctx)
	return func(ready int, waiting string) error {
		c.Reporter.Progress(step, waitStatus(ready, total, waiting))
		if _, ok := n.Files.Procs().Running("kubelet"); !ok {
			return fmt.Errorf("the kubelet is not running; its log ends:\n%s", supervise.Tail(n.Files.LogFile("kubelet"), 20))
		}
		return nil
	}
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
	return c.waitChecks(ctx, nil, n, timeout, slices.DeleteFunc(c.checks(n), func(r controlplane.Readiness) bool { return r.Name == "node" }))
}

// waitChecks waits, at most timeout, until every check of node n passes,
// and says when each did; it gives up at once when the kubelet is gone.
func (c *Cluster) waitChecks(ctx context.Context, cs kubernetes.Interface, n Node, timeout time.Duration, list []controlplane.Readiness) (string, error) {
	w := controlplane.Wait{
		Node: n.Name(), Logs: n.Files.Logs(),
		Interval: controlPlanePollInterval, Timeout: timeout,
		Written: c.manifestsWritten, ManifestPath: n.Files.ManifestPath, CRISocket: c.criSocket(n),
		After: c.afterLook(ctx, n, len(list)),
	}
	return w.For(ctx, cs, list)
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
