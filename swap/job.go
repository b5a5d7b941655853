package swap

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
	"github.com/devk/devk/swap/binary"
)

// Options say what to swap where.
type Options struct {
	// TreeDir is the tree whose _output/devk/state.json names the pushed
	// digests and built binaries; empty means the working directory's.
	TreeDir string
	// State, when set, is the tree's state file, read elsewhere (by the
	// client of devk's node agent, which runs this swap on the node):
	// TreeDir is then not read.
	State *build.StateFile
	// Components to swap; none means every static-pod component whose
	// last pushed digest differs from what its manifest names, and every
	// addon (addon.Workloads) on the cluster whose last pushed digest
	// differs from what its workload names.
	Components []string
	// Rollback restores the previous manifest, binary or addon image
	// instead.
	Rollback bool
	// Debug, when set, swaps the static pods named to their debug image,
	// run under a debugger (`devk debug`), or with Debug.Stop back to the
	// container that replaced.
	Debug *Debugging

	// Node is where the node keeps its manifests, admin kubeconfig, CRI
	// socket and kubelet root dir. It is zero when no node was found,
	// and NoNode then says why (and is returned once the swap needs one).
	Node   layout.Node
	NoNode error
	// NodeName is the kubelet's node name (the mirror pod of X is
	// X-<NodeName>); empty finds it from the node's runtime
	// (digest.NodeName).
	NodeName string

	// KubectlDest is where `swap kubectl` installs kubectl.
	KubectlDest string
	// Kubelets are the kubelets `swap kubelet` replaces and restarts, one
	// at a time, each node Ready again before the next (a devk cluster's
	// nodes, or those --node names); none: no kubelet of a devk cluster.
	Kubelets []KubeletNode
	// KeptKubelets are the nodes whose kubelet the swap leaves as it is,
	// each with why (a worker that runs a tree of its own, not named by
	// --node): the kubelet phase says so.
	KeptKubelets []KeptKubelet
	// OtherRuntimes are the CRI sockets of the cluster's other nodes, by
	// node name: an addon swap verifies the pods there through them.
	OtherRuntimes map[string]string
	// Relist restarts the static pods' node's kubelet so that it lists
	// pods afresh (see Target.awaitMirror); nil: a swap never restarts it
	// for a lagging mirror pod.
	Relist func(ctx context.Context) error

	// Command is this swap's command line with the node flags the user
	// gave, for messages that say what to run next.
	Command string

	// ControlPlanes, when set, are the control-plane nodes of a cluster
	// with several (all, or those --node picks), Node's first: the static
	// pods are swapped on one node at a time, each verified before the
	// next, each taken out of the load balancer around its own swap (see
	// rolling.go).
	ControlPlanes []layout.ControlPlaneNode
	// StopGrace is how long the old static pod's container gets to stop
	// after SIGTERM in the hand-over; zero stops it at once (one node:
	// nobody can be served meanwhile anyway).
	StopGrace time.Duration

	// ClusterDir and ClusterNodes, on a devk cluster, are its directory
	// and its nodes' manifests dirs: a swap that changes more than one
	// node (a rolling swap, a kubelet swap) takes the cluster's lock and
	// every node's (nodelock.AcquireCluster) for its whole run. Empty (a
	// kubeadm node), or a swap of one node: that node's lock.
	ClusterDir   string
	ClusterNodes []string

	// dial, set by unit tests only, connects a job to its node (by
	// its layout) in place of the node's API server and runtime: a fake
	// kubelet and runtime, because the real ones cannot run there.
	dial func(layout.Node) *Target
	// held, on the rolling swap's job of one node, are the locks the
	// rolling swap holds for its whole run (the node's among them).
	held *nodelock.Set

	// RegistryChecked says the registry phase's check was made already
	// (by the client of devk's node agent, which runs this swap on the
	// node and may not reach the registry by the name the client does).
	RegistryChecked bool

	// Insecure allows plain HTTP to a registry not on loopback.
	Insecure bool
	// Timeout bounds each wait for a pod to run healthy, and each wait
	// for an addon's rollout; zero means DefaultTimeout.
	Timeout  time.Duration
	Reporter progress.Reporter
}

