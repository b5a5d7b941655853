// Package fakenodes is the job that gives a devk cluster kwok's fake
// nodes (`devk up --fake-nodes N`, `fakeNodes:` in the config file,
// `devk node add --fake N`, `devk node remove --fake N|--all-fake`): kwok
// built from its module, run by devk as a supervised process in node 0's
// namespaces with a client certificate of its own and a ClusterRole as
// narrow as kwok's, kube-proxy kept off the fake nodes, the Node objects
// made or deleted until the cluster has the count cluster.json records,
// and the wait until kwok has them Ready. It runs on the phase engine
// under the cluster's lock; every phase converges, so a job killed
// anywhere is finished by running it again.
package fakenodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/cluster/internal/joinnode"
	"github.com/devk/devk/cluster/internal/kubeconfig"
	"github.com/devk/devk/cluster/internal/kwok"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
	"github.com/devk/devk/source"
)

const (
	// ReadyTimeout bounds the wait for the fake nodes to be Ready.
	ReadyTimeout = 5 * time.Minute
	// readyPoll is how often the wait lists them.
	readyPoll = 500 * time.Millisecond
	// writers is how many Node creates and deletes run at once, and
	// writeQPS their client's rate.
	writers  = 16
	writeQPS = 500
	// startCheck is how long after its start kwok is looked at again.
	startCheck = time.Second
	// requestTimeout bounds each request of the job.
	requestTimeout = 30 * time.Second
	// fieldManager applies kube-proxy's node affinity apart from the
	// addon's own fields.
	fieldManager = "devk-fake-nodes"
	// kubeconfigName is kwok's kubeconfig beside node 0's others.
	kubeconfigName = "kwok"
)

// Options say how many fake nodes the cluster should have.
type Options struct {
	cluster.Options
	// Count, when set, is the number of fake nodes (--fake-nodes N);
	// nil keeps cluster.json's (the config file's, when one is given).
	Count *int
	// Add and Remove change the count by that many (node add|remove --fake).
	Add, Remove int
	// RemoveAll removes every fake node (node remove --all-fake).
	RemoveAll bool
}

// job is the phases' state.
type job struct {
	c    *cluster.Cluster
	want layout.FakeNodes
	cs   *kubernetes.Clientset
	// binary is kwok as installed on node 0; config its stages file.
	binary, config string
	// restart: kwok's binary, kubeconfig or stages changed.
	restart bool
	// made and deleted are the Node objects this run created and deleted.
	made, deleted int
}

// Phases are the fake-node job's.
func Phases() []*phase.Phase[*job] {
	p := func(name, short string, run func(*job, context.Context) (phase.Outcome, error)) *phase.Phase[*job] {
		return &phase.Phase[*job]{Name: name, Short: short, Run: phase.Method(run)}
	}
	running := func(j *job) (bool, string) { return j.want.Total() > 0, "no fake nodes" }
	return []*phase.Phase[*job]{
		p("preflight", "the count fits the pod subnet (a /24 each) and the machine's memory; the stage files are kwok Stages", (*job).preflight),
		phase.If(p("build", "build kwok from its module ("+build.KwokVersion+", incrementally), install it on node 0, kwok's stages (its own defaults from its module, or fakeNodes.stages)", (*job).build), running),
		phase.If(p("credential", "kwok's kubeconfig (client certificate "+kwok.User+", 0600), its ClusterRole and binding, its FlowSchema", (*job).credential), running),
		phase.If(p("kube-proxy", "keep kube-proxy's DaemonSet off the fake nodes (node affinity: no "+layout.FakeNodeKey+" label)", (*job).keepKubeProxyOff), running),
		phase.If(p("kwok", "run kwok as a supervised process in node 0's network and mount namespaces, managing the nodes with its annotation (restarted when its binary, stages or leases changed: a lease grows with the count)", (*job).start), running),
		p("nodes", "create the missing fake Node objects and delete those beyond the count, with their leases", (*job).nodes),
		phase.If(p("wait", "wait until kwok has every fake node Ready", (*job).wait), running),
		phase.If(p("stop", "with no fake nodes left: stop kwok and remove its rights", (*job).stop), func(j *job) (bool, string) { return j.want.Total() == 0, "fake nodes remain" }),
	}
}

