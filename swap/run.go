package swap

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/source"
)

// Options say what to swap where.
type Options struct {
	// TreeDir is the tree whose _output/devk/state.json names the pushed
	// digests and built binaries; empty means the working directory's.
	TreeDir string
	// Components to swap; none means every static-pod component whose
	// last pushed digest differs from what its manifest names.
	Components []string
	// Rollback restores the previous manifest (or binary) instead.
	Rollback bool

	// The node: the kubelet's manifests dir, a kubeconfig for the API
	// server, and the CRI socket.
	ManifestsDir string
	Kubeconfig   string
	CRISocket    string
	// KubeletRootDir is the kubelet's --root-dir (see Node.KubeletRootDir).
	KubeletRootDir string

	// KubectlDest is where `swap kubectl` installs kubectl.
	KubectlDest string
	// Kubelet, when set, is how `swap kubelet` replaces and restarts the
	// node's kubelet.
	Kubelet *KubeletNode

	// Command is this swap's command line with the node flags the user
	// gave, for messages that say what to run next.
	Command string

	// Insecure allows plain HTTP to a registry not on loopback.
	Insecure bool
	Timeout  time.Duration
	Reporter progress.Reporter
}

// KubeletNode is a kubelet devk supervises.
type KubeletNode struct {
	// Binary is the path the supervised kubelet runs.
	Binary string
	// Restart restarts the kubelet on its binary and waits for node Ready.
	Restart func(ctx context.Context) error
	// Relist restarts the kubelet so that it lists pods afresh (see
	// Node.settle); nil: a swap never restarts it for a lagging mirror pod.
	Relist func(ctx context.Context) error
}

// Report is what Run did.
type Report struct {
	StaticPods []*Result       `json:"staticPods,omitempty"`
	Binaries   []BinaryOutcome `json:"binaries,omitempty"`
	Nothing    string          `json:"nothing,omitempty"`

	closeNode func()
}

func (r *Report) close() {
	if r.closeNode != nil {
		r.closeNode()
		r.closeNode = nil
	}
}

// touchesNode says whether swapping comps changes the node (and so takes
// its lock): every static pod and the kubelet do, kubectl does not; no
// component means the outdated static pods.
func touchesNode(comps []build.Component) bool {
	if len(comps) == 0 {
		return true
	}
	for _, c := range comps {
		if c.StaticPod || c.Name == "kubelet" {
			return true
		}
	}
	return false
}

// BinaryOutcome is one swapped binary.
type BinaryOutcome struct {
	Component string `json:"component"`
	BinaryResult
}