// KubeletNode is a kubelet devk supervises.
type KubeletNode struct {
	// Node is its Node's name.
	Node string
	// Binary is the path the supervised kubelet runs.
	Binary string
	// Restart restarts the kubelet on its binary (the swap then waits
	// for the node to be Ready).
	Restart func(ctx context.Context) error
}

// KeptKubelet is a node whose kubelet a swap leaves as it is, and why.
type KeptKubelet struct {
	Node string `json:"node"`
	Why  string `json:"why"`
}

// Report is what a swap did.
type Report struct {
	StaticPods []*Result       `json:"staticPods,omitempty"`
	Addons     []*AddonResult  `json:"addons,omitempty"`
	Binaries   []BinaryOutcome `json:"binaries,omitempty"`
	// KeptKubelets are the nodes whose kubelet a kubelet swap left.
	KeptKubelets []KeptKubelet `json:"keptKubelets,omitempty"`
	Nothing      string        `json:"nothing,omitempty"`
	// Via says how devk reached the nodes: ViaLocal, or ViaCluster
	// (devk's node agent, through the cluster's API).
	Via string `json:"via,omitempty"`
}

// The ways Report.Via names.
const (
	ViaLocal   = "local"
	ViaCluster = "cluster"
)

// BinaryOutcome is one swapped binary.
type BinaryOutcome struct {
	Component string `json:"component"`
	// Node is the node whose kubelet it is (kubelet only).
	Node string `json:"node,omitempty"`
	binary.Result
}

// Job is one swap (or rollback): what it was asked, what its phases
// found, and the node they act on. Phases run on it; Close ends it.
type Job struct {
	Options
	// Report is what the job did so far.
	Report *Report

	comps  []build.Component // as named; none: the outdated static pods
	addons []addon.Workload  // as named
	tree   *source.Tree
	state  *build.StateFile

	selected  bool // selectPods ran; pods and selectErr are its result
	selectErr error
	pods      map[string]*podSwap // by component name

	addonsSelected bool // selectAddons ran; addonSwaps and addonsErr are its result
	addonsErr      error
	addonSwaps     map[string]*addonSwap // by component name
	// api is the clientset selection reads addons with before the node
	// is connected.
	api kubernetes.Interface

	target      *Target
	closeTarget func()
	lock        *nodelock.Lock
	locks       *nodelock.Set // the cluster's and its nodes', when the job changes several
	// current is the static pod whose phases ran last: Close finishes
	// or undoes its swap if the run failed.
	current *podSwap
	// currentAddon is the addon whose phases ran last: Close undoes its
	// swap if the run failed before it was verified.
	currentAddon *addonSwap
}

// NewJob checks o and reads what every phase relies on (the components,
// the tree's state file); it touches nothing.
func NewJob(o Options) (*Job, error) {
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	j := &Job{Options: o, Report: &Report{}, pods: map[string]*podSwap{}, addonSwaps: map[string]*addonSwap{}}
	var err error
	if j.comps, j.addons, err = selectComponents(o.Components); err != nil {
		return nil, err
	}
	if o.Rollback {
		if len(j.comps) == 0 && len(j.addons) == 0 {
			return nil, fmt.Errorf("name what to roll back: a static pod (apiserver, controller-manager, scheduler, etcd), an addon (%s), kubectl or kubelet", strings.Join(addonNames(), ", "))
		}
		return j, nil
	}
	if o.Debug != nil && o.Debug.Stop && !slices.ContainsFunc(j.comps, func(c build.Component) bool { return !c.StaticPod }) {
		return j, nil // the manifests name what to go back to
	}
	if o.State != nil {
		j.state = o.State
		return j, nil
	}
	if j.tree, err = source.Open(o.TreeDir); err != nil {
		return nil, err
	}
	if j.state, err = build.LoadState(j.tree.Root); err != nil {
		return nil, err
	}
	return j, nil
}

