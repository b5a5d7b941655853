package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/swap"
)

// SwapNeeds are what a swap through the cluster takes besides the agents'
// pods: finding the control planes, and its agents' token.
var SwapNeeds = append(append([]Need{}, ControlPlaneNeeds...), AccountNeeds...)

// SwapInput is a swap of static pods through the cluster.
type SwapInput struct {
	// Components are the static pods' components (apiserver, …), each
	// named by the catalog.
	Components []string
	// Rollback puts back what the last swap on each node replaced.
	Rollback bool
	// State is the tree's state file (nil on a rollback): what each
	// component was last pushed as.
	State *build.StateFile
	// Only picks control-plane nodes by name (--node); none: every one.
	Only []string
	// Timeout is each pod's wait (swap.Options.Timeout); Insecure allows
	// plain HTTP to the pushed images' registry when devk checks it.
	Timeout  time.Duration
	Insecure bool
	// Skip are phases the agents leave out (--skip-phases).
	Skip []string
	// Command is the command line, for messages saying what to run next.
	Command string
}

// Swap swaps (or rolls back) static pods on the cluster's control-plane
// nodes, one node at a time in the control planes' order, as a rolling
// `devk swap` does on a devk cluster: each node's swap runs in its agent
// (the node's lock and journal, the hand-over, the checks, the rollback
// of what fails), and the first node that fails stops the roll. Before
// any manifest changes, devk checks the registry has each pushed image
// and every node pulls it by digest. The agents' progress shows as the
// client's, under each node's name.
func (s *Session) Swap(ctx context.Context, in SwapInput) (*swap.Report, error) {
	rep := &swap.Report{}
	nodes, err := s.ControlPlanes(ctx, in.Only)
	if err != nil {
		return rep, err
	}
	all, err := s.ControlPlanes(ctx, nil)
	if err != nil {
		return rep, err
	}
	sockets := map[string]string{}
	for i := range nodes {
		kf, err := s.withKubelet(ctx, &nodes[i])
		if err != nil {
			return rep, err
		}
		sockets[nodes[i].Node] = kf.CRISocket
	}
	if err := s.awaitEarlierSwaps(ctx); err != nil {
		return rep, err
	}
	if !in.Rollback {
		if in.State, err = s.prePull(ctx, in, nodes, sockets); err != nil {
			return rep, err
		}
	}
	if err := s.ensureAccount(ctx); err != nil {
		return rep, err
	}
	var grace time.Duration
	if len(all) > 1 {
		// Behind a load balancer: the old API server ends its
		// connections gracefully, its clients told to go elsewhere.
		grace = staticpod.HAStopGrace
	}
	for i, n := range nodes {
		t := agent.SwapTask{ManifestsDir: n.Files.ManifestsDir, CRISocket: sockets[n.Node], NodeName: n.Node, PKIDir: n.Files.PKIDir,
			Components: in.Components, Rollback: in.Rollback, Skip: in.Skip, Timeout: in.Timeout, StopGrace: grace, State: in.State, Command: in.Command}
		if i > 0 {
			failpoint.Hit("remote/swap/next") // one node done, the next not begun
		}
		r, err := s.swapOn(ctx, n.Node, agent.Task{Kind: agent.KindSwap, Swap: &t})
		if r != nil {
			for _, p := range r.StaticPods {
				p.Node = n.Node
			}
			rep.StaticPods = append(rep.StaticPods, r.StaticPods...)
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

// prePull checks, on this machine, that the registry still has each
// pushed image, then has every node pull them through its runtime by
// digest (or, with --load, loads them onto every node), all at once: a
// node that cannot get them fails the swap before any manifest changes.
// It returns the state the agents swap to: in's, or with --load the
// images as the nodes name them.
func (s *Session) prePull(ctx context.Context, in SwapInput, nodes []ControlPlane, sockets map[string]string) (*build.StateFile, error) {
	var pairs [][2]string
	var refs []string
	for _, name := range in.Components {
		cs := in.State.Components[name]
		if cs == nil || cs.Pushed == nil {
			return nil, fmt.Errorf("no pushed image for %s yet: run `devk build %s --push` first", name, name)
		}
		pairs = append(pairs, [2]string{name, cs.Pushed.Ref})
		refs = append(refs, cs.Pushed.Ref)
	}
	start := time.Now()
	s.rep.Start("registry")
	n, err := swap.CheckPushed(ctx, pairs, in.Insecure)
	if err != nil {
		s.rep.Fail("registry", time.Since(start), err)
		return nil, err
	}
	s.rep.Done("registry", time.Since(start), fmt.Sprintf("%d pushed images present", n))
	if s.loading != nil {
		return s.loadPushed(ctx, in, nodes, sockets)
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, cp := range nodes {
		wg.Go(func() {
			var r agent.PullResult
			t := agent.Task{Kind: agent.KindPull, Pull: &agent.PullTask{CRISocket: sockets[cp.Node], Refs: refs}}
			errs[i] = s.doStep(ctx, cp.Node, "pull", t, &r, func() string {
				return fmt.Sprintf("%d images by digest (%s)", len(r.ImageIDs), strings.Join(shortRefs(refs), ", "))
			})
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%w: nothing was changed; push the images to a registry the nodes pull from (`devk push COMPONENT --registry REG`)", errs[i])
			}
		})
	}
	wg.Wait()
	return in.State, errors.Join(errs...)
}

// loadPushed loads the pushed images of in's components, read from the
// registry they were pushed to, onto every node at once (Load), and
// returns in's state with each pushed image named as the nodes have it.
func (s *Session) loadPushed(ctx context.Context, in SwapInput, nodes []ControlPlane, sockets map[string]string) (*build.StateFile, error) {
	st := &build.StateFile{Components: map[string]*build.ComponentState{}}
	maps.Copy(st.Components, in.State.Components)
	var imgs []LoadImage
	for _, name := range in.Components {
		p := in.State.Components[name].Pushed
		img, repo, err := pushedImage(ctx, p.Ref, in.Insecure)
		if err != nil {
			return nil, err
		}
		if d, err := img.Digest(); err != nil || d.String() != p.Digest {
			return nil, fmt.Errorf("%s: the registry's %s is not the image devk pushed (%v): push it again with `devk push %s`", name, p.Ref, err, name)
		}
		imgs = append(imgs, LoadImage{Name: repo, Image: img})
		cs := *in.State.Components[name]
		loaded := *p
		loaded.Ref, loaded.Repository = LoadedRef(repo, p.Digest), agent.LoadRegistry+"/"+repo
		cs.Pushed = &loaded
		st.Components[name] = &cs
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, cp := range nodes {
		wg.Go(func() {
			if _, errs[i] = s.Load(ctx, cp.Node, sockets[cp.Node], imgs); errs[i] != nil {
				errs[i] = fmt.Errorf("%w: nothing was changed", errs[i])
			}
		})
	}
	wg.Wait()
	return st, errors.Join(errs...)
}

// pushedImage reads the image devk pushed as ref (repo@sha256:…) from
// its registry; repo is its repository's path there, without the host.
func pushedImage(ctx context.Context, ref string, insecure bool) (v1.Image, string, error) {
	host, _, _ := strings.Cut(ref, "/")
	r, err := image.NewRemote(host, image.RemoteOptions{Insecure: insecure})
	if err != nil {
		return nil, "", err
	}
	parsed, err := r.ParseReference(ref)
	if err != nil {
		return nil, "", err
	}
	img, err := r.Image(ctx, ref, v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		return nil, "", fmt.Errorf("read %s from its registry: %w", ref, err)
	}
	return img, parsed.Context().RepositoryStr(), nil
}

func shortRefs(refs []string) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = digest.ShortRef(r)
	}
	return out
}

// swapOn runs swap task t in node's agent and returns the agent's report.
// Ctrl-C deletes the agent's pod, whose agent then undoes the swap in
// flight within its grace period, on its own.
func (s *Session) swapOn(ctx context.Context, node string, t agent.Task) (*swap.Report, error) {
	pod, remove, err := s.start(ctx, node, t)
	if err != nil {
		return nil, err
	}
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.heartbeat(hctx, s.stampPod(pod.Name))
	failpoint.Hit("remote/swap/started") // the agent's pod made, its swap under way
	last, err := s.followPod(ctx, node, pod.Name, io.Discard)
	if err != nil {
		if ctx.Err() != nil {
			s.rep.Infof("node %s: the agent undoes the swap in flight on the node (pod %s/%s); the next devk swap says how it ended", node, Namespace, pod.Name)
		}
		remove()
		return nil, err
	}
	// The agent exits once it wrote its result: wait for that, so the
	// pod is gone, not ending, when the next command looks.
	_, werr := s.waitPod(ctx, node, pod.Name, podEnded)
	remove()
	r, err := swapResult(node, last)
	if err == nil && werr != nil {
		err = werr
	}
	return r, err
}

// swapResult is the report a swap agent's final line holds, and its
// error.
func swapResult(node string, last *agent.Line) (*swap.Report, error) {
	r := &swap.Report{}
	if last.Result != nil {
		if err := json.Unmarshal(last.Result, r); err != nil {
			return nil, fmt.Errorf("node %s: the agent's swap report: %w", node, err)
		}
	}
	if last.Error != "" {
		return r, fmt.Errorf("node %s: %s", node, last.Error)
	}
	return r, nil
}

// awaitEarlierSwaps follows to its end each swap an earlier devk began
// through the cluster whose client was killed (its agent still running),
// and refuses while another devk's swap runs.
func (s *Session) awaitEarlierSwaps(ctx context.Context) error {
	pods, err := s.cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{LabelManagedBy: ManagedBy, LabelTask: string(agent.KindSwap)}.String()})
	if err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[LabelRun] == s.run || podEnded(p) {
			continue
		}
		node := p.Spec.NodeName
		if p.DeletionTimestamp != nil {
			// Deleted (by its client, on Ctrl-C): its agent undoes what
			// it began within the pod's grace period.
			s.rep.Infof("node %s: waiting for the agent pod %s/%s, deleted, to undo its swap and end", node, Namespace, p.Name)
			if err := s.waitGone(ctx, p); err != nil {
				return err
			}
			continue
		}
		if !lostClient(p.Annotations) {
			return fmt.Errorf("another devk swaps through the cluster now (pod %s/%s on node %s): wait until it ends", Namespace, p.Name, node)
		}
		s.rep.Infof("node %s: a swap a killed devk began at %s still runs there; following it to its end", node, p.CreationTimestamp.Format(time.TimeOnly))
		if _, err := s.followPod(ctx, node, p.Name, io.Discard); err != nil {
			return err
		}
		ended, err := s.waitPod(ctx, node, p.Name, podEnded)
		if err != nil {
			return err
		}
		s.reportLost(ctx, ended)
		// Its pod, and the account its token was, are no longer needed.
		if err := ignoreNotFound(s.cs.CoreV1().Pods(Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})); err != nil {
			return err
		}
		if err := s.deleteRun(ctx, p.Labels[LabelRun]); err != nil {
			return err
		}
	}
	return nil
}

