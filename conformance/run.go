package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/addon"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
)

// Options say which specs to run against which cluster.
type Options struct {
	// Home is devk's home ("" means $DEVK_HOME, else ~/.devk); Name is
	// the cluster.
	Home, Name string
	// TreeDir is the tree e2e.test was built in ("" means the one around
	// the working directory).
	TreeDir string
	// Focus and Skip are ginkgo's regular expressions on the specs' full
	// text; Conformance keeps the specs labelled Conformance.
	Focus, Skip string
	Conformance bool
	// Parallel is how many ginkgo processes run specs; 1 runs e2e.test
	// directly.
	Parallel int
	// DryRun lists the specs that would run and runs none.
	DryRun bool
	// KeepSuite uses e2e.test and ginkgo as they are built, building them
	// only when missing: devk watch, whose saves change the components,
	// not the specs, and would otherwise relink e2e.test every cycle.
	KeepSuite bool
	// SuiteSkew runs an e2e.test one minor version older than the API
	// server, as upstream's version-skew jobs run the older release's
	// suite against an upgraded cluster.
	SuiteSkew bool

	Reporter progress.Reporter
	// Log, when set, also receives the suite's output as it happens.
	Log io.Writer
}

// MaxParallel bounds --parallel: each process is a whole e2e.test.
const MaxParallel = 32

// ConformanceLabel is the ginkgo label of the [Conformance] specs.
const ConformanceLabel = "Conformance"

// SuiteTimeout is ginkgo's whole-suite timeout: the full conformance
// suite on two cores takes more than ginkgo's default hour.
const SuiteTimeout = 24 * time.Hour

// AddonReadyWait bounds preflight's wait for the addons to be rolled out
// and ready (CoreDNS is unready for a few seconds after an API server
// restart); addonPollInterval is how often it looks.
const (
	AddonReadyWait    = time.Minute
	addonPollInterval = 500 * time.Millisecond
)

// Validate checks the options before anything runs.
func (o Options) Validate() error {
	if o.Parallel < 1 || o.Parallel > MaxParallel {
		return fmt.Errorf("--parallel %d: give 1 (e2e.test alone) to %d ginkgo processes", o.Parallel, MaxParallel)
	}
	for _, f := range [][2]string{{"--focus", o.Focus}, {"--skip", o.Skip}} {
		if _, err := regexp.Compile(f[1]); err != nil {
			return fmt.Errorf("%s %q is not a regular expression ginkgo takes: %w", f[0], f[1], err)
		}
	}
	return nil
}

// ErrFailed is the error of a run in which a spec failed.
var ErrFailed = errors.New("e2e specs failed")

// Result is what a run did.
type Result struct {
	Cluster string `json:"cluster"`
	// Version is the cluster's and e2e.test's.
	Version string `json:"version"`
	Nodes   int    `json:"nodes"`
	// Dir holds the run's log, JUnit and ginkgo reports.
	Dir   string `json:"dir,omitempty"`
	Log   string `json:"log,omitempty"`
	JUnit string `json:"junit,omitempty"`
	// Selected are the specs the filters chose (with --dry-run, their
	// names are Specs).
	Selected int      `json:"selected"`
	Specs    []string `json:"specs,omitempty"`
	Seconds  float64  `json:"seconds,omitempty"`
	Summary  *Summary `json:"summary,omitempty"`
	// Excluded are selected specs devk left out of the run (NodeNeeds),
	// by reason; the summary counts them as skipped.
	Excluded []SkipGroup `json:"excluded,omitempty"`
	// Interrupted says the run was stopped (Ctrl-C): Summary then has
	// the specs that finished before it.
	Interrupted bool `json:"interrupted,omitempty"`
}

// ToRun is how many of the selected specs run: all but the excluded.
func (r *Result) ToRun() int {
	n := r.Selected
	for _, g := range r.Excluded {
		n -= len(g.Specs)
	}
	return n
}

// Job is the state of a run's phases.
type Job struct {
	Options
	Result Result

	tree       *source.Tree
	home       string
	paths      layout.ClusterFiles
	cfg        layout.Config
	kubeconfig string
	e2eTest    string
	ginkgo     string
	repoList   string
	t0         time.Time
}