// Run opens the cluster, takes its lock and runs the job; the count
// it is asked for is recorded in cluster.json first, so a killed run's
// next one (or `devk up`) finishes it. When the count changes what the
// control plane is tuned for (controlplane.Tuning: client rate limits,
// the node-monitor grace period that kwok's leases need), up's phases
// write it as `devk up` would: before the job when the count grows, so
// the grace period covers kwok's longer leases before kwok renews at
// them, and after it when the count shrinks.
func Run(ctx context.Context, o Options, popts phase.Options) (*cluster.Cluster, phase.Result, error) {
	c, err := cluster.Open(o.Options)
	if err != nil {
		return nil, phase.Result{}, err
	}
	if !c.Exists() {
		return c, phase.Result{}, c.NoCluster()
	}
	want, err := o.wanted(c)
	if err != nil {
		return c, phase.Result{}, err
	}
	tuned := c.Config
	tuned.Spec.FakeNodes = want
	retune := !popts.DryRun && !reflect.DeepEqual(controlplane.Tuning(c.Config), controlplane.Tuning(tuned))
	grows := want.Total() > c.Config.Spec.FakeNodes.Total()
	// From here the count is the one asked for, whatever up records.
	total := want.Total()
	o.Count, o.Add, o.Remove, o.RemoveAll = &total, 0, 0, false
	var res phase.Result
	if retune && grows {
		if c, err = up(ctx, o, c.Reporter, &total, &res); err != nil {
			return c, res, err
		}
	}
	jres, err := Ensure(ctx, c, o, popts)
	res.Timings = append(res.Timings, jres.Timings...)
	if err != nil || !retune || grows {
		return c, res, err
	}
	c, err = up(ctx, o, c.Reporter, nil, &res)
	return c, res, err
}

// up runs up's phases on the cluster, with a count of fake nodes when
// one is given, its progress under "up" of rep and its timings under
// "up/" in res.
func up(ctx context.Context, o Options, rep progress.Reporter, fake *int, res *phase.Result) (*cluster.Cluster, error) {
	uo := o.Options
	uo.FakeNodes = fake
	uo.Reporter = progress.Under(rep, "up")
	c, ures, err := cluster.Up(ctx, uo, phase.Options{})
	for _, t := range ures.Timings {
		t.Path = "up/" + t.Path
		res.Timings = append(res.Timings, t)
	}
	return c, err
}

// Precheck checks, before `devk up` changes anything, what the flag and
// the config file ask for: the cluster (as it is, or as up would make
// it) has room for the fake nodes in its pod subnet, and the stage
// files are kwok's Stages.
func Precheck(o Options) error {
	count := o.Count
	if o.FakeNodes != nil {
		count = o.FakeNodes
	}
	if count != nil && *count < 0 {
		return fmt.Errorf("--fake-nodes %d: want 0 or more", *count)
	}
	opened := o.Options
	opened.FakeNodes = nil // the count the cluster has, to say how many are new
	c, err := cluster.Open(opened)
	if err != nil {
		return err
	}
	j := &job{c: c, want: c.Config.Spec.FakeNodes}
	if count != nil {
		j.want = j.want.WithTotal(*count)
	}
	have := 0
	if c.Exists() {
		have = c.Config.Spec.FakeNodes.Total()
	}
	if err := j.fits(j.want.Total() - have); err != nil {
		return err
	}
	return j.checkStages()
}

// checkStages reads and checks the user's stage files.
func (j *job) checkStages() error {
	for _, f := range j.want.Stages {
		if _, _, err := kwok.CheckStages(f); err != nil {
			return fmt.Errorf("fakeNodes.stages: %w", err)
		}
	}
	return nil
}

// wanted is the fake nodes the options ask of the cluster, from those
// it has.
func (o Options) wanted(c *cluster.Cluster) (layout.FakeNodes, error) {
	want := c.Config.Spec.FakeNodes
	switch {
	case o.RemoveAll:
		want = want.WithTotal(0)
	case o.Count != nil:
		want = want.WithTotal(*o.Count)
	case o.Remove > want.Total():
		return want, fmt.Errorf("cluster %s has %d fake nodes: cannot remove %d (--all-fake removes every one)", c.Config.Name, want.Total(), o.Remove)
	default:
		want = want.WithTotal(want.Total() + o.Add - o.Remove)
	}
	if want.Total() < 0 {
		return want, fmt.Errorf("--fake-nodes %d: want 0 or more", want.Total())
	}
	return want, nil
}

