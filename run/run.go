// Package run is `devk run`: a control-plane component taken out of its
// static pod, and the tree's binary run in its place in the foreground,
// inside the node's network and mount namespaces, with the manifest's
// command line, environment and files; then the pod put back. The pod's
// hand-over, journal and put-back are swap's (swap.Manifest.BeginRun,
// Target.TakeOut, Target.PutBack): a run is a swap whose new image is a
// process, and the commands that resume swaps resume runs.
package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/build"
	"github.com/devk/devk/debug"
	"github.com/devk/devk/internal/delve"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
	"github.com/devk/devk/srcpath"
	"github.com/devk/devk/swap"
)

// JobName names the job for failpoints: "run/<phase>" is hit before
// each phase in test builds.
const JobName = "run"

// Options say what to run where.
type Options struct {
	// Component is what to run: apiserver, controller-manager or
	// scheduler (or its binary's name, as devk swap takes them).
	Component string
	// TreeDir is the tree whose binary runs (its state.json names it);
	// empty: the one around the working directory.
	TreeDir string
	// GoRun compiles the tree's main package with a plain `go build`, as
	// `go run` does, instead of running what `devk build` made.
	GoRun bool
	// Debug runs the component's debug build (`devk build --debug`, made
	// first: -N -l where the tree changed, and Delve) under the headless
	// debugger, listening at DebugAddress:DebugPort (the node's address
	// on devk's bridge; the port debug.Ports'); StopAtStart leaves it
	// waiting before main for a client to continue it.
	Debug        bool
	StopAtStart  bool
	DebugAddress string
	DebugPort    int
	// HA says the component runs on several control-plane nodes: under
	// the debugger the controllers keep leader election (debug's
	// PausableArgv).
	HA bool

	// Node is the node whose static pod the process replaces; NodeName
	// its kubelet's node name (empty: found from its runtime).
	Node     layout.Node
	NodeName string
	// Enter is argv run inside the node: in its network and mount
	// namespaces (cluster.Node.Enter); nil runs argv as it is.
	Enter func(argv ...string) []string
	// HostIP is this machine's address on devk's bridge, which the IDE
	// launch configuration binds instead of the node's address.
	HostIP string
	// Relist restarts the node's kubelet when the put-back pod's mirror
	// pod lags (swap.Options.Relist); nil: wait for it.
	Relist func(ctx context.Context) error
	// Command is the swap command for this node, for messages that say
	// what to run next.
	Command string
	// Timeout bounds the wait for the pod to run healthy again; zero
	// means swap.DefaultTimeout.
	Timeout time.Duration

	// Stdout and Stderr receive the process's output; Info the command
	// line and environment printed before it starts.
	Stdout, Stderr, Info io.Writer
	Reporter             progress.Reporter
}

// Result is what a run did.
type Result struct {
	Component string `json:"component"`
	Node      string `json:"node"`
	// Command is the process's command line as devk ran it (inside the
	// node), Binary the tree's binary it runs.
	Command []string `json:"command"`
	Binary  string   `json:"binary"`
	// Env is its whole environment; Dir its working directory.
	Env []string `json:"env"`
	Dir string   `json:"dir"`
	// LaunchJSON is the VS Code launch configuration written for it.
	LaunchJSON string `json:"launchJSON"`
	// Debugger is how to attach to it under the debugger (--debug).
	Debugger *debug.Attach `json:"debugger,omitempty"`
	// Exit is how the process ended (nil: it did not run).
	Exit *Exit         `json:"exit,omitempty"`
	Ran  time.Duration `json:"ran"`
	// Resumed are the interrupted swaps and runs finished first.
	Resumed []*swap.Result `json:"resumed,omitempty"`
	// PutBack is the static pod put back and verified.
	PutBack *swap.Result `json:"putBack,omitempty"`
}

// stage is how far the run got: what Close must put back.
type stage int

const (
	stageNone  stage = iota // nothing changed
	stageBegun              // the pending backup and journal are written
	stageOut                // the manifest may be out of the manifests dir
	stageDone               // put back (or never taken out): the journal is gone
)

