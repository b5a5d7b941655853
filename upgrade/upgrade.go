// Package upgrade is `devk upgrade`: a devk cluster moved to another
// tree's build in kubeadm's order, each step a swap verified by digest
// before the next (etcd, then the control plane one node at a time, the
// addons, each node's kubelet drained and uncordoned around it, kubectl),
// after the version skew policy (internal/skew) and the new binaries'
// flags were checked against what the cluster gives them. Its journal
// (the cluster's upgrade.json) records what ran before: a killed upgrade
// run again resumes, and --rollback goes back step by step.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/drain"
	"github.com/devk/devk/cluster/kubeadmupgrade"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/skew"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
	"github.com/devk/devk/swap"
)

// Options say what to upgrade to what.
type Options struct {
	// Cluster is the devk cluster, opened.
	Cluster *cluster.Cluster
	// TreeDir is the tree to upgrade to (one `devk source get` made);
	// --rollback reads it from the journal.
	TreeDir string
	// Swap is how a swap reaches the cluster (devk swap's options for
	// it: the node, the control planes, the kubelets, kubectl's path);
	// the upgrade sets the tree, the components and the reporter of each.
	Swap swap.Options
	// ForceSkew runs an upgrade the version skew policy refuses, for a
	// contributor testing exactly that skew.
	ForceSkew bool
	// Rollback goes back, step by step in the reverse order, to what the
	// journal says ran before the upgrade.
	Rollback bool
	Reporter progress.Reporter
}

// The components an upgrade builds and swaps, by step.
var (
	etcdComponents  = []string{"etcd"}
	controlPlane    = []string{"apiserver", "controller-manager", "scheduler"}
	addonComponents = []string{"kube-proxy", "coredns"}
	built           = []string{"apiserver", "controller-manager", "scheduler", "kube-proxy", "kubelet", "kubectl", "etcd", "coredns"}
)

// controlPlaneComponents are the static pods whose flags the new
// binaries are checked against: the build's name and the pod's.
var controlPlaneComponents = []struct{ Name, Pod string }{
	{"apiserver", "kube-apiserver"}, {"controller-manager", "kube-controller-manager"}, {"scheduler", "kube-scheduler"}, {"etcd", "etcd"},
}

// Report is what an upgrade did.
type Report struct {
	// Tree is the tree upgraded to, To its version.
	Tree string `json:"tree"`
	To   string `json:"to"`
	// From is what ran before the upgrade began; Versions what runs now.
	From     []skew.Running `json:"from"`
	Versions []skew.Running `json:"versions,omitempty"`
	// Rollback says the run went back to From.
	Rollback bool `json:"rollback,omitempty"`
	// SkewForced is the policy's refusal --force-skew overrode.
	SkewForced string `json:"skewForced,omitempty"`
	// FlagsChecked is how many flags and feature gates the new binaries
	// were checked for.
	FlagsChecked int `json:"flagsChecked,omitempty"`
	// Plan is each step's component, node and versions (with --dry-run
	// the upgrade's whole plan).
	Plan []PlanStep `json:"plan"`
	// Swaps are the swaps the steps ran, by step.
	Swaps []StepSwap `json:"swaps,omitempty"`
}

// PlanStep is one component moved on one node.
type PlanStep struct {
	Step      string `json:"step"`
	Component string `json:"component"`
	Node      string `json:"node,omitempty"`
	// From and To are the versions it runs now and after (etcd and
	// CoreDNS: their images say).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// FromImage is the image a static pod or addon runs now, Image the
	// one it moves to (repo@sha256:…, once built).
	FromImage string `json:"fromImage,omitempty"`
	Image     string `json:"image,omitempty"`
}

// StepSwap is the swap one step ran.
type StepSwap struct {
	Step string       `json:"step"`
	Swap *swap.Report `json:"swap"`
}

// Job is one upgrade or rollback.
type Job struct {
	Options
	Report  *Report
	c       *cluster.Cluster
	tree    *source.Tree
	img     *image.Job
	journal *Journal
	cs      kubernetes.Interface
}

func (j *Job) client() (kubernetes.Interface, error) {
	if j.cs == nil {
		cs, err := j.c.Client()
		if err != nil {
			return nil, err
		}
		j.cs = cs
	}
	return j.cs, nil
}