// Phases are a run: preflight, plan, repo-list, pin-images, run, report.
func Phases() []*phase.Phase[*Job] {
	notDry := func(j *Job) (bool, string) { return !j.DryRun, "--dry-run" }
	return []*phase.Phase[*Job]{
		{Name: "preflight", Short: "the cluster, its addons and node count; e2e.test and ginkgo built when missing or stale (as `devk build e2e`), of the cluster's version", Run: preflight},
		{Name: "plan", Short: "ginkgo dry run: the specs --focus, --skip and --conformance select", Run: plan},
		{Name: "repo-list", Short: "the run's directory and KUBE_TEST_REPO_LIST: every registry of the framework is the cluster's", If: notDry, Run: writeRepoList},
		{Name: "pin-images", Short: "test images the registry lacks built and pushed (as `devk e2e images`); every one it holds is one devk pushed, and each node holds it by that digest (pulled through CRI)", If: notDry, Run: pinImages},
		{Name: "run", Short: "run the specs (e2e.test, or ginkgo with --parallel), one line per finished spec", If: notDry, Run: runSuite},
		{Name: "report", Short: "read ginkgo's JSON report: passed, failed, skipped and why, slowest", If: notDry, Run: report},
	}
}

// Run runs the phases and returns what they found; with failed specs the
// error is ErrFailed and the result is complete. An interrupted run
// returns its error with the result of the specs that finished, when
// ginkgo wrote its report.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	j := &Job{Options: o, t0: time.Now()}
	_, err := phase.Run(ctx, Phases(), j, phase.Options{Reporter: o.Reporter, Job: "e2e"})
	if err != nil && !errors.Is(err, ErrFailed) && j.Result.Summary == nil {
		return nil, err
	}
	return &j.Result, err
}

func preflight(ctx context.Context, j *Job) (phase.Outcome, error) {
	cfg, p, err := layout.Open(j.Home, j.Name)
	if err != nil {
		return phase.Done, err
	}
	if j.home, err = layout.HomeDir(j.Home); err != nil {
		return phase.Done, err
	}
	j.cfg, j.paths, j.kubeconfig = cfg, p, p.FirstNode().Kubeconfig("admin")
	j.Result.Cluster = cfg.Name
	if j.tree, err = source.Open(j.TreeDir); err != nil {
		return phase.Done, err
	}
	built, err := j.buildSuite(ctx)
	if err != nil {
		return phase.Done, err
	}
	cs, err := kube.Client(j.kubeconfig)
	if err != nil {
		return phase.Done, err
	}
	server, err := kube.ServerVersion(cs)
	if err != nil {
		return phase.Done, fmt.Errorf("cluster %s: the API server does not answer (%w): is it up? see `devk status --name %s`", cfg.Name, err, cfg.Name)
	}
	out, err := execx.Output(ctx, execx.Cmd{Name: j.e2eTest, Args: []string{"--version"}})
	if err != nil {
		return phase.Done, err
	}
	if err := suiteFits(lastLine(string(out)), server, j.SuiteSkew); err != nil {
		return phase.Done, err
	}
	j.Result.Version = server
	for _, w := range addon.Workloads {
		// An addon just restarted (CoreDNS after an API server swap, as
		// `devk watch` runs one right before) is given a moment.
		var why string
		err := wait.PollUntilContextTimeout(ctx, addonPollInterval, AddonReadyWait, true, func(ctx context.Context) (bool, error) {
			st, err := addon.Get(ctx, cs, w)
			if err != nil {
				return false, err
			}
			if st == nil {
				return false, fmt.Errorf("cluster %s has no %s: the e2e specs need the cluster's DNS and Services; `devk up --name %s` installs both addons", cfg.Name, w, cfg.Name)
			}
			done, reason := st.RolledOut()
			why = reason
			return done, nil
		})
		if poll.TimedOut(ctx, err) {
			return phase.Done, fmt.Errorf("cluster %s: %s is not ready after %s (%s): see `devk status --name %s`", cfg.Name, w, AddonReadyWait, why, cfg.Name)
		}
		if err != nil {
			return phase.Done, err
		}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return phase.Done, fmt.Errorf("list the cluster's nodes: %w", err)
	}
	j.Result.Nodes = len(nodes.Items)
	return phase.ChangedIf(built != "", "cluster %s %s, %d node(s), addons ready%s", cfg.Name, server, j.Result.Nodes, built), nil
}