// Run swaps (or rolls back) what o names: Phases on a new Job, then
// Close; on several control-plane nodes, that for each in turn
// (runRolling). popts select phases, ask for a plan, and report.
func Run(ctx context.Context, o Options, popts phase.Options) (*Report, error) {
	if len(o.ControlPlanes) > 0 {
		return runRolling(ctx, o, popts)
	}
	return runOne(ctx, o, popts, nil)
}

// runOne is Run on one node; around, when set, runs once the job knows
// what it swaps, before its phases, and the func it returns once they
// ended (and the job was closed).
func runOne(ctx context.Context, o Options, popts phase.Options, around func(context.Context, *Job) (func(context.Context) error, error)) (*Report, error) {
	j, err := NewJob(o)
	if err != nil {
		return &Report{}, err
	}
	if popts.Reporter == nil {
		popts.Reporter = j.Reporter
	}
	if j.touchesNode() && j.Node.ManifestsDir == "" {
		return j.Report, j.noNode()
	}
	if popts.DryRun {
		// A plan names the static pods and addons that would be swapped;
		// selecting them only reads.
		_ = j.selectPods()
		_ = j.selectAddons(ctx)
	}
	var after func(context.Context) error
	if around != nil && !popts.DryRun {
		if after, err = around(ctx, j); err != nil {
			return j.Report, j.Close(ctx, err)
		}
	}
	_, err = phase.Run(ctx, Phases(), j, popts)
	err = j.Close(ctx, err)
	if after != nil {
		if aerr := after(ctx); err == nil {
			err = aerr
		}
	}
	return j.Report, err
}

// Close ends the job. After a failed run (err) it first finishes or
// undoes the static-pod swap that was in flight, as far as it got (see
// podSwap.undo): a failed or interrupted swap is rolled back, one whose
// new pod already runs healthy is kept. Then it releases the runtime
// connection and the node lock. It returns err, with what the undo did.
func (j *Job) Close(ctx context.Context, err error) error {
	if err != nil && j.current != nil {
		err = j.current.undo(ctx, err)
	}
	if err != nil && j.currentAddon != nil {
		err = j.currentAddon.undo(ctx, err)
	}
	j.current, j.currentAddon = nil, nil
	if j.closeTarget != nil {
		j.closeTarget()
		j.closeTarget, j.target = nil, nil
	}
	if j.lock != nil {
		j.lock.Release()
		j.lock = nil
	}
	j.locks.Release()
	j.locks = nil
	return err
}

// named reports whether the component was named.
func (j *Job) named(name string) bool {
	for _, c := range j.comps {
		if c.Name == name {
			return true
		}
	}
	return false
}

// touchesNode says whether the job changes the node (and so takes its
// lock): every static pod, addon and the kubelet do (an addon's verify
// asks the node's runtime), kubectl does not; no component means the
// outdated static pods and addons.
func (j *Job) touchesNode() bool {
	if len(j.comps) == 0 || len(j.addons) > 0 {
		return true
	}
	for _, c := range j.comps {
		if c.StaticPod || c.Name == "kubelet" {
			return true
		}
	}
	return false
}

// lockNode takes the node's lock, once: one change to a node at a time,
// no two swaps sharing a backup and journal, no swap during `devk up` or
// `devk down`. A job that changes several nodes of a devk cluster (the
// kubelets) takes the cluster's lock and every node's instead; the
// rolling swap's job of one node has its node locked already.
func (j *Job) lockNode() error {
	if j.lock != nil || j.locks != nil || j.held.Holds(j.Node.ManifestsDir) {
		return nil
	}
	if j.ClusterDir != "" && j.changesSeveralNodes() {
		s, err := nodelock.AcquireCluster(j.ClusterDir, j.ClusterNodes, nodelock.Command())
		if err != nil {
			return err
		}
		j.locks = s
		return nil
	}
	if j.Node.ManifestsDir == "" {
		return nil
	}
	l, err := nodelock.Acquire(j.Node.ManifestsDir, nodelock.Command())
	if err != nil {
		return err
	}
	j.lock = l
	return nil
}