// Job is one run: what it was asked, what its phases found, and the
// node they act on. Phases run on it; Close ends it.
type Job struct {
	Options
	Result *Result

	comp build.Component
	tree *source.Tree
	// build is --debug's build of the component and Delve (made in any
	// case, for plans); dlv the debugger it made.
	build *build.Job
	dlv   string
	m     swap.Manifest
	ctr   *corev1.Container
	spec  Spec
	grace time.Duration
	stage stage

	target      *swap.Target
	closeTarget func()
	lock        *nodelock.Lock

	// mu guards running, interrupted and stop: a Ctrl-C while the
	// process runs stops the process (and the put-back follows); at any
	// other time it stops the job (and Close puts the pod back).
	mu          sync.Mutex
	running     bool
	interrupted bool
	stop        chan struct{}
	// userCtx is Run's context, which a Ctrl-C cancels (the phases' is
	// canceled only when no process runs).
	userCtx context.Context
}

// Components are what devk run takes: the control plane's static pods
// built from the tree.
func Components() []build.Component {
	var out []build.Component
	for _, c := range build.Catalog {
		if c.StaticPod && !c.External {
			out = append(out, c)
		}
	}
	return out
}

// Names are the Components' names.
func Names() []string {
	var out []string
	for _, c := range Components() {
		out = append(out, c.Name)
	}
	return out
}

// Lookup is the component name names, if devk run takes it.
func Lookup(name string) (build.Component, error) {
	c, err := build.Lookup(name)
	if err == nil {
		for _, r := range Components() {
			if r.Name == c.Name {
				return c, nil
			}
		}
		err = fmt.Errorf("%s is not a static pod built from the tree", c.Name)
	}
	return build.Component{}, fmt.Errorf("devk run takes %s: %w", strings.Join(Names(), ", "), err)
}

// NewJob checks o and opens the tree; it touches nothing.
func NewJob(o Options) (*Job, error) {
	c, err := Lookup(o.Component)
	if err != nil {
		return nil, err
	}
	if o.Node.ManifestsDir == "" {
		return nil, errors.New("no node to run in: run `devk up` first")
	}
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	if o.Timeout == 0 {
		o.Timeout = swap.DefaultTimeout
	}
	for _, w := range []*io.Writer{&o.Stdout, &o.Stderr, &o.Info} {
		if *w == nil {
			*w = io.Discard
		}
	}
	if o.Debug && o.GoRun {
		return nil, errors.New("--go-run compiles with a plain go build, --debug with devk's debug build (-N -l where you changed the tree, and Delve): pick one")
	}
	if o.StopAtStart && !o.Debug {
		return nil, errors.New("--stop-at-start waits for a debugger client: it needs --debug")
	}
	if o.Debug && o.DebugAddress == "" {
		return nil, errors.New("no address for the debugger to listen on: pass --address, the node's IP")
	}
	if o.Debug && o.DebugPort == 0 {
		o.DebugPort = debug.Ports[c.Name]
	}
	tree, err := source.Open(o.TreeDir)
	if err != nil {
		return nil, err
	}
	j := &Job{Options: o, comp: c, tree: tree, m: swap.ManifestFor(o.Node.ManifestsDir, c.Binary), stop: make(chan struct{})}
	// Made also without --debug, for the plan of its skipped phases.
	bo := build.Options{TreeDir: tree.Root, Components: []string{c.Name, build.Delve}, Debug: true, DebugChanged: true, Reporter: o.Reporter}
	if j.build, err = build.NewJob(bo); err != nil {
		return nil, err
	}
	j.Result = &Result{Component: c.Name, Node: o.NodeName, LaunchJSON: LaunchPath(tree.OutputDir())}
	return j, nil
}

// Run runs the component as o says: Phases on a new Job, then Close.
// A Ctrl-C while the process runs stops it, and the run then puts the
// pod back as when the process ends by itself: the run succeeds. popts
// select phases, ask for a plan, and report.
func Run(ctx context.Context, o Options, popts phase.Options) (*Result, error) {
	j, err := NewJob(o)
	if err != nil {
		return nil, err
	}
	if popts.Reporter == nil {
		popts.Reporter = j.Reporter
	}
	popts.Job = JobName
	// The phases run on a context the first Ctrl-C cancels only when no
	// process runs (the values, interrupt.Cleanup's among them, are
	// ctx's).
	pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	j.userCtx = ctx
	go func() {
		select {
		case <-ctx.Done():
			j.interrupt(func() { cancel(context.Cause(ctx)) })
		case <-pctx.Done():
		}
	}()
	_, err = phase.Run(pctx, Phases(), j, popts)
	err = j.Close(pctx, err)
	if e := j.Result.Exit; err == nil && e != nil && !e.Stopped && e.Code != 0 {
		err = fmt.Errorf("%s ended with %s", j.comp.Binary, e)
		if j.Result.PutBack != nil {
			err = fmt.Errorf("%w; its static pod is back", err)
		}
	}
	return j.Result, err
}