// Phases are the upgrade's steps in their order; --rollback runs the
// swaps' steps in the reverse one (RollbackOrder).
func Phases() []*phase.Phase[*Job] {
	p := func(name, short string, run func(*Job, context.Context) (phase.Outcome, error)) *phase.Phase[*Job] {
		return &phase.Phase[*Job]{Name: name, Short: short, Run: phase.Method(run)}
	}
	forward := func(j *Job) (bool, string) { return !j.Rollback, "--rollback" }
	devkOwn := func(j *Job) (bool, string) {
		return !j.kubeadm(), "bootstrapper kubeadm: kubeadm upgrade apply and node do it"
	}
	kubeadmOnly := func(j *Job) (bool, string) {
		return j.kubeadm(), "devk's own bootstrap: devk swaps the static pods and addons"
	}
	buildPhases := phase.Map(image.BuildPhases(), func(j *Job) *image.Job { return j.img })
	phase.Nest("build", buildPhases)
	return []*phase.Phase[*Job]{
		p("preflight", "read the tree's version and every component's in the cluster; check the version skew policy at every step of the upgrade (--force-skew: reported, not refused); an upgrade to another tree left half done is refused", (*Job).preflight),
		{Name: "build", Short: "build the tree's " + strings.Join(built, ", ") + " (and kubeadm on a cluster kubeadm bootstraps) and push their images (devk build --push)", If: forward, Children: buildPhases},
		phase.If(p("flags", "run each new binary's --help: a flag or feature gate the cluster gives it (manifests, kube-proxy's DaemonSet, each kubelet's command line and config) that it does not take is refused, naming it, before anything changes", (*Job).flags), forward),
		phase.If(p("journal", "record what runs now (versions, images) and where the upgrade goes in the cluster's upgrade.json (0600), which a killed upgrade resumes from and --rollback goes back to", (*Job).writeJournal), forward),
		phase.If(p("etcd", "swap etcd to the tree's (the etcd its kubeadm names), one control-plane node at a time, verified by digest", (*Job).etcd), devkOwn),
		phase.If(p("control-plane", "swap kube-apiserver, kube-controller-manager and kube-scheduler, verified by digest, one control-plane node at a time (behind HAProxy: taken out around its own swap)", (*Job).controlPlane), devkOwn),
		phase.If(p("addons", "swap kube-proxy's DaemonSet and CoreDNS's Deployment, each rolled out and verified", (*Job).addons), devkOwn),
		phase.If(p("kubeadm-apply", "a cluster kubeadm bootstraps: tag devk's images of the tree with the names its kubeadm lists, install that kubeadm on the first control-plane node and run `kubeadm upgrade apply VERSION` there (etcd, its static pods, kubeadm's and the kubelets' config, CoreDNS, kube-proxy)", (*Job).kubeadmApply), kubeadmOnly),
		phase.If(p("kubeadm-node", "a cluster kubeadm bootstraps: install the tree's kubeadm on every other node and run `kubeadm upgrade node` there, one node at a time (a control plane's static pods; each node's kubelet config)", (*Job).kubeadmNodes), kubeadmOnly),
		p("kubelets", "one node at a time: cordon and drain it (the Eviction API: PodDisruptionBudgets hold), swap its kubelet (Ready with the new one), uncordon it", (*Job).kubelets),
		p("kubectl", "install the tree's kubectl as devk's kubectl ($DEVK_HOME/bin/kubectl)", (*Job).kubectl),
		p("verify", "read every component's version again: each runs the tree's (--rollback: what ran before, with the same images); record the version in cluster.json and close the journal", (*Job).verify),
	}
}

// RollbackOrder is the order --rollback runs the steps in: the reverse
// of the upgrade's, as a downgrade keeps the skew policy.
var RollbackOrder = []string{"preflight", "kubectl", "kubelets", "addons", "control-plane", "etcd", "verify"}

func rollbackPhases() []*phase.Phase[*Job] {
	by := map[string]*phase.Phase[*Job]{}
	for _, p := range Phases() {
		by[p.Name] = p
	}
	var out []*phase.Phase[*Job]
	for _, name := range RollbackOrder {
		out = append(out, by[name])
	}
	return out
}