// Ensure runs the job on an open cluster (up's, after its own phases).
func Ensure(ctx context.Context, c *cluster.Cluster, o Options, popts phase.Options) (phase.Result, error) {
	want, err := o.wanted(c)
	if err != nil {
		return phase.Result{}, err
	}
	j := &job{c: c, want: want}
	if popts.DryRun {
		return phase.Run(ctx, Phases(), j, popts)
	}
	if os.Geteuid() != 0 {
		return phase.Result{}, errors.New("fake nodes need root: kwok runs in node 0's namespaces; run devk as root (sudo -E devk …)")
	}
	unlock, err := c.Lock()
	if err != nil {
		return phase.Result{}, err
	}
	defer unlock()
	popts.Job = "fake-nodes"
	if popts.Reporter == nil {
		popts.Reporter = c.Reporter
	}
	return phase.Run(ctx, Phases(), j, popts)
}

func (j *job) client() (*kubernetes.Clientset, error) {
	if j.cs != nil {
		return j.cs, nil
	}
	// node 0's super-admin.conf, as the cluster's own Client, at the
	// rate of a thousand nodes' writes (system:masters is exempt from
	// the API server's priority and fairness).
	cs, err := kube.Client(j.c.FirstNode().Files.Kubeconfig("super-admin"), kube.WithTimeout(requestTimeout), kube.WithRate(writeQPS, 2*writeQPS))
	if err != nil {
		return nil, fmt.Errorf("%w (run `devk up`)", err)
	}
	j.cs = cs
	return cs, nil
}

// preflight checks the count against the pod subnet and the memory, and
// the user's stage files, then records the count.
func (j *job) preflight(ctx context.Context) (phase.Outcome, error) {
	total := j.want.Total()
	have, err := j.existing(ctx)
	if err != nil {
		return phase.Done, err
	}
	if err := j.fits(total - len(have)); err != nil {
		return phase.Done, err
	}
	if err := j.checkStages(); err != nil {
		return phase.Done, err
	}
	if reflect.DeepEqual(j.c.Config.Spec.FakeNodes, j.want) {
		return phase.Unchanged("%d fake nodes, %d there", total, len(have)), nil
	}
	j.c.Config.Spec.FakeNodes = j.want
	if err := j.c.SaveConfig(); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%d fake nodes recorded (%d there)", total, len(have)), nil
}

// fits checks that every node, real and fake, has a /24 of the pod
// subnet, and that the machine has the memory for adding more.
func (j *job) fits(adding int) error {
	if err := kwok.MemoryProblem(adding, node.MemAvailable()); err != nil {
		return err
	}
	total, real := j.want.Total(), max(len(j.c.Config.Network.Nodes), 1)
	mask := config.NodeCIDRMaskSize
	if fit := kwok.PodSubnetNodes(j.c.Config.PodCIDR, mask); total > 0 && total+real > fit {
		wider := kwok.WiderMask(total+real, mask)
		return fmt.Errorf("%d fake and %d real nodes do not fit the cluster's pod subnet %s: it has room for %d nodes (a /%d each, the controller-manager's --node-cidr-mask-size); ask for at most %d fake nodes, or make a cluster whose config file sets networking.podSubnet to a /%d or wider (%d nodes)",
			total, real, j.c.Config.PodCIDR, fit, mask, max(fit-real, 0), wider, 1<<(mask-wider))
	}
	return nil
}

// build builds kwok, installs it on node 0 and writes its stages.
func (j *job) build(ctx context.Context) (phase.Outcome, error) {
	files := j.c.FirstNode().Files
	j.binary = filepath.Join(files.Dir, "bin", "kwok")
	var version string
	binChanged := false
	// kwok needs nothing of the tree's but a place to build: outside
	// any tree, the kwok node 0 has is kept.
	bj, err := build.Run(ctx, build.Options{TreeDir: j.c.TreeDir, Components: []string{build.Kwok}, Reporter: progress.Under(j.c.Reporter, "build")}, phase.Options{})
	switch _, installed := os.Stat(j.binary); {
	case errors.Is(err, source.ErrNoTree) && installed == nil:
		version = "installed (no tree to build it in here)"
	case err != nil:
		return phase.Done, err
	default:
		version = bj.Binaries[0].Version
		data, err := os.ReadFile(bj.Binaries[0].Path)
		if err != nil {
			return phase.Done, err
		}
		if err := os.MkdirAll(filepath.Dir(j.binary), 0o755); err != nil {
			return phase.Done, err
		}
		if binChanged, err = atomicfile.WriteIfChanged(j.binary, data, 0o755, ""); err != nil {
			return phase.Done, err
		}
	}
	moduleDir := ""
	if len(j.want.Stages) == 0 {
		if moduleDir, err = source.ModuleFiles(ctx, build.KwokModule, build.KwokVersion); err != nil {
			return phase.Done, fmt.Errorf("kwok's default stages: %w", err)
		}
	}
	stages, n, err := kwok.Stages(j.want.Stages, moduleDir)
	if err != nil {
		return phase.Done, err
	}
	j.config = filepath.Join(files.Dir, "kwok.yaml")
	stagesChanged, err := atomicfile.WriteIfChanged(j.config, stages, 0o644, "")
	if err != nil {
		return phase.Done, err
	}
	j.restart = j.restart || binChanged || stagesChanged
	from := "kwok's defaults"
	if len(j.want.Stages) > 0 {
		from = strings.Join(j.want.Stages, ", ")
	}
	return phase.ChangedIf(binChanged || stagesChanged, "kwok %s, %d stages (%s)", version, n, from), nil
}