// changesSeveralNodes says whether the job may change a node besides its
// own: a kubelet swap restarts the kubelet of each node it lists (or of
// a node --node names, which need not be the job's).
func (j *Job) changesSeveralNodes() bool {
	return j.named("kubelet") && len(j.Kubelets) > 0
}

// errNoNode is what a swap that needs a node says when none was named.
var errNoNode = errors.New("no node to swap into: run `devk up`, or pass --manifests-dir, --kubeconfig and --cri-socket for a kubeadm node")

func (j *Job) noNode() error {
	if j.NoNode != nil {
		return j.NoNode
	}
	return errNoNode
}

// connect locks the node and connects to its API server and runtime,
// once.
func (j *Job) connect(ctx context.Context) (*Target, error) {
	if j.target != nil {
		return j.target, nil
	}
	nd := j.Options.Node
	if j.NoNode != nil || nd.ManifestsDir == "" || (nd.Kubeconfig == "" && !nd.InCluster) || nd.CRISocket == "" {
		return nil, j.noNode()
	}
	if j.dial != nil {
		j.target = j.dial(nd)
		j.target.StopGrace = j.StopGrace
		return j.target, nil
	}
	if err := j.lockNode(); err != nil {
		return nil, err
	}
	t, closeTarget, err := Connect(ctx, nd, j.NodeName)
	if err != nil {
		return nil, err
	}
	t.Reporter, t.Timeout, t.Command, t.StopGrace, t.Relist = j.Reporter, j.Timeout, j.Command, j.StopGrace, j.Relist
	j.target = t
	closers := []func(){closeTarget}
	j.target.Others = digest.NodeRuntimes{}
	for name, socket := range j.OtherRuntimes {
		rt, err := cri.Dial(socket)
		if err != nil {
			for _, f := range closers {
				f()
			}
			j.target = nil
			return nil, fmt.Errorf("node %s's runtime: %w", name, err)
		}
		closers = append(closers, func() { rt.Close() })
		j.target.Others[name] = rt
	}
	j.closeTarget = func() {
		for _, f := range closers {
			f()
		}
	}
	return j.target, nil
}

// Connect connects to the node nd's API server and runtime
// (digest.Connect, nodeName as there) and checks that the runtime
// answers: the Target a static pod's swap or run talks to. The caller
// sets its Reporter, Timeout, Command, StopGrace and Relist; close ends
// the connection.
func Connect(ctx context.Context, nd layout.Node, nodeName string) (t *Target, close func(), err error) {
	c, err := digest.Connect(ctx, nd, nodeName)
	if err != nil {
		return nil, nil, err
	}
	if _, err := c.Runtime.Version(ctx); err != nil {
		c.Close()
		return nil, nil, err
	}
	t = &Target{ManifestsDir: nd.ManifestsDir, KubeletRootDir: nd.KubeletRootDir, NodeName: c.NodeName, NetNS: nd.NetNS, Client: c.Client, Runtime: c.Runtime,
		Reporter: progress.Discard(), Timeout: DefaultTimeout, LogLines: DefaultLogLines}
	return t, c.Close, nil
}