// Run upgrades (or rolls back) the cluster o names, under the upgrade's
// lock; with popts.DryRun it reads the cluster and returns the plan.
func Run(ctx context.Context, o Options, popts phase.Options) (*Job, error) {
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	c := o.Cluster
	j := &Job{Options: o, c: c, Report: &Report{Rollback: o.Rollback}}
	if !c.Exists() {
		return j, c.NoCluster()
	}
	if j.kubeadm() && o.Rollback {
		return j, fmt.Errorf("cluster %s was bootstrapped by kubeadm, and kubeadm has no rollback of an upgrade (the older tree's `kubeadm upgrade apply OLD --force` downgrades the control plane but never etcd): devk upgrade --rollback does not run it; make the cluster again from the older tree (devk down%s; devk up --bootstrapper kubeadm)", c.Config.Name, c.NameFlag())
	}
	var err error
	if j.journal, err = readJournal(c.Files.Dir); err != nil {
		return j, err
	}
	if o.Rollback {
		if j.journal == nil || j.journal.RolledBack {
			return j, fmt.Errorf("cluster %s has no upgrade to roll back (no %s)", c.Config.Name, journalFile(c.Files.Dir))
		}
		o.TreeDir = j.journal.Tree
	}
	if o.TreeDir == "" {
		return j, errors.New("name the tree to upgrade to: devk upgrade --tree DIR (a tree `devk source get` made)")
	}
	if j.tree, err = source.Open(o.TreeDir); err != nil {
		return j, fmt.Errorf("--tree %s: %w", o.TreeDir, err)
	}
	j.TreeDir = j.tree.Root
	j.Report.Tree = j.tree.Root
	components := built
	if j.kubeadm() {
		components = append(slices.Clone(built), kubeadmupgrade.Component)
	}
	if j.img, err = image.NewJob(build.Options{TreeDir: j.tree.Root, Components: components}, image.Options{Push: true, Registry: c.Config.Registry}); err != nil {
		return j, err
	}
	popts.Job = "upgrade"
	if popts.Reporter == nil {
		popts.Reporter = o.Reporter
	}
	phases := Phases()
	if o.Rollback {
		phases = rollbackPhases()
	}
	if popts.DryRun {
		// The plan needs the versions: preflight only reads.
		plan := popts
		plan.DryRun, plan.Only = false, "preflight"
		if _, err := phase.Run(ctx, phases, j, plan); err != nil {
			return j, err
		}
		return j, j.plan(ctx)
	}
	if os.Geteuid() != 0 {
		return j, errors.New("devk upgrade swaps the cluster's components and restarts its kubelets: run it as root (sudo -E devk upgrade …)")
	}
	lock, err := nodelock.Acquire(filepath.Join(c.Files.Dir, "upgrade"), nodelock.Command())
	if err != nil {
		return j, err
	}
	defer lock.Release()
	_, err = phase.Run(ctx, phases, j, popts)
	return j, err
}

// preflight reads the versions and checks the skew policy.
func (j *Job) preflight(ctx context.Context) (phase.Outcome, error) {
	if err := pinned(j.c.Config, j.c.NameFlag()); err != nil {
		return phase.Done, err
	}
	v, err := j.tree.Version(ctx)
	if err != nil {
		return phase.Done, err
	}
	j.Report.To = v.GitVersion
	running, err := j.runningSettled(ctx)
	if err != nil {
		return phase.Done, err
	}
	if jr := j.journal; jr != nil && !jr.Done && !jr.RolledBack && !j.Rollback && jr.Tree != j.tree.Root {
		return phase.Done, fmt.Errorf("an upgrade of cluster %s to %s (%s) is half done: finish it with `devk upgrade --tree %s%s`, or go back with `devk upgrade --rollback%s`",
			j.c.Config.Name, jr.To, jr.Tree, jr.Tree, j.c.NameFlag(), j.c.NameFlag())
	}
	j.Report.From = running
	if jr := j.journal; jr != nil && !jr.RolledBack && (j.Rollback || jr.Tree == j.tree.Root) {
		j.Report.From = jr.From // resumed, run again or rolled back: what ran before it began
	}
	if j.Rollback {
		j.Report.To = j.journal.To
		return phase.Unchanged("back from %s to %s", j.journal.To, versionsOf(j.journal.From)), nil
	}
	if err := skew.Upgrade(running, j.Report.To); err != nil {
		if !j.ForceSkew {
			return phase.Done, fmt.Errorf("%w\n(--force-skew runs it all the same, for testing exactly that skew)", err)
		}
		j.Report.SkewForced = err.Error()
		j.Reporter.Progress(progress.StepOf(ctx), progress.Status{Note: "--force-skew: " + err.Error()})
	}
	if e := j.c.Config.Spec.EmulatedVersion; e != "" {
		if err := skew.CheckEmulated(e, j.Report.To); err != nil {
			return phase.Done, fmt.Errorf("the cluster's config: %w, set by `devk up --config FILE` before the upgrade", err)
		}
	}
	return phase.Unchanged("%s → %s, %d components within the skew policy at every step", versionsOf(running), j.Report.To, len(running)), nil
}