// interrupt is the first Ctrl-C: it stops the process if one runs, else
// the job (cancel).
func (j *Job) interrupt(cancel func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.interrupted = true
	if j.running {
		close(j.stop)
		return
	}
	cancel()
}

// Close ends the job: a pod the run took out (or began to) is put back
// (PutBack, which a first Ctrl-C does not stop), then the connection
// and the node lock are released. It returns err, with what the
// put-back did.
func (j *Job) Close(ctx context.Context, err error) error {
	if j.stage == stageBegun || j.stage == stageOut {
		err = errors.Join(err, j.putBackNow(ctx))
	}
	if j.closeTarget != nil {
		j.closeTarget()
		j.closeTarget, j.target = nil, nil
	}
	if j.lock != nil {
		j.lock.Release()
		j.lock = nil
	}
	return err
}

// argv is the command line the process runs with: the Spec's (under
// the debugger with --debug), inside the node.
func (j *Job) argv() []string {
	argv := j.spec.Argv
	if j.Debug {
		argv = append(slices.Clone(diesWithDevk), j.debugged().Command(argv)...)
	}
	if j.Enter == nil {
		return argv
	}
	return j.Enter(argv...)
}

// diesWithDevk runs the debugger as the first process of a PID
// namespace of its own (with its own /proc, which Delve reads), killed
// when unshare dies, which dies with devk (start's parent-death signal):
// so the component Delve started goes too. Delve starts it in a process
// group of its own and a killed Delve leaves it running.
var diesWithDevk = []string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"}

// debugged is how --debug runs the binary under the debugger.
func (j *Job) debugged() delve.Debugged {
	return delve.Debugged{Debugger: j.dlv, Listen: net.JoinHostPort(j.DebugAddress, strconv.Itoa(j.DebugPort)), StopAtStart: j.StopAtStart}
}

// lockNode takes the node's lock, once, for the whole run: no swap, up
// or other run changes the node while its pod is out.
func (j *Job) lockNode() (err error) {
	if j.lock == nil {
		j.lock, err = nodelock.Acquire(j.Node.ManifestsDir, nodelock.Command())
	}
	return err
}

// connect locks the node and connects to its API server and runtime,
// once.
func (j *Job) connect(ctx context.Context) (*swap.Target, error) {
	if j.target != nil {
		return j.target, nil
	}
	if err := j.lockNode(); err != nil {
		return nil, err
	}
	t, closeTarget, err := swap.Connect(ctx, j.Node, j.NodeName)
	if err != nil {
		return nil, err
	}
	t.Reporter, t.Timeout, t.Command, t.Relist = j.Reporter, j.Timeout, j.Command, j.Relist
	j.target, j.closeTarget = t, closeTarget
	j.Result.Node = t.NodeName
	return t, nil
}

// resume finishes the node's interrupted swaps and puts back the pods
// of interrupted runs, first.
func (j *Job) resume(ctx context.Context) (phase.Outcome, error) {
	if err := j.lockNode(); err != nil {
		return phase.Done, err
	}
	res, err := swap.ResumeAll(ctx, j.Node.ManifestsDir, j.connect, nil)
	j.Result.Resumed = append(j.Result.Resumed, res...)
	if err != nil {
		return phase.Done, err
	}
	if len(res) == 0 {
		return phase.Unchanged("nothing was interrupted"), nil
	}
	var pods []string
	for _, r := range res {
		pods = append(pods, r.Pod)
	}
	return phase.Changed("finished %s", strings.Join(pods, ", ")), nil
}

// goRunBinary is where --go-run's build puts the binary.
func (j *Job) goRunBinary() string {
	return filepath.Join(j.tree.OutputDir(), launchDir, j.comp.Binary)
}

// compile builds the component's main package as `go run` would: a
// plain go build of the tree's package, into the run dir.
func (j *Job) compile(ctx context.Context) (phase.Outcome, error) {
	cmd := execx.Cmd{Name: "go", Args: []string{"build", "-o", j.goRunBinary(), j.comp.Package}, Dir: j.tree.Root}
	if err := execx.Run(ctx, cmd); err != nil {
		return phase.Done, err
	}
	return phase.Changed("built %s", j.goRunBinary()), nil
}

// binary is the tree's binary of the component: the --go-run build's,
// else the last `devk build`'s (--debug: `devk build --debug`'s); and
// with --debug the dlv that build made.
func (j *Job) binary() (bin, dlv string, err error) {
	if j.GoRun {
		return j.goRunBinary(), "", nil
	}
	st, err := build.LoadState(j.tree.Root)
	if err != nil {
		return "", "", err
	}
	if bin, err = builtBinary(st, j.tree.Root, j.comp.Name, j.Debug); err != nil || !j.Debug {
		return bin, "", err
	}
	dlv, err = builtBinary(st, j.tree.Root, build.Delve, false)
	return bin, dlv, err
}