// buildSuite builds e2e.test and ginkgo in the tree when they are
// missing or older than the tree (incrementally, as `devk build e2e`:
// about 5 minutes the first time, seconds when nothing changed; with
// KeepSuite only when missing), and says what it built.
func (j *Job) buildSuite(ctx context.Context) (string, error) {
	if j.KeepSuite && j.builtSuite() {
		return "", nil
	}
	bj, err := build.Run(ctx, build.Options{TreeDir: j.tree.Root, Components: []string{build.E2E}, Reporter: progress.Under(j.Reporter, "build")}, phase.Options{})
	if err != nil {
		return "", fmt.Errorf("build e2e.test and ginkgo in %s: %w", j.tree.Root, err)
	}
	var changed []string
	for _, b := range bj.Binaries {
		switch b.Name {
		case build.E2E:
			j.e2eTest = b.Path
		case build.Ginkgo:
			j.ginkgo = b.Path
		}
		if b.Changed {
			changed = append(changed, filepath.Base(b.Path))
		}
	}
	if j.e2eTest == "" || j.ginkgo == "" {
		return "", fmt.Errorf("devk build e2e made %v, not e2e.test and ginkgo", bj.Binaries)
	}
	if len(changed) == 0 {
		return "", nil
	}
	return "; built " + strings.Join(changed, " and "), nil
}

// builtSuite says whether e2e.test and ginkgo are in the tree's bin
// directory, and takes them.
func (j *Job) builtSuite() bool {
	bin, err := build.BinDirFor(j.tree, runtime.GOOS+"/"+runtime.GOARCH, false)
	if err != nil {
		return false
	}
	var paths []string
	for _, name := range []string{build.E2E, build.Ginkgo} {
		c, _ := build.Lookup(name)
		p := filepath.Join(bin, c.File())
		if _, err := os.Stat(p); err != nil {
			return false
		}
		paths = append(paths, p)
	}
	j.e2eTest, j.ginkgo = paths[0], paths[1]
	return true
}