// pinned refuses an upgrade or rollback while a worker runs a tree of
// its own (the config file's nodes[].tree), before anything is read:
// the upgrade moves every node to one tree and would leave that worker's
// record (and on devk's own clusters its kube-proxy) on its old one.
// nameFlag is the cluster's --name flag (" --name x").
func pinned(cfg layout.Config, nameFlag string) error {
	for _, n := range cfg.Network.Nodes {
		if n.Tree != "" && !n.Leaving {
			return fmt.Errorf("node %s runs its own tree %s (the config file's nodes[].tree), and devk upgrade moves every node to one tree: remove the node first (`devk node remove%s %s`) or give it none (`devk up%s --config FILE` without its tree), then upgrade",
				n.Name, n.Tree, nameFlag, n.Name, nameFlag)
		}
	}
	return nil
}

// settleTimeout is how long preflight and verify read the versions again
// while a component does not answer: after a killed upgrade, the API
// server it was swapping may still be starting.
const settleTimeout = 90 * time.Second

// runningSettled is running, read again every second while a component
// does not answer, at most settleTimeout; the last error then.
func (j *Job) runningSettled(ctx context.Context) ([]skew.Running, error) {
	var rs []skew.Running
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, settleTimeout, true, func(ctx context.Context) (bool, error) {
		rs, last = j.running(ctx)
		if last != nil {
			j.Reporter.Progress(progress.StepOf(ctx), progress.Status{Note: "waiting: " + last.Error()})
		}
		return last == nil, nil
	})
	if poll.TimedOut(ctx, err) && last != nil {
		return nil, last
	}
	return rs, err
}

// versionsOf says which versions rs run ("v1.34.4", "v1.34.4 and v1.35.4").
func versionsOf(rs []skew.Running) string {
	var vs []string
	for _, r := range rs {
		if !slices.Contains(vs, r.Version) {
			vs = append(vs, r.Version)
		}
	}
	return strings.Join(vs, " and ")
}

func (j *Job) flags(ctx context.Context) (phase.Outcome, error) {
	n, err := j.checkFlags(ctx)
	j.Report.FlagsChecked = n
	if err != nil {
		return phase.Done, err
	}
	return phase.Unchanged("%d flags and feature gates checked against the new binaries' --help", n), nil
}

// newBinary is the tree's built binary of component.
func (j *Job) newBinary(component string) (string, error) {
	st, err := build.LoadState(j.tree.Root)
	if err != nil {
		return "", err
	}
	c := st.Component(component)
	if c == nil || c.Binary == nil {
		return "", fmt.Errorf("%s is not built in %s: run devk upgrade without --skip-phases build", component, j.tree.Root)
	}
	return c.Binary.Path, nil
}

// images are the images the static pods (node/pod) and addons run now.
func (j *Job) images(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range j.c.Config.ControlPlanes() {
		files, err := j.c.Files.Node(j.c.Config, n.Name)
		if err != nil {
			return nil, err
		}
		for _, comp := range controlPlaneComponents {
			img, err := staticpod.Image(filepath.Join(files.Manifests(), comp.Pod+".yaml"), comp.Pod)
			if err != nil {
				return nil, err
			}
			out[n.Name+"/"+comp.Pod] = img
		}
	}
	cs, err := j.client()
	if err != nil {
		return nil, err
	}
	for _, name := range addonComponents {
		w, _ := addon.Lookup(name)
		img, err := addonImage(ctx, cs, w)
		if err != nil {
			return nil, err
		}
		out[name] = img
	}
	return out, nil
}

// addonImage is the image of workload w's container of its name.
func addonImage(ctx context.Context, cs kubernetes.Interface, w addon.Workload) (string, error) {
	var spec []struct{ name, image string }
	switch w.Kind {
	case addon.DaemonSet:
		ds, err := cs.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("read %s: %w", w, err)
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			spec = append(spec, struct{ name, image string }{c.Name, c.Image})
		}
	default:
		d, err := cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("read %s: %w", w, err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			spec = append(spec, struct{ name, image string }{c.Name, c.Image})
		}
	}
	for _, c := range spec {
		if c.name == w.Container {
			return c.image, nil
		}
	}
	return "", fmt.Errorf("%s has no container %s", w, w.Container)
}