// builtBinary is the binary of component name state.json records (the
// debug build's with debug), checked to be this machine's and present.
func builtBinary(st *build.StateFile, root, name string, debug bool) (string, error) {
	how := "devk build " + name
	if debug {
		how = "devk build --debug " + name
	}
	b := st.Component(name).BinaryOf(debug)
	if b == nil {
		return "", fmt.Errorf("no %s built in %s yet: run `%s`, or pass --go-run", name, root, how)
	}
	if here := runtime.GOOS + "/" + runtime.GOARCH; b.Platform != "" && b.Platform != here {
		return "", fmt.Errorf("the last %s built in %s is for %s, not this machine's %s: run `%s`", name, root, b.Platform, here, how)
	}
	if _, err := os.Stat(b.Path); err != nil {
		return "", fmt.Errorf("%s's binary is gone (%w): run `%s`", name, err, how)
	}
	return b.Path, nil
}

// commandLine makes the process's Spec from the manifest (prepare) and
// prints it.
func (j *Job) commandLine(context.Context) (phase.Outcome, error) {
	if err := j.prepare(); err != nil {
		return phase.Done, err
	}
	printSpec(j.Info, j.comp.Binary, j.argv(), j.spec)
	return phase.Unchanged("%s with %d flags from %s", filepath.Base(j.Result.Binary), len(j.spec.Argv)-1, j.m.Path), nil
}

// prepare reads the manifest and makes the process's Spec, once: every
// phase after command relies on it, also when it runs alone (`devk run
// phase run`).
func (j *Job) prepare() error {
	if j.ctr != nil {
		return nil
	}
	pod, _, err := j.m.Read()
	if err != nil {
		return err
	}
	bin, dlv, err := j.binary()
	if err != nil {
		return err
	}
	spec, err := Command(pod, j.comp, bin)
	if err != nil {
		return err
	}
	if j.Debug {
		spec.Argv, j.dlv = debug.PausableArgv(spec.Argv, j.comp.Name, j.HA), dlv
	}
	ctr, err := staticpod.Container(pod, j.comp.Binary)
	if err != nil {
		return err
	}
	j.spec, j.ctr = spec, ctr
	j.grace = time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		j.grace = time.Duration(*g) * time.Second
	}
	j.Result.Command, j.Result.Binary, j.Result.Env, j.Result.Dir = j.argv(), bin, j.spec.Env, j.spec.Dir
	if j.Result.Env == nil {
		j.Result.Env = []string{}
	}
	return nil
}

// printSpec prints the command line, one argument a line, and the
// environment, as a shell would take them.
func printSpec(w io.Writer, binary string, argv []string, s Spec) {
	fmt.Fprintf(w, "%s runs (in %s):\n", binary, s.Dir)
	for i, a := range argv {
		sep := " \\"
		if i == len(argv)-1 {
			sep = ""
		}
		indent := "    "
		if i == 0 {
			indent = "  "
		}
		fmt.Fprintf(w, "%s%s%s\n", indent, execx.Cmd{Name: a}.String(), sep)
	}
	if len(s.Env) == 0 {
		fmt.Fprintln(w, "with an empty environment (the manifest sets none)")
		return
	}
	fmt.Fprintln(w, "with only the manifest's environment:")
	for _, e := range s.Env {
		fmt.Fprintf(w, "  %s\n", execx.Cmd{Name: e}.String())
	}
}

// launchConfig writes the IDE launch configuration of the same run and,
// with --debug, how to attach to it (debug.WriteAttach).
func (j *Job) launchConfig(ctx context.Context) (phase.Outcome, error) {
	if err := j.prepare(); err != nil {
		return phase.Done, err
	}
	cfg := launch(j.comp.Name, filepath.Join(j.tree.Root, j.comp.Package), j.HostIP, j.spec)
	if err := writeLaunch(j.Result.LaunchJSON, cfg); err != nil {
		return phase.Done, err
	}
	fmt.Fprintf(j.Info, "the same from an IDE on this machine: %q in %s\n", cfg.Name, j.Result.LaunchJSON)
	if !j.Debug {
		return phase.Changed("%q in %s", cfg.Name, j.Result.LaunchJSON), nil
	}
	srcmap, err := srcpath.New(ctx, j.tree)
	if err != nil {
		return phase.Done, err
	}
	a, err := debug.WriteAttach(j.tree.Root, srcmap, j.Result.Binary, launchName(j.comp.Name), j.DebugAddress, j.DebugPort)
	if err != nil {
		return phase.Done, err
	}
	j.Result.Debugger = a
	wait := "runs on at once"
	if j.StopAtStart {
		wait = "waits before main until a client continues it"
	}
	fmt.Fprintf(j.Info, "under Delve at %s (%s): %s\n", a.Address, wait, a.Connect)
	return phase.Changed("%q in %s; attach with %s", cfg.Name, j.Result.LaunchJSON, a.Connect), nil
}