// reportLost says what ended swap pod p, whose client was killed, did.
func (s *Session) reportLost(ctx context.Context, p *corev1.Pod) {
	node := p.Spec.NodeName
	began := p.CreationTimestamp.Format(time.TimeOnly)
	logs, err := s.cs.CoreV1().Pods(Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	if err != nil {
		s.rep.Infof("node %s: the swap a killed devk began at %s has ended; its log cannot be read: %v", node, began, err)
		return
	}
	data, rerr := result(node, p, logs)
	var r swap.Report
	if data != nil {
		_ = json.Unmarshal(data, &r)
	}
	for _, sp := range r.StaticPods {
		what := "finished on its own: " + sp.Pod + " runs " + sp.NewImage
		if sp.RolledBack {
			what = "was ROLLED BACK: " + sp.Pod + " runs " + sp.OldImage + " again"
		}
		s.rep.Infof("node %s: the swap a killed devk began at %s %s", node, began, what)
	}
	if rerr != nil {
		s.rep.Infof("node %s: the swap a killed devk began at %s failed: %v", node, began, rerr)
	}
}

// waitGone waits until pod p is deleted, at most its grace period and a
// minute.
func (s *Session) waitGone(ctx context.Context, p *corev1.Pod) error {
	limit := time.Minute
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		limit += time.Duration(*g) * time.Second
	}
	if err := s.gone(ctx, p.Name, limit); err != nil {
		return fmt.Errorf("the agent pod %s/%s was deleted but is still there after %s: %w", Namespace, p.Name, limit, err)
	}
	return nil
}