// credential writes kwok's kubeconfig and applies its rights.
func (j *job) credential(ctx context.Context) (phase.Outcome, error) {
	n := j.c.FirstNode()
	out, err := kubeconfig.Ensure(kubeconfig.Component{
		Path: n.Files.Kubeconfig(kubeconfigName), ClusterName: j.c.Config.Name, Server: j.c.Config.APIServerURL(),
		PKIDir: n.Files.PKI(), Spec: pki.KubeconfigSpec{Name: kubeconfigName, CommonName: kwok.User},
		Validity: j.c.Config.Spec.LeafValidity(),
	}, true)
	if err != nil {
		return phase.Done, err
	}
	cs, err := j.client()
	if err != nil {
		return phase.Done, err
	}
	rbac, err := kwok.ApplyRBAC(ctx, cs)
	if err != nil {
		return phase.Done, err
	}
	j.restart = j.restart || out.Changed
	return phase.ChangedIf(out.Changed || rbac, "kubeconfig %s; ClusterRole, binding and FlowSchema %s", out.Detail, kwok.RoleName), nil
}

// keepKubeProxyOff gives kube-proxy's DaemonSet a node affinity that
// leaves out the fake nodes (it tolerates every taint, so the fake
// nodes' taint does not keep it off). devk's own addon has it already.
func (j *job) keepKubeProxyOff(ctx context.Context) (phase.Outcome, error) {
	cs, err := j.client()
	if err != nil {
		return phase.Done, err
	}
	ds, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, addons.KubeProxy, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return phase.Unchanged("no kube-proxy"), nil
	}
	if err != nil {
		return phase.Done, err
	}
	if kwok.KeepsOffFakeNodes(ds.Spec.Template.Spec.Affinity) {
		return phase.Unchanged("kube-proxy keeps off them"), nil
	}
	ac := appsv1ac.DaemonSet(addons.KubeProxy, metav1.NamespaceSystem).WithSpec(appsv1ac.DaemonSetSpec().
		WithTemplate(corev1ac.PodTemplateSpec().WithSpec(corev1ac.PodSpec().WithAffinity(kwok.NotOnFakeNodes()))))
	if _, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return phase.Done, fmt.Errorf("kube-proxy's node affinity: %w", err)
	}
	return phase.Changed("node affinity added (kube-proxy's pods roll)"), nil
}

// start runs kwok on node 0, restarting it when what it reads or its
// command line (the leases, which follow the count) changed.
func (j *job) start(ctx context.Context) (phase.Outcome, error) {
	n := j.c.FirstNode()
	procs := n.Files.Procs()
	want := kwok.Argv(j.binary, n.Files.Kubeconfig(kubeconfigName), j.config, j.want.Total())
	if pid, ok := procs.Running(kwok.ProcessName); ok {
		// nsenter execs kwok: the process's command line is kwok's.
		running := supervise.Argv(pid)
		j.restart = j.restart || !slices.Equal(running[max(0, len(running)-len(want)):], want)
	}
	stopped := false
	if j.restart {
		var err error
		if stopped, err = kwok.Stop(ctx, n.Files); err != nil {
			return phase.Done, err
		}
	}
	argv := n.Enter(want...)
	env := append(j.c.DaemonEnv(), kwok.Env(filepath.Join(n.Files.Dir, "kwok"))...)
	pid, started, err := procs.Start(supervise.Process{Name: kwok.ProcessName, Argv: argv, Env: env})
	if err != nil {
		return phase.Done, err
	}
	if started {
		// kwok exits at once on a bad config: look again before going on.
		select {
		case <-ctx.Done():
			return phase.Done, ctx.Err()
		case <-time.After(startCheck):
		}
		if _, ok := procs.Running(kwok.ProcessName); !ok {
			return phase.Done, fmt.Errorf("kwok exited; its log ends:\n%s", procs.ExitedTail(ctx, kwok.ProcessName, 15))
		}
	}
	switch {
	case stopped:
		return phase.Changed("kwok restarted (pid %d): its binary, credential, stages or leases (%d s) changed", pid, kwok.LeaseDurationSeconds(j.want.Total())), nil
	case started:
		return phase.Changed("kwok started (pid %d), leases of %d s, log %s", pid, kwok.LeaseDurationSeconds(j.want.Total()), procs.LogFile(kwok.ProcessName)), nil
	}
	return phase.Unchanged("kwok running (pid %d)", pid), nil
}