// Run swaps (or rolls back) the named components.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	rep := &Report{}
	comps, err := selectComponents(o.Components)
	if err != nil {
		return rep, err
	}
	var tree *source.Tree
	var st *build.StateFile
	needTree := !o.Rollback
	if needTree {
		if tree, err = source.Open(o.TreeDir); err != nil {
			return rep, err
		}
		if st, err = build.LoadState(tree.Root); err != nil {
			return rep, err
		}
	}

	var pods, bins []build.Component
	for _, c := range comps {
		if c.StaticPod {
			pods = append(pods, c)
		} else {
			bins = append(bins, c)
		}
	}
	onNode := o.ManifestsDir != "" && touchesNode(comps)
	if onNode {
		// One change to a node at a time: no two swaps sharing a backup
		// and journal, no swap during `devk up` or `devk down`.
		l, err := nodelock.Acquire(o.ManifestsDir, nodelock.Command())
		if err != nil {
			return rep, err
		}
		defer l.Release()
	}
	var node *Node
	connect := func() error {
		if node != nil {
			return nil
		}
		n, closeNode, err := o.node()
		if err != nil {
			return err
		}
		defer func() {
			if node == nil {
				closeNode()
			}
		}()
		if _, err := n.Runtime.Version(ctx); err != nil {
			return err
		}
		node, rep.closeNode = n, closeNode
		return nil
	}
	defer rep.close()
	// A swap that was interrupted is finished (or undone) before anything
	// else; --rollback of that pod restores what it replaced instead.
	for _, c := range build.Catalog {
		if !onNode || !c.StaticPod || (o.Rollback && slices.ContainsFunc(pods, func(p build.Component) bool { return p.Name == c.Name })) {
			continue
		}
		j, err := ManifestFor(o.ManifestsDir, c.Binary).InProgress()
		if err != nil {
			return rep, err
		}
		if j != nil {
			if err := connect(); err != nil {
				return rep, err
			}
			res, err := node.Resume(ctx, c.Binary, j)
			if res != nil {
				rep.StaticPods = append(rep.StaticPods, res)
			}
			if err != nil {
				return rep, err
			}
		}
	}
	if len(comps) == 0 {
		if o.Rollback {
			return rep, fmt.Errorf("name what to roll back: a static pod (apiserver, controller-manager, scheduler, etcd), kubectl or kubelet")
		}
		if pods, err = outdated(o.ManifestsDir, st); err != nil {
			return rep, err
		}
		if len(pods) == 0 {
			if len(rep.StaticPods) == 0 {
				rep.Nothing = "every pushed static-pod component already runs its last pushed digest"
			}
			return rep, nil
		}
	}

	for _, c := range bins {
		out, err := swapBinary(ctx, o, c, st)
		if err == nil || out.Changed {
			rep.Binaries = append(rep.Binaries, out)
		}
		if err != nil {
			return rep, err
		}
	}
	if len(pods) == 0 {
		return rep, nil
	}

	var targets []Target
	if !o.Rollback {
		if targets, err = pushedTargets(ctx, o, pods, st); err != nil {
			return rep, err
		}
	}
	if err := connect(); err != nil {
		return rep, err
	}
	for i, c := range pods {
		var res *Result
		if o.Rollback {
			res, err = node.Rollback(ctx, c.Binary)
		} else {
			res, err = node.Swap(ctx, targets[i])
		}
		if res != nil {
			rep.StaticPods = append(rep.StaticPods, res)
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func selectComponents(names []string) ([]build.Component, error) {
	if len(names) == 0 {
		return nil, nil
	}
	comps, err := build.Resolve(names)
	if err != nil {
		return nil, err
	}
	for _, c := range comps {
		if !c.StaticPod && c.Name != "kubectl" && c.Name != "kubelet" {
			return nil, fmt.Errorf("%s is neither a static pod (apiserver, controller-manager, scheduler, etcd) nor kubectl or kubelet: devk cannot swap it", c.Name)
		}
	}
	return comps, nil
}

// outdated lists the static-pod components whose pushed digest differs
// from the image their manifest names.
func outdated(manifestsDir string, st *build.StateFile) ([]build.Component, error) {
	var out []build.Component
	for _, c := range build.Catalog {
		cs := st.Components[c.Name]
		if !c.StaticPod || cs == nil || cs.Pushed == nil {
			continue
		}
		pod, _, err := ManifestFor(manifestsDir, c.Binary).Read()
		if err != nil {
			return nil, err
		}
		ctr, err := Container(pod, c.Binary)
		if err != nil {
			return nil, err
		}
		if ctr.Image != cs.Pushed.Ref {
			out = append(out, c)
		}
	}
	return out, nil
}

// pushedTargets resolves each component's last pushed image and checks the
// registry still has it, before any file is touched.
func pushedTargets(ctx context.Context, o Options, pods []build.Component, st *build.StateFile) ([]Target, error) {
	var targets []Target
	for _, c := range pods {
		cs := st.Components[c.Name]
		if cs == nil || cs.Pushed == nil {
			return nil, fmt.Errorf("no pushed image for %s yet: run `devk build %s --push` first", c.Name, c.Name)
		}
		t := Target{Pod: c.Binary, Image: cs.Pushed.Ref}
		if c.Name == "apiserver" && cs.Binary != nil && cs.Binary.SHA256 == cs.Pushed.BinarySHA256 {
			t.Version = cs.Binary.Version
		}
		host, _, _ := strings.Cut(cs.Pushed.Ref, "/")
		remote, err := image.NewRemote(host, image.RemoteOptions{Insecure: o.Insecure})
		if err != nil {
			return nil, err
		}
		ref, err := remote.ParseReference(cs.Pushed.Ref)
		if err != nil {
			return nil, err
		}
		if _, err := remote.Head(ctx, ref); err != nil {
			if errors.Is(err, image.ErrNotFound) {
				return nil, fmt.Errorf("the registry no longer has %s (pushed %s): push it again with `devk push %s`", cs.Pushed.Ref, cs.Pushed.PushedAt.Format(time.RFC3339), c.Name)
			}
			return nil, fmt.Errorf("check %s in its registry: %w", cs.Pushed.Ref, err)
		}
		targets = append(targets, t)
	}
	return targets, nil
}

func (o Options) node() (*Node, func(), error) {
	if o.ManifestsDir == "" || o.Kubeconfig == "" || o.CRISocket == "" {
		return nil, nil, fmt.Errorf("no cluster to swap into: run `devk up`, or pass --manifests-dir, --kubeconfig and --cri-socket for a kubeadm node")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", o.Kubeconfig, err)
	}
	// The apiserver itself may be the pod being swapped: never hang on it.
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	rt, err := cri.Dial(o.CRISocket)
	if err != nil {
		return nil, nil, err
	}
	n := &Node{ManifestsDir: o.ManifestsDir, KubeletRootDir: o.KubeletRootDir, Client: client, Runtime: rt, Reporter: o.Reporter, Timeout: o.Timeout, LogLines: 20, Command: o.Command}
	if o.Kubelet != nil {
		n.Relist = o.Kubelet.Relist
	}
	return n, func() { rt.Close() }, nil
}

func swapBinary(ctx context.Context, o Options, c build.Component, st *build.StateFile) (BinaryOutcome, error) {
	out := BinaryOutcome{Component: c.Name}
	var dest string
	var check CheckFunc
	switch c.Name {
	case "kubectl":
		dest, check = o.KubectlDest, KubectlCheck
	case "kubelet":
		if o.Kubelet == nil {
			return out, fmt.Errorf("no devk cluster runs a kubelet here: `devk swap kubelet` replaces the kubelet of a cluster made by `devk up`")
		}
		dest, check = o.Kubelet.Binary, versionCheck("--version")
	}
	if dest == "" {
		return out, fmt.Errorf("no destination for %s: pass --dest PATH", c.Name)
	}
	var err error
	if o.Rollback {
		out.BinaryResult, err = RollbackBinary(ctx, dest, check)
	} else {
		cs := st.Components[c.Name]
		if cs == nil || cs.Binary == nil {
			return out, fmt.Errorf("%s is not built yet: run `devk build %s`", c.Name, c.Name)
		}
		out.BinaryResult, err = InstallBinary(ctx, cs.Binary.Path, dest, check)
	}
	if err != nil || !out.Changed || c.Name != "kubelet" {
		return out, err
	}
	restart := func(ctx context.Context) error {
		since := time.Now()
		if err := o.Kubelet.Restart(ctx); err != nil {
			return err
		}
		return o.waitNodeReady(ctx, since)
	}
	if rerr := restart(ctx); rerr != nil {
		// Put the old kubelet back and restart it again.
		if !o.Rollback && out.Prev != "" {
			if _, err := RollbackBinary(ctx, dest, nil); err == nil {
				if err := restart(context.WithoutCancel(ctx)); err == nil {
					return out, fmt.Errorf("the new kubelet did not bring the node Ready (%v): %w; the old kubelet is back and Ready", rerr, ErrRolledBack)
				}
			}
		}
		return out, fmt.Errorf("restart the kubelet: %w (its log is in the cluster's logs dir)", rerr)
	}
	return out, nil
}

// waitNodeReady waits until a node reports Ready and its kubelet renewed
// the node lease after since: the restarted kubelet, not the old one's
// last word.
func (o Options) waitNodeReady(ctx context.Context, since time.Time) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", o.Kubeconfig, err)
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no node yet"
	for {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, n := range nodes.Items {
				for _, c := range n.Status.Conditions {
					if c.Type != corev1.NodeReady {
						continue
					}
					last = fmt.Sprintf("node %s Ready=%s (%s)", n.Name, c.Status, c.Message)
					if c.Status != corev1.ConditionTrue {
						continue
					}
					// The node lease's renew time (microseconds, renewed
					// at once by a starting kubelet) tells the new kubelet
					// from the old one's last heartbeat.
					lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{})
					if err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.Time.After(since) {
						return nil
					}
					last = fmt.Sprintf("node %s Ready, waiting for the restarted kubelet to renew its lease", n.Name)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node not Ready after %s: %s", timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// versionCheck runs `binary flag` and returns what it printed.
func versionCheck(flag string) CheckFunc {
	return func(ctx context.Context, path string) (string, error) {
		out, err := execx.Output(ctx, execx.Cmd{Name: path, Args: []string{flag}})
		if err != nil {
			return "", err
		}
		v := strings.TrimSpace(string(out))
		return strings.TrimPrefix(v, "Kubernetes "), nil
	}
}

// DefaultKubectlDest is $DEVK_HOME/bin/kubectl.
func DefaultKubectlDest(devkHome string) string { return filepath.Join(devkHome, "bin", "kubectl") }