// selectComponents sorts the names into catalog components (static
// pods, kubectl, kubelet) and addons, each in their own order.
func selectComponents(names []string) ([]build.Component, []addon.Workload, error) {
	var rest []string
	named := map[string]bool{}
	for _, n := range names {
		if _, ok := addon.Lookup(n); ok {
			named[n] = true
		} else {
			rest = append(rest, n)
		}
	}
	var comps []build.Component
	if len(rest) > 0 {
		resolved, err := build.Resolve(rest)
		if err != nil {
			return nil, nil, err
		}
		for _, c := range resolved {
			if _, ok := addon.Lookup(c.Name); ok {
				named[c.Name] = true // by its binary's name
				continue
			}
			if !c.StaticPod && c.Name != "kubectl" && c.Name != "kubelet" {
				return nil, nil, fmt.Errorf("%s is neither a static pod (apiserver, controller-manager, scheduler, etcd), an addon (%s), kubectl nor kubelet: devk cannot swap it", c.Name, strings.Join(addonNames(), ", "))
			}
			comps = append(comps, c)
		}
	}
	var addons []addon.Workload
	for _, w := range addon.Workloads {
		if named[w.Component] {
			addons = append(addons, w)
		}
	}
	return comps, addons, nil
}

func addonNames() []string {
	var out []string
	for _, w := range addon.Workloads {
		out = append(out, w.Component)
	}
	return out
}

// selectAll decides which static pods and addons the job swaps
// (selectPods, selectAddons).
func (j *Job) selectAll(ctx context.Context) error {
	if err := j.selectPods(); err != nil {
		return err
	}
	return j.selectAddons(ctx)
}

// selectAddons decides, once, which addons the job swaps (or rolls
// back): those named, else those on the cluster whose workload does not
// name their last pushed digest.
func (j *Job) selectAddons(ctx context.Context) error {
	if j.addonsSelected {
		return j.addonsErr
	}
	j.addonsSelected = true
	j.addonsErr = j.doSelectAddons(ctx)
	return j.addonsErr
}

func (j *Job) doSelectAddons(ctx context.Context) error {
	ws := j.addons
	if len(j.comps) == 0 && len(j.addons) == 0 {
		var err error
		if ws, err = j.outdatedAddons(ctx); err != nil {
			return err
		}
	}
	for _, w := range ws {
		a, err := j.newAddonSwap(ctx, w)
		if err != nil {
			return err
		}
		j.addonSwaps[w.Component] = a
	}
	return nil
}

// selectPods decides, once, which static pods the job swaps (or rolls
// back): those named, else those whose manifest does not name their last
// pushed digest. Each gets its podSwap, read from its manifest (or its
// backup, for a rollback).
func (j *Job) selectPods() error {
	if j.selected {
		return j.selectErr
	}
	j.selected = true
	j.selectErr = j.doSelect()
	return j.selectErr
}

func (j *Job) doSelect() error {
	var pods []build.Component
	for _, c := range j.comps {
		if c.StaticPod {
			pods = append(pods, c)
		}
	}
	if len(j.comps) == 0 && len(j.addons) == 0 {
		if j.Node.ManifestsDir == "" {
			return j.noNode()
		}
		var err error
		if pods, err = outdated(j.Node.ManifestsDir, j.state); err != nil {
			return err
		}
	}
	if len(pods) > 0 && j.Node.ManifestsDir == "" {
		return j.noNode()
	}
	for _, c := range pods {
		var p *podSwap
		var err error
		if j.Rollback {
			p, err = j.newRollback(c)
		} else {
			p, err = j.newSwap(c)
		}
		if err != nil {
			return err
		}
		j.pods[c.Name] = p
	}
	return nil
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
		ctr, err := staticpod.Container(pod, c.Binary)
		if err != nil {
			return nil, err
		}
		if digest.Of(ctr.Image) != digest.Of(cs.Pushed.Ref) {
			out = append(out, c)
		}
	}
	return out, nil
}

// pushed is the component's last push, from state.json.
func (j *Job) pushed(name string) (*build.ComponentState, error) {
	if j.state == nil {
		return nil, fmt.Errorf("no state file read for %s", name)
	}
	cs := j.state.Components[name]
	if cs == nil || cs.Pushed == nil {
		return nil, fmt.Errorf("no pushed image for %s yet: run `devk build %s --push` first", name, name)
	}
	return cs, nil
}

// DefaultKubectlDest is $DEVK_HOME/bin/kubectl.
func DefaultKubectlDest(devkHome string) string { return filepath.Join(devkHome, "bin", "kubectl") }