// existing lists the fake nodes there are.
func (j *job) existing(ctx context.Context) ([]corev1.Node, error) {
	cs, err := j.client()
	if err != nil {
		return nil, err
	}
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kwok.Selector})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// nodes creates the missing fake nodes and deletes the others.
func (j *job) nodes(ctx context.Context) (phase.Outcome, error) {
	cs, err := j.client()
	if err != nil {
		return phase.Done, err
	}
	have, err := j.existing(ctx)
	if err != nil {
		return phase.Done, err
	}
	want := j.want.List(j.c.Config.Name)
	wanted := map[string]bool{}
	for _, n := range want {
		wanted[n.Name] = true
	}
	there := map[string]bool{}
	var extra []string
	for _, n := range have {
		there[n.Name] = true
		if !wanted[n.Name] {
			extra = append(extra, n.Name)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(writers)
	var made, deleted atomic.Int32
	for _, n := range want {
		if there[n.Name] {
			continue
		}
		obj, err := kwok.Node(n)
		if err != nil {
			return phase.Done, err
		}
		g.Go(func() error {
			_, err := cs.CoreV1().Nodes().Create(gctx, obj, metav1.CreateOptions{FieldManager: kube.FieldManager})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create fake node %s: %w", n.Name, err)
			}
			made.Add(1)
			return nil
		})
	}
	for _, name := range extra {
		g.Go(func() error {
			if err := deleteNode(gctx, cs, name); err != nil {
				return err
			}
			deleted.Add(1)
			return nil
		})
	}
	err = g.Wait()
	j.made, j.deleted = int(made.Load()), int(deleted.Load())
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(j.made+j.deleted > 0, "%d created, %d deleted: %d fake nodes", j.made, j.deleted, len(want)), nil
}

// deleteNode deletes a fake node and its lease (the garbage collector
// would, once kwok had set the lease's owner).
func deleteNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete fake node %s: %w", name, err)
	}
	if err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete fake node %s's lease: %w", name, err)
	}
	return nil
}

// wait waits until every fake node is Ready.
func (j *job) wait(ctx context.Context) (phase.Outcome, error) {
	total := j.want.Total()
	t0 := time.Now()
	ready := 0
	err := wait.PollUntilContextTimeout(ctx, readyPoll, ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		have, err := j.existing(ctx)
		if err != nil {
			return false, nil
		}
		ready = 0
		for i := range have {
			if joinnode.NotReady(&have[i], time.Time{}) == "" {
				ready++
			}
		}
		return ready >= total, nil
	})
	if poll.TimedOut(ctx, err) {
		procs := j.c.FirstNode().Files.Procs()
		return phase.Done, fmt.Errorf("%d of %d fake nodes Ready after %s; kwok's log ends:\n%s", ready, total, ReadyTimeout, supervise.Tail(procs.LogFile(kwok.ProcessName), 15))
	}
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(j.made > 0, "%d Ready (%s)", total, progress.Round(time.Since(t0))), nil
}

// stop stops kwok and removes its rights and kubeconfig.
func (j *job) stop(ctx context.Context) (phase.Outcome, error) {
	n := j.c.FirstNode()
	stopped, err := kwok.Stop(ctx, n.Files)
	if err != nil {
		return phase.Done, err
	}
	removed := false
	if err := os.Remove(n.Files.Kubeconfig(kubeconfigName)); err == nil {
		removed = true
	}
	if _, err := os.Stat(n.Files.Kubeconfig("super-admin")); err == nil {
		cs, err := j.client()
		if err != nil {
			return phase.Done, err
		}
		gone, err := kwok.DeleteRBAC(ctx, cs)
		if err != nil {
			return phase.Done, err
		}
		removed = removed || gone
	}
	return phase.ChangedIf(stopped || removed, "kwok stopped: %v; its kubeconfig and rights removed: %v", stopped, removed), nil
}