// suiteFits refuses an e2e.test of another version than the cluster:
// its specs test the behaviour of the version they were written for. A
// build of a tree with local changes (v1.34.4-dirty) counts as its
// commit's: the specs are the commit's, and testing a changed component
// with them is the point (devk watch --e2e-focus). With skew, a suite of
// the minor version before the server's is taken too (--suite-skew).
func suiteFits(suite, server string, skew bool) error {
	if strings.TrimSuffix(suite, source.DirtySuffix) == strings.TrimSuffix(server, source.DirtySuffix) {
		return nil
	}
	if skew {
		sv, err1 := version.ParseGeneric(suite)
		cv, err2 := version.ParseGeneric(server)
		if err1 == nil && err2 == nil && sv.Major() == cv.Major() && sv.Minor()+1 == cv.Minor() {
			return nil
		}
		return fmt.Errorf("e2e.test is %s and the cluster's API server is %s: --suite-skew takes a suite of the minor version before the server's, no other", suite, server)
	}
	return fmt.Errorf("e2e.test is %s and the cluster's API server is %s: build e2e in the tree the cluster runs (`devk build e2e`), or bring the cluster to that tree (`devk build all --push && devk swap`); --suite-skew runs a suite one minor older on purpose", suite, server)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// InterruptGrace is how long a cancelled run's processes have to clean
// up after SIGINT before they are killed.
const InterruptGrace = 30 * time.Second

// RunDirFormat names a run's directory under _output/devk/e2e.
const RunDirFormat = "20060102-150405"

func writeRepoList(_ context.Context, j *Job) (phase.Outcome, error) {
	data, err := RepoList(j.cfg.Registry)
	if err != nil {
		return phase.Done, err
	}
	j.Result.Dir = filepath.Join(j.tree.OutputDir(), "e2e", j.t0.UTC().Format(RunDirFormat))
	if err := os.MkdirAll(j.Result.Dir, 0o755); err != nil {
		return phase.Done, err
	}
	j.repoList = filepath.Join(j.Result.Dir, RepoListFile)
	if err := os.WriteFile(j.repoList, data, 0o644); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%s", j.repoList), nil
}

// NodeNeed is a spec that needs more nodes than a one-node cluster has
// and fails there, rather than skipping itself as the framework's
// SkipUnlessNodeCountIsAtLeast would.
type NodeNeed struct {
	// Spec is the spec's text, without its labels.
	Spec  string
	Nodes int
}

// NodeNeeds are the specs devk skips on a cluster with fewer nodes than
// they need, saying so in the summary.
var NodeNeeds = []NodeNeed{
	{Spec: "[sig-architecture] Conformance Tests should have at least two untainted nodes", Nodes: 2},
	{Spec: "[sig-apps] Daemon set [Serial] should rollback without unnecessary restarts", Nodes: 2},
}

// tooFewNodes says why a spec cannot pass on the cluster's nodes, or "".
func (j *Job) tooFewNodes(name string) string {
	for _, n := range NodeNeeds {
		if strings.HasPrefix(name, n.Spec) && j.Result.Nodes < n.Nodes {
			return fmt.Sprintf("needs %d nodes, the cluster has %d (devk skips it: it fails rather than skips itself)", n.Nodes, j.Result.Nodes)
		}
	}
	return ""
}

// exclude leaves a selected spec out of the run, for a reason the
// summary gives among the skipped.
func (j *Job) exclude(name, why string) {
	for i := range j.Result.Excluded {
		if j.Result.Excluded[i].Reason == why {
			j.Result.Excluded[i].Specs = append(j.Result.Excluded[i].Specs, name)
			return
		}
	}
	j.Result.Excluded = append(j.Result.Excluded, SkipGroup{Reason: why, Specs: []string{name}})
}

// ginkgoFilters are the selection flags, spelled for e2e.test (prefix
// "--ginkgo.") or the ginkgo CLI (prefix "--"): the user's, and one
// --skip (ginkgo ORs them) per spec devk excludes.
func (j *Job) ginkgoFilters(prefix string) []string {
	var out []string
	for _, g := range j.Result.Excluded {
		for _, name := range g.Specs {
			out = append(out, prefix+"skip="+regexp.QuoteMeta(name))
		}
	}
	if j.Focus != "" {
		out = append(out, prefix+"focus="+j.Focus)
	}
	if j.Skip != "" {
		out = append(out, prefix+"skip="+j.Skip)
	}
	if j.Conformance {
		out = append(out, prefix+"label-filter="+ConformanceLabel)
	}
	return out
}

// frameworkFlags are the e2e framework's: the cluster, and dir to write
// its reports in.
func (j *Job) frameworkFlags(dir string) []string {
	return []string{
		"--kubeconfig=" + j.kubeconfig,
		"--provider=local",
		fmt.Sprintf("--num-nodes=%d", j.Result.Nodes),
		"--kubectl-path=" + layout.HomeFiles(j.home).Kubectl(),
		"--report-dir=" + dir,
		"--e2e-output-dir=" + dir,
		"--disable-log-dump", // the local provider's log dump would ssh to nodes
	}
}

func (j *Job) env() []string { return []string{"KUBE_TEST_REPO_LIST=" + j.repoList} }

// plan counts (and with --dry-run names) the specs the filters select,
// from a ginkgo dry run in a directory of its own that it removes.
func plan(ctx context.Context, j *Job) (phase.Outcome, error) {
	dir, err := os.MkdirTemp("", "devk-e2e-plan-")
	if err != nil {
		return phase.Done, err
	}
	defer os.RemoveAll(dir)
	reportPath := filepath.Join(dir, "plan.json")
	args := append([]string{"--ginkgo.dry-run", "--ginkgo.no-color", "--ginkgo.json-report=" + reportPath}, j.ginkgoFilters("--ginkgo.")...)
	args = append(args, j.frameworkFlags(dir)...)
	if _, err := execx.Output(ctx, execx.Cmd{Name: j.e2eTest, Args: args, Dir: dir}); err != nil {
		return phase.Done, fmt.Errorf("list the specs: %w", err)
	}
	specs, err := ReadReport(reportPath)
	if err != nil {
		return phase.Done, err
	}
	for _, s := range specs {
		if s.State != "passed" { // a dry run "passes" every selected spec
			continue
		}
		j.Result.Selected++
		if why := j.tooFewNodes(s.Name); why != "" {
			j.exclude(s.Name, why)
			continue
		}
		if j.DryRun {
			j.Result.Specs = append(j.Result.Specs, s.Name)
		}
	}
	if j.Result.Selected == 0 {
		return phase.Done, fmt.Errorf("no spec of the %d in e2e.test matches %s: loosen the filters; --dry-run lists what they select", len(specs), describeFilters(j.Options))
	}
	if j.Result.ToRun() == 0 {
		return phase.Done, fmt.Errorf("the %d specs %s selects cannot run on cluster %s: %s", j.Result.Selected, describeFilters(j.Options), j.cfg.Name, j.Result.Excluded[0].Reason)
	}
	if n := j.Result.Selected - j.Result.ToRun(); n > 0 {
		return phase.Unchanged("%d of %d specs selected, %d of them left out (too few nodes)", j.Result.Selected, len(specs), n), nil
	}
	return phase.Unchanged("%d of %d specs selected", j.Result.Selected, len(specs)), nil
}

func describeFilters(o Options) string {
	var parts []string
	if o.Focus != "" {
		parts = append(parts, fmt.Sprintf("--focus %q", o.Focus))
	}
	if o.Skip != "" {
		parts = append(parts, fmt.Sprintf("--skip %q", o.Skip))
	}
	if o.Conformance {
		parts = append(parts, "--conformance")
	}
	if len(parts) == 0 {
		return "the filters"
	}
	return strings.Join(parts, " ")
}

// command is the run's command line: e2e.test alone, or ginkgo running
// it in Parallel processes.
func (j *Job) command() (string, []string) {
	timeout := "timeout=" + SuiteTimeout.String()
	if j.Parallel == 1 {
		args := []string{"--ginkgo.v", "--ginkgo.no-color", "--ginkgo." + timeout,
			"--ginkgo.json-report=" + filepath.Join(j.Result.Dir, "report.json"),
			"--ginkgo.junit-report=" + filepath.Join(j.Result.Dir, "junit.xml")}
		args = append(args, j.ginkgoFilters("--ginkgo.")...)
		return j.e2eTest, append(args, j.frameworkFlags(j.Result.Dir)...)
	}
	args := []string{fmt.Sprintf("--procs=%d", j.Parallel), "-v", "--no-color", "--" + timeout,
		"--output-dir=" + j.Result.Dir, "--json-report=report.json", "--junit-report=junit.xml"}
	args = append(args, j.ginkgoFilters("--")...)
	args = append(args, j.e2eTest, "--")
	return j.ginkgo, append(args, j.frameworkFlags(j.Result.Dir)...)
}

func runSuite(ctx context.Context, j *Job) (phase.Outcome, error) {
	j.Result.Log = filepath.Join(j.Result.Dir, "e2e.log")
	j.Result.JUnit = filepath.Join(j.Result.Dir, "junit.xml")
	logFile, err := os.Create(j.Result.Log)
	if err != nil {
		return phase.Done, err
	}
	defer logFile.Close()
	name, args := j.command()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), j.env()...)
	cmd.Dir = j.Result.Dir
	// ginkgo starts e2e.test processes of its own: run them all in a
	// process group, interrupt the group on cancel (ginkgo and e2e.test
	// then clean up their namespaces and write their reports), kill what
	// is left after InterruptGrace, and never leave one behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = InterruptGrace
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	fmt.Fprintf(logFile, "# %s\n", execx.Cmd{Name: name, Args: args, Env: j.env()})
	j.Reporter.Debugf("%s", execx.Cmd{Name: name, Args: args, Env: j.env()})
	if err := cmd.Start(); err != nil {
		return phase.Done, err
	}
	done := make(chan struct{})
	finished := 0
	go func() {
		defer close(done)
		var p StreamParser
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if j.Log != nil {
				fmt.Fprintln(j.Log, line)
			}
			if l, ok := p.Feed(line); ok {
				finished++
				j.Reporter.Infof("[%d/%d] %s", finished, j.Result.ToRun(), l)
			}
		}
		_, _ = io.Copy(logFile, pr) // a line longer than the buffer: keep the rest
	}()
	waitErr := cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever of the group outlived its leader
	pw.Close()
	<-done
	if ctx.Err() != nil {
		// ginkgo writes its report on SIGINT too: summarize the specs
		// that finished before the interrupt.
		j.Result.Interrupted = true
		if err := j.summarize(); err != nil {
			j.Reporter.Debugf("no summary after the interrupt: %v", err)
		}
		return phase.Done, ctx.Err()
	}
	if _, err := os.Stat(filepath.Join(j.Result.Dir, "report.json")); err != nil {
		return phase.Done, fmt.Errorf("%s ended (%v) without a report: see %s", filepath.Base(name), waitErr, j.Result.Log)
	}
	return phase.Changed("%d specs finished (log %s)", finished, j.Result.Log), nil
}

// summarize reads ginkgo's report into the result.
func (j *Job) summarize() error {
	specs, err := ReadReport(filepath.Join(j.Result.Dir, "report.json"))
	if err != nil {
		return err
	}
	s := Summarize(specs)
	for _, g := range j.Result.Excluded {
		s.NotSelected -= len(g.Specs) // ginkgo skipped them without a reason
		s.Skipped = append(s.Skipped, g)
	}
	j.Result.Summary = &s
	j.Result.Seconds = time.Since(j.t0).Seconds()
	return nil
}

func report(_ context.Context, j *Job) (phase.Outcome, error) {
	if err := j.summarize(); err != nil {
		return phase.Done, err
	}
	s := *j.Result.Summary
	detail := s.Counts()
	if len(s.Failed) > 0 {
		return phase.Done, fmt.Errorf("%w: %s (log %s)", ErrFailed, detail, j.Result.Log)
	}
	return phase.Unchanged("%s", detail), nil
}