// backup keeps the manifest as the pending backup and writes the run's
// journal.
func (j *Job) backup(ctx context.Context) (phase.Outcome, error) {
	if err := j.prepare(); err != nil {
		return phase.Done, err
	}
	if _, err := j.connect(ctx); err != nil {
		return phase.Done, err
	}
	if _, err := j.m.BeginRun(j.ctr.Name, j.argv()); err != nil {
		return phase.Done, err
	}
	j.stage = stageBegun
	return phase.Changed("kept %s", j.m.PendingPath()), nil
}

// takeOut moves the manifest out and waits for the kubelet to let go
// of the pod.
func (j *Job) takeOut(ctx context.Context) (phase.Outcome, error) {
	if err := j.prepare(); err != nil {
		return phase.Done, err
	}
	t, err := j.connect(ctx)
	if err != nil {
		return phase.Done, err
	}
	j.stage = stageOut
	t0 := time.Now()
	if err := t.TakeOut(ctx, j.comp.Binary, j.ctr); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%s is out in %s", j.comp.Binary, progress.Round(time.Since(t0))), nil
}

// runProcess runs the process in the node until it ends or a Ctrl-C
// stops it.
func (j *Job) runProcess(ctx context.Context) (phase.Outcome, error) {
	if err := j.prepare(); err != nil {
		return phase.Done, err
	}
	j.mu.Lock()
	if j.interrupted || (j.userCtx != nil && j.userCtx.Err() != nil) {
		j.mu.Unlock()
		return phase.Done, fmt.Errorf("interrupted before %s started", j.comp.Binary)
	}
	p, err := start(j.argv(), j.spec.Env, j.spec.Dir, j.Stdout, j.Stderr)
	if err == nil && j.Debug {
		p.stopSignal = syscall.SIGTERM // headless dlv ends on it and kills its program
	}
	if err != nil {
		j.mu.Unlock()
		return phase.Done, err
	}
	j.running = true
	j.mu.Unlock()
	t0 := time.Now()
	if err := j.m.RecordRun(p.id); err != nil {
		j.Reporter.Infof("record the process in the journal: %v (if devk is killed, the process goes with it all the same)", err)
	}
	failpoint.Hit("run/started")
	exit := p.wait(ctx, j.stop, j.grace)
	j.mu.Lock()
	j.running = false
	j.mu.Unlock()
	j.Result.Exit, j.Result.Ran = &exit, time.Since(t0)
	how := "ended by itself"
	if exit.Stopped {
		how = "stopped"
	}
	return phase.Changed("%s %s after %s: %s", j.comp.Binary, how, progress.Round(j.Result.Ran), exit), nil
}

// putBack puts the manifest back and waits until the pod runs healthy
// and passes a swap's checks.
func (j *Job) putBack(ctx context.Context) (phase.Outcome, error) {
	if err := j.putBackNow(ctx); err != nil {
		return phase.Done, err
	}
	r := j.Result.PutBack
	return phase.Changed("%s runs %s again, %d checks passed", r.Pod, r.NewImage, len(r.Checks)), nil
}

// putBackNow ends the run on the node, however far it got.
func (j *Job) putBackNow(ctx context.Context) error {
	jr, err := j.m.InProgress()
	if err != nil {
		return err
	}
	if jr == nil || jr.Run == nil {
		j.stage = stageDone
		return nil
	}
	t, err := j.connect(ctx)
	if err != nil {
		return fmt.Errorf("%w; %s is not put back: `%s` puts it back", err, j.comp.Binary, j.swapCommand())
	}
	res, err := t.PutBack(ctx, j.comp.Binary, jr)
	j.Result.PutBack = res
	if err == nil {
		j.stage = stageDone
	}
	return err
}

func (j *Job) swapCommand() string {
	if j.Command == "" {
		return "devk swap"
	}
	return j.Command
}