func (j *Job) writeJournal(ctx context.Context) (phase.Outcome, error) {
	if jr := j.journal; jr != nil && !jr.RolledBack && jr.Tree == j.tree.Root {
		// Resumed, or run again once done: what ran before it began stays
		// what --rollback goes back to.
		if jr.Done {
			return phase.Unchanged("the upgrade to %s begun %s is done; checking every step", jr.To, jr.Started.Format(time.RFC3339)), nil
		}
		return phase.Unchanged("resuming the upgrade to %s begun %s", jr.To, jr.Started.Format(time.RFC3339)), nil
	}
	imgs, err := j.images(ctx)
	if err != nil {
		return phase.Done, err
	}
	j.journal = &Journal{Tree: j.tree.Root, To: j.Report.To, From: j.Report.From, FromImages: imgs, Started: time.Now().UTC()}
	if err := j.journal.write(j.c.Files.Dir); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%s", journalFile(j.c.Files.Dir)), nil
}

// swap runs one step's swap of comps (kubelets: those kubelets only),
// its progress under the step, its kill points "upgrade/<step>/…".
func (j *Job) swap(ctx context.Context, step string, comps []string, kubelets []swap.KubeletNode) (phase.Outcome, error) {
	if j.Rollback {
		var err error
		if comps, err = j.toRollBack(ctx, comps); err != nil {
			return phase.Done, err
		}
		if len(comps) == 0 {
			return phase.Unchanged("already what ran before the upgrade"), nil
		}
	}
	o := j.Swap
	o.TreeDir, o.Components, o.Rollback = j.tree.Root, comps, j.Rollback
	if kubelets != nil {
		o.Kubelets = kubelets
	}
	o.Reporter = quietSkips{progress.Under(j.Reporter, progress.StepOf(ctx))}
	rep, err := swap.Run(ctx, o, phase.Options{Job: "upgrade/" + step, Reporter: o.Reporter})
	if rep != nil {
		j.Report.Swaps = append(j.Report.Swaps, StepSwap{Step: step, Swap: rep})
	}
	if err != nil {
		return phase.Done, err
	}
	return swapOutcome(rep), nil
}

