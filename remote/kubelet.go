package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/build"
	"github.com/devk/devk/swap"
)

// KubeletNeeds are what a kubelet swap through the cluster takes besides
// the agents' pods: the nodes and their kubelets' /configz, attaching to
// the agent's stdin (the new binary), and the Nodes' leases (the
// restarted kubelet Ready).
var KubeletNeeds = []Need{
	{Verb: "list", Resource: "nodes"},
	{Verb: "get", Resource: "nodes"},
	{Verb: "get", Resource: "nodes", Subresource: "proxy"},
	{Verb: "create", Resource: "pods", Subresource: "attach", Namespace: Namespace},
	{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: corev1.NamespaceNodeLease},
}

// KubeletInput is a kubelet swap through the cluster.
type KubeletInput struct {
	// Binary is the built kubelet (none on a rollback).
	Binary *build.BinaryRecord
	// Rollback puts back each node's PATH.prev.
	Rollback bool
	// Only picks nodes by name (--node); none: every node.
	Only []string
	// Timeout bounds each node's wait: its kubelet healthy, its Node
	// Ready with a renewed lease.
	Timeout time.Duration
}

// SwapKubelet swaps (or rolls back) the kubelet binary of the cluster's
// nodes, one node at a time, each Ready with its new kubelet before the
// next; a node's agent (KindKubelet) refuses, saying why, unless systemd
// runs its kubelet, and puts the old kubelet back when the new one is not
// healthy. The first node that fails stops the swap.
func (s *Session) SwapKubelet(ctx context.Context, in KubeletInput) (*swap.Report, error) {
	rep := &swap.Report{}
	list, err := s.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return rep, fmt.Errorf("list the nodes: %w", err)
	}
	var nodes []string
	for _, n := range list.Items {
		if len(in.Only) == 0 || slices.Contains(in.Only, n.Name) {
			nodes = append(nodes, n.Name)
		}
	}
	for _, want := range in.Only {
		if !slices.Contains(nodes, want) {
			return rep, fmt.Errorf("no node %s in the cluster", want)
		}
	}
	slices.Sort(nodes)
	for i, node := range nodes {
		out, err := s.kubeletOn(ctx, node, in)
		if out != nil {
			rep.Binaries = append(rep.Binaries, *out)
		}
		if err != nil {
			if i+1 < len(nodes) {
				return rep, fmt.Errorf("%w (the nodes after it were not swapped)", err)
			}
			return rep, err
		}
	}
	return rep, nil
}

// kubeletOn swaps node's kubelet by its agent, then waits for the Node.
func (s *Session) kubeletOn(ctx context.Context, node string, in KubeletInput) (*swap.BinaryOutcome, error) {
	kf, err := s.kubelet(ctx, node)
	if err != nil {
		return nil, err
	}
	if kf.Healthz == "" {
		return nil, fmt.Errorf("node %s: its kubelet serves no /healthz (healthzPort 0), by which devk would see the new one healthy", node)
	}
	t := agent.KubeletTask{NodeName: node, Rollback: in.Rollback, Healthz: kf.Healthz, Timeout: in.Timeout}
	if !in.Rollback {
		t.Size, t.SHA256 = in.Binary.Size, in.Binary.SHA256
	}
	step, start := node+"/kubelet", time.Now()
	s.rep.Start(step)
	fail := func(err error) (*swap.BinaryOutcome, error) {
		s.rep.Fail(step, time.Since(start), err)
		return nil, err
	}
	pod, remove, err := s.start(ctx, node, agent.Task{Kind: agent.KindKubelet, Kubelet: &t})
	if err != nil {
		return fail(err)
	}
	defer remove()
	if !in.Rollback {
		if _, err := s.waitPod(ctx, node, pod.Name, func(p *corev1.Pod) bool { return p.Status.Phase != corev1.PodPending }); err != nil {
			return fail(err)
		}
		f, err := os.Open(in.Binary.Path)
		if err != nil {
			return fail(fmt.Errorf("the built kubelet: %w (run `devk build kubelet`)", err))
		}
		defer f.Close()
		// An agent that refuses ends without reading: its result says
		// why, and the attach's error is not the story.
		go func() { _ = s.attach(ctx, pod.Name, io.LimitReader(f, in.Binary.Size)) }()
	}
	last, err := s.followPod(ctx, node, pod.Name, io.Discard)
	if err != nil {
		return fail(err)
	}
	// The agent exits once it wrote its result: wait for that, so the
	// pod is gone, not ending, when the next command looks.
	if _, err := s.waitPod(ctx, node, pod.Name, podEnded); err != nil {
		return fail(err)
	}
	var r agent.KubeletResult
	if last.Result != nil {
		if err := json.Unmarshal(last.Result, &r); err != nil {
			return fail(fmt.Errorf("node %s: the agent's result: %w", node, err))
		}
	}
	out := &swap.BinaryOutcome{Component: "kubelet", Node: node, Result: r.Result}
	if last.Error != "" {
		err := fmt.Errorf("node %s: %s", node, last.Error)
		if !r.Changed {
			out = nil
		}
		if r.RolledBack {
			err = fmt.Errorf("%w: %w", err, swap.ErrRolledBack)
		}
		return fail(err)
	}
	if r.Changed {
		timeout := t.Wait()
		if err := swap.WaitNodeReady(ctx, s.cs, node, r.RestartedAt, timeout); err != nil {
			s.rep.Fail(step, time.Since(start), err)
			return out, fmt.Errorf("node %s: its new kubelet is healthy but: %w; `devk swap kubelet --rollback --node %s` puts the old one back", node, err, node)
		}
	}
	detail := fmt.Sprintf("%s (%s, pid %d) holds these bytes already", r.Binary, r.Unit, r.PID)
	if r.Changed {
		detail = fmt.Sprintf("%s is %s (%s restarted, the node Ready)", r.Binary, strings.TrimSpace(r.Version), r.Unit)
	}
	s.rep.Done(step, time.Since(start), detail)
	return out, nil
}