// toRollBack are those of comps that a rollback must swap back: a static
// pod or addon whose image is not the journal's from before the upgrade
// on some node (a half-done upgrade never swapped the others, and a
// swap's rollback of them would go back to whatever preceded their last
// swap), kubectl when its version is not the journal's; the kubelet is
// decided node by node (kubeletDone).
func (j *Job) toRollBack(ctx context.Context, comps []string) ([]string, error) {
	imgs, err := j.images(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range comps {
		switch name {
		case "kubelet":
			out = append(out, name)
		case "kubectl":
			v, err := kubectlVersion(ctx, j.Swap.KubectlDest)
			if err != nil {
				return nil, err
			}
			if v != versionOf(j.journal.From, skew.Kubectl) {
				out = append(out, name)
			}
		default:
			pod := name // an addon's key is its name, a static pod's node/pod
			if c, err := build.Lookup(name); err == nil && c.StaticPod {
				pod = c.Binary
			}
			for k, was := range j.journal.FromImages {
				if _, p, _ := strings.Cut(k, "/"); (k == pod || p == pod) && imgs[k] != was {
					out = append(out, name)
					break
				}
			}
		}
	}
	return out, nil
}

// quietSkips reports a step's swap without the phases it skips: a swap
// of one component skips those of every other (each "not selected").
type quietSkips struct{ progress.Reporter }

func (quietSkips) Skip(string, string) {}

// swapOutcome says what a step's swap changed.
func swapOutcome(rep *swap.Report) phase.Outcome {
	var changed, same []string
	add := func(what, node string, did bool) {
		if node != "" {
			what += " on " + node
		}
		if did {
			changed = append(changed, what)
		} else {
			same = append(same, what)
		}
	}
	for _, r := range rep.StaticPods {
		add(r.Pod, r.Node, !r.Unchanged)
	}
	for _, r := range rep.Addons {
		add(r.Component, "", !r.Unchanged)
	}
	for _, b := range rep.Binaries {
		add(b.Component, b.Node, b.Changed)
	}
	detail := ""
	if len(changed) > 0 {
		detail = "swapped " + strings.Join(changed, ", ")
	}
	if len(same) > 0 {
		if detail != "" {
			detail += "; "
		}
		detail += "already running " + strings.Join(same, ", ")
	}
	return phase.ChangedIf(len(changed) > 0, "%s", detail)
}

// kubeadm says whether the tree's kubeadm bootstrapped the cluster, which
// its kubeadm then upgrades (kubeadmApply, kubeadmNodes).
func (j *Job) kubeadm() bool { return j.c.Config.Spec.Kubeadm() }

// kubeadmUpgrade is the upgrade of the cluster by the tree's kubeadm.
func (j *Job) kubeadmUpgrade() (kubeadmupgrade.Upgrade, error) {
	u := kubeadmupgrade.Upgrade{Cluster: j.c, Version: j.Report.To, Images: map[string]string{}, Force: j.ForceSkew, Reporter: j.Reporter}
	st, err := build.LoadState(j.tree.Root)
	if err != nil {
		return u, err
	}
	if u.Kubeadm, err = j.newBinary(kubeadmupgrade.Component); err != nil {
		return u, err
	}
	for _, name := range built {
		if c := st.Component(name); c != nil && c.Pushed != nil {
			u.Images[name] = c.Pushed.Ref
		}
	}
	return u, nil
}

// kubeadmApply runs the tree's `kubeadm upgrade apply` on the first
// control-plane node unless it finished before (a resumed upgrade).
func (j *Job) kubeadmApply(ctx context.Context) (phase.Outcome, error) {
	if err := j.needJournal(); err != nil {
		return phase.Done, err
	}
	u, err := j.kubeadmUpgrade()
	if err != nil {
		return phase.Done, err
	}
	cs, err := j.client()
	if err != nil {
		return phase.Done, err
	}
	if done, err := u.Applied(ctx, cs); err != nil || done {
		return phase.Unchanged("kubeadm upgrade apply %s ran before (kubeadm-config and kube-proxy are at it)", u.Version), err
	}
	listed, moved, err := u.TagImages(ctx)
	if err != nil {
		return phase.Done, err
	}
	if err := u.Apply(ctx); err != nil {
		return phase.Done, err
	}
	return phase.Changed("kubeadm upgrade apply %s on %s (%d images its kubeadm names, %d tagged now)", u.Version, j.c.FirstNode().Name(), listed, len(moved)), nil
}

// kubeadmNodes runs the tree's `kubeadm upgrade node` on each node but
// the first, one at a time, but on a node whose kubelet already is the
// tree's (the kubelets phase swaps it after this: a resumed upgrade).
func (j *Job) kubeadmNodes(ctx context.Context) (phase.Outcome, error) {
	if err := j.needJournal(); err != nil {
		return phase.Done, err
	}
	u, err := j.kubeadmUpgrade()
	if err != nil {
		return phase.Done, err
	}
	cs, err := j.client()
	if err != nil {
		return phase.Done, err
	}
	var ran []string
	for _, k := range j.Swap.Kubelets {
		n, err := j.c.NodeNamed(k.Node)
		if err != nil {
			return phase.Done, err
		}
		if n.First() {
			continue // kubeadm upgrade apply's
		}
		if done, err := j.kubeletDone(ctx, cs, k); err != nil {
			return phase.Done, err
		} else if done {
			continue
		}
		if err := j.step(ctx, progress.StepOf(ctx)+"/"+k.Node, func(ctx context.Context) (phase.Outcome, error) {
			return phase.Changed("kubeadm upgrade node (%s)", n.Net.Role), u.Node(ctx, n)
		}); err != nil {
			return phase.Done, err
		}
		ran = append(ran, k.Node)
	}
	if len(ran) == 0 {
		return phase.Unchanged("every other node's kubelet already runs %s", u.Version), nil
	}
	return phase.Changed("kubeadm upgrade node on %s", strings.Join(ran, ", ")), nil
}

func (j *Job) etcd(ctx context.Context) (phase.Outcome, error) {
	return j.swap(ctx, "etcd", etcdComponents, nil)
}

func (j *Job) controlPlane(ctx context.Context) (phase.Outcome, error) {
	return j.swap(ctx, "control-plane", controlPlane, nil)
}

func (j *Job) addons(ctx context.Context) (phase.Outcome, error) {
	return j.swap(ctx, "addons", addonComponents, nil)
}

func (j *Job) kubectl(ctx context.Context) (phase.Outcome, error) {
	return j.swap(ctx, "kubectl", []string{"kubectl"}, nil)
}

// kubelets swaps each node's kubelet in turn, the node drained around
// it; the node it cordoned is in the journal until it is uncordoned. A
// node whose kubelet is already the step's end (a resumed upgrade) is
// left alone, unless the journal says this upgrade cordoned it.
func (j *Job) kubelets(ctx context.Context) (phase.Outcome, error) {
	if err := j.needJournal(); err != nil {
		return phase.Done, err
	}
	cs, err := j.client()
	if err != nil {
		return phase.Done, err
	}
	var changed []string
	for _, k := range j.Swap.Kubelets {
		done, err := j.kubeletDone(ctx, cs, k)
		if err != nil {
			return phase.Done, err
		}
		if done && j.journal.Cordoned != k.Node {
			continue
		}
		node := progress.StepOf(ctx) + "/" + k.Node
		j.journal.Cordoned = k.Node
		if err := j.journal.write(j.c.Files.Dir); err != nil {
			return phase.Done, err
		}
		stays := fmt.Sprintf("it stays cordoned: `devk upgrade%s` again resumes, `kubectl uncordon %s` gives it back", j.c.NameFlag(), k.Node)
		if err := j.step(ctx, node+"/drain", func(ctx context.Context) (phase.Outcome, error) {
			return drain.Node(ctx, cs, k.Node, "devk up"+j.c.NameFlag(), j.Reporter)
		}); err != nil {
			return phase.Done, fmt.Errorf("node %s: %w (%s)", k.Node, err, stays)
		}
		if _, err := j.swap(progress.WithStep(ctx, node), "kubelets/"+k.Node, []string{"kubelet"}, []swap.KubeletNode{k}); err != nil {
			return phase.Done, fmt.Errorf("node %s: %w (%s)", k.Node, err, stays)
		}
		if err := j.step(ctx, node+"/uncordon", func(ctx context.Context) (phase.Outcome, error) {
			return drain.Uncordon(ctx, cs, k.Node)
		}); err != nil {
			return phase.Done, err
		}
		j.journal.Cordoned = ""
		if err := j.journal.write(j.c.Files.Dir); err != nil {
			return phase.Done, err
		}
		changed = append(changed, k.Node)
	}
	if len(changed) == 0 {
		return phase.Unchanged("%d kubelets already run it", len(j.Swap.Kubelets)), nil
	}
	return phase.Changed("%d of %d nodes drained, their kubelet swapped, uncordoned (%s)", len(changed), len(j.Swap.Kubelets), strings.Join(changed, ", ")), nil
}

// step runs f as a step of its own (a node's drain or uncordon inside
// the kubelets phase), reported as the engine reports a phase.
func (j *Job) step(ctx context.Context, name string, f func(context.Context) (phase.Outcome, error)) error {
	j.Reporter.Start(name)
	t0 := time.Now()
	out, err := f(progress.WithStep(ctx, name))
	if err != nil {
		j.Reporter.Fail(name, time.Since(t0), err)
		return err
	}
	j.Reporter.Done(name, time.Since(t0), out.Detail)
	return nil
}

// needJournal says what to run when a step that records its progress in
// the journal runs without one (its phase skipped, or run alone first).
func (j *Job) needJournal() error {
	if j.journal == nil || j.journal.Tree != j.tree.Root {
		return fmt.Errorf("no journal of an upgrade of cluster %s to this tree: run the whole `devk upgrade --tree %s%s` (its preflight and journal phases first)", j.c.Config.Name, j.tree.Root, j.c.NameFlag())
	}
	if j.Report.To == "" { // preflight did not run: a phase run alone
		j.Report.To = j.journal.To
	}
	return nil
}

// kubeletDone says node k's kubelet is the step's end already: the
// tree's binary (its bytes), or on a rollback the version it ran before.
func (j *Job) kubeletDone(ctx context.Context, cs kubernetes.Interface, k swap.KubeletNode) (bool, error) {
	if j.Rollback {
		n, err := cs.CoreV1().Nodes().Get(ctx, k.Node, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("read node %s: %w", k.Node, err)
		}
		for _, f := range j.journal.From {
			if f.Component == skew.Kubelet && f.Node == k.Node {
				return n.Status.NodeInfo.KubeletVersion == f.Version, nil
			}
		}
		return false, nil
	}
	st, err := build.LoadState(j.tree.Root)
	if err != nil {
		return false, err
	}
	c := st.Component("kubelet")
	if c == nil || c.Binary == nil {
		return false, nil
	}
	sum, err := build.FileSHA256(k.Binary)
	if err != nil {
		return false, nil // none installed: the swap says so
	}
	return sum == c.Binary.SHA256, nil
}

// verify reads the versions again and checks each against the upgrade's
// end: the tree's version, or on a rollback what ran before (and the
// images it ran).
func (j *Job) verify(ctx context.Context) (phase.Outcome, error) {
	if err := j.needJournal(); err != nil {
		return phase.Done, err
	}
	now, err := j.runningSettled(ctx)
	if err != nil {
		return phase.Done, err
	}
	j.Report.Versions = now
	var bad []string
	want := func(r skew.Running) string {
		if !j.Rollback {
			return j.Report.To
		}
		for _, f := range j.journal.From {
			if f.Component == r.Component && f.Node == r.Node {
				return f.Version
			}
		}
		return ""
	}
	for _, r := range now {
		if w := want(r); w != "" && r.Version != w {
			bad = append(bad, fmt.Sprintf("%s (want %s)", r, w))
		}
	}
	checked := len(now)
	if j.Rollback {
		imgs, err := j.images(ctx)
		if err != nil {
			return phase.Done, err
		}
		for k, w := range j.journal.FromImages {
			if got, ok := imgs[k]; ok && got != w {
				bad = append(bad, fmt.Sprintf("%s runs %s (want %s)", k, got, w))
			}
			checked++
		}
	}
	if len(bad) > 0 {
		return phase.Done, fmt.Errorf("after the steps, not everything runs what it should:\n  %s\n(devk upgrade%s again resumes; devk status shows the versions)", strings.Join(bad, "\n  "), j.c.NameFlag())
	}
	if j.Rollback {
		j.journal.RolledBack = true
	} else {
		j.journal.Done = true
	}
	if err := j.journal.write(j.c.Files.Dir); err != nil {
		return phase.Done, err
	}
	if v := versionOf(now, skew.APIServer); v != j.c.Config.KubeVersion {
		j.c.Config.KubeVersion = v
		if err := j.c.SaveConfig(); err != nil {
			return phase.Done, err
		}
	}
	return phase.Changed("%d versions and images checked: %s", checked, versionsOf(now)), nil
}

// versionOf is the version the first of component in rs runs.
func versionOf(rs []skew.Running, component string) string {
	for _, r := range rs {
		if r.Component == component {
			return r.Version
		}
	}
	return ""
}

// plan fills the report's plan: each step's components and nodes with
// their versions now and after, and the images once built.
func (j *Job) plan(ctx context.Context) error {
	st, err := build.LoadState(j.tree.Root)
	if err != nil {
		return err
	}
	now, err := j.images(ctx)
	if err != nil {
		return err
	}
	image := func(component string) string {
		if c := st.Component(component); c != nil && c.Pushed != nil {
			return c.Pushed.Ref
		}
		return ""
	}
	from := func(component, node string) string {
		for _, r := range j.Report.From {
			if r.Component == component && (node == "" || r.Node == node) {
				return r.Version
			}
		}
		return ""
	}
	to := j.Report.To
	var plan []PlanStep
	add := func(step, component, built, node, imageKey string) {
		ps := PlanStep{Step: step, Component: component, Node: node, From: from(component, node), To: to, FromImage: now[imageKey], Image: image(built)}
		if j.Rollback {
			ps.From, ps.To, ps.Image = to, ps.From, j.journal.FromImages[imageKey]
			if imageKey == "" {
				ps.Image = "" // a binary: its .prev
			}
		}
		if ps.From == "" { // etcd, CoreDNS: no version of the skew policy's
			ps.To = ""
		}
		plan = append(plan, ps)
	}
	// On a cluster kubeadm bootstraps, its upgrade apply moves etcd, the
	// first node's control plane and the addons, its upgrade node the
	// other control planes.
	stepOf := func(step, node string) string {
		if !j.kubeadm() {
			return step
		}
		if node == "" || node == j.c.FirstNode().Name() {
			return "kubeadm-apply"
		}
		return "kubeadm-node"
	}
	for _, n := range j.c.Config.ControlPlaneNames() {
		add(stepOf("etcd", n), "etcd", "etcd", n, n+"/etcd")
	}
	for _, n := range j.c.Config.ControlPlaneNames() {
		add(stepOf("control-plane", n), skew.APIServer, "apiserver", n, n+"/"+skew.APIServer)
		add(stepOf("control-plane", n), skew.ControllerManager, "controller-manager", n, n+"/"+skew.ControllerManager)
		add(stepOf("control-plane", n), skew.Scheduler, "scheduler", n, n+"/"+skew.Scheduler)
	}
	add(stepOf("addons", ""), skew.KubeProxy, "kube-proxy", "", "kube-proxy")
	add(stepOf("addons", ""), "coredns", "coredns", "", "coredns")
	for _, k := range j.Swap.Kubelets {
		add("kubelets", skew.Kubelet, "kubelet", k.Node, "")
	}
	add("kubectl", skew.Kubectl, "kubectl", "", "")
	if j.Rollback {
		slices.Reverse(plan)
	}
	j.Report.Plan = plan
	return nil
}
