// Package trace is `devk trace`: everything one command makes a devk
// cluster do, as one timeline. It joins streams devk already reads: the
// API server's audit log (each request: who, what, the answer, a
// write's body), etcd's history from a revision on (each write, decoded
// and diffed by etcdwatch), each node's iptables rules read inside its
// network namespace and its CRI runtime's sandboxes and containers, and
// the Events of the window. Requests and etcd writes are joined by
// object and resourceVersion, not by time alone. It changes nothing.
package trace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/output"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// Agent is the User-Agent of devk trace's own API requests (the Events
// it lists), which it leaves out of the timeline.
const Agent = "devk-trace"

// Options are `devk trace`.
type Options struct {
	// Name names the devk cluster; Home is devk's home (layout.HomeDir's).
	Name, Home string
	// Command is run (with Stdin, its output to CommandOut) and traced;
	// with Follow there is none.
	Command    []string
	Stdin      io.Reader
	CommandOut io.Writer
	// Follow streams what happens to Live until ctx ends.
	Follow bool
	Live   io.Writer
	// Format is Live's: text, or a JSON or YAML document per item.
	Format output.Format
	// Settle and For: the trace ends once nothing happened for Settle
	// after the command's exit, or For after it.
	Settle, For time.Duration
	// Reads lists read requests (get, list, watch) instead of counting them.
	Reads bool
	// Filter keeps the requests, etcd writes and events that match.
	Filter Filter
	// NoNodes and NoEtcd leave the nodes' rules and runtimes, and etcd,
	// out.
	NoNodes, NoEtcd bool
	// Source, when set, is what to read instead of the devk cluster's
	// (tests).
	Source *Source
	// Reporter receives progress.
	Reporter progress.Reporter
}

// Source is what a trace reads.
type Source struct {
	// AuditLogs are the API servers' audit logs (one per control-plane node).
	AuditLogs []string
	// Nodes are the nodes whose rules and runtimes to read.
	Nodes []Node
	// Etcd is the cluster's etcd.
	Etcd etcdwatch.ConnOptions
	// Kubeconfig reads the Events ("" leaves them out).
	Kubeconfig string
}

// Validate checks what can be checked before reading the cluster.
func (o Options) Validate() error {
	switch {
	case o.Follow && len(o.Command) > 0:
		return fmt.Errorf("--follow traces no command: give --follow or a command after --, not both")
	case !o.Follow && len(o.Command) == 0:
		return fmt.Errorf("give the command to trace after --, e.g. `devk trace -- kubectl create -f svc.yaml`, or --follow to watch the cluster")
	case o.Settle <= 0:
		return fmt.Errorf("--settle %s: give a positive duration such as 2s", o.Settle)
	case o.For < o.Settle:
		return fmt.Errorf("--for %s is shorter than --settle %s: the trace could never settle", o.For, o.Settle)
	case o.Follow && o.Live == nil:
		return fmt.Errorf("--follow: no output writer")
	}
	return nil
}

// Result is one trace: the command's window, oldest first.
type Result struct {
	Command []string `json:"command,omitempty"`
	// ExitCode is the command's (devk exits with it).
	ExitCode int       `json:"exitCode"`
	Start    time.Time `json:"start"`
	// Exit is when the command ended, End when the trace did.
	Exit time.Time `json:"exit"`
	End  time.Time `json:"end"`
	// Settled is false when the cluster was still busy after --for.
	Settled bool `json:"settled"`
	// Requests are the API requests (reads only with --reads).
	Requests []Request `json:"requests"`
	// Reads counts the read requests by verb (all of them, listed or not).
	Reads map[string]int `json:"reads,omitempty"`
	// Etcd are the writes to etcd (leases and masterleases left out).
	Etcd []EtcdWrite `json:"etcd"`
	// Nodes are what changed on each node.
	Nodes []NodeTrace `json:"nodes"`
	// Events are the Events created or updated in the window.
	Events []Event `json:"events"`
	// Notes say what could not be read.
	Notes []string `json:"notes,omitempty"`
}

// job is a trace's state, shared by its phases.
type job struct {
	o   Options
	src Source
	log progress.Reporter

	tails []*Tail
	etcd  *etcdwatch.Client
	// etcdDone is closed when the etcd watch ends; etcdErr says why.
	etcdDone chan struct{}
	etcdErr  error
	stopEtcd context.CancelFunc

	nodeIPs  map[string]bool
	runtimes map[string]*cri.Client
	cmdStart time.Time
	before   map[string]nodeState
	last     map[string]nodeState

	mu           sync.Mutex
	requests     []Request
	writes       []EtcdWrite
	lastActivity time.Time
	// open is the follow-up work seen to start and not yet finish.
	open followUps
	// badLines counts the audit log's lines that are no audit event.
	badLines int

	res Result
}

// Phases are devk trace's.
func Phases() []*phase.Phase[*job] {
	nodes := func(j *job) (bool, string) {
		if j.o.NoNodes {
			return false, "--no-nodes"
		}
		return true, ""
	}
	return []*phase.Phase[*job]{
		{Name: "preflight", Short: "find the cluster's audit logs, etcd and nodes; refuse a cluster without an audit log",
			Run: phase.Method((*job).preflight)},
		{Name: "record", Short: "start reading the audit logs at their ends and etcd's history at its revision",
			Needs: []string{"preflight"}, Run: phase.Method((*job).record)},
		{Name: "nodes-before", Short: "read each node's iptables rules (inside its network namespace) and its runtime's containers",
			Needs: []string{"preflight"}, If: nodes, Run: phase.Method((*job).nodesBefore)},
		{Name: "command", Short: "run the command, or with --follow print what happens until Ctrl-C",
			Needs: []string{"record"}, Run: phase.Method((*job).command)},
		{Name: "settle", Short: "follow until the cluster is quiet for --settle (at most --for)", Needs: []string{"command"},
			If: func(j *job) (bool, string) {
				if j.o.Follow {
					return false, "--follow"
				}
				return true, ""
			}, Run: phase.Method((*job).settle)},
		{Name: "collect", Short: "diff the nodes, list the window's Events, join requests and etcd writes", Needs: []string{"record"},
			If: func(j *job) (bool, string) {
				if j.o.Follow {
					return false, "--follow"
				}
				return true, ""
			}, Run: phase.Method((*job).collect)},
	}
}

// Run traces the command (or follows the cluster) and returns the
// trace. A command that fails still gives its trace, with its exit code;
// --follow returns nothing when ctx ends.
func Run(ctx context.Context, o Options, popts phase.Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	j := &job{o: o, log: o.Reporter, etcdDone: make(chan struct{}), open: followUps{}}
	if j.log == nil {
		j.log = progress.Discard()
	}
	defer j.close()
	if _, err := phase.Run(ctx, Phases(), j, popts); err != nil {
		if o.Follow && ctx.Err() != nil && j.tails != nil {
			return nil, nil // --follow runs until Ctrl-C
		}
		return nil, err
	}
	if popts.DryRun {
		return nil, nil
	}
	return &j.res, nil
}

func (j *job) close() {
	for _, t := range j.tails {
		t.Close()
	}
	for _, rt := range j.runtimes {
		rt.Close()
	}
	if j.stopEtcd != nil {
		j.stopEtcd()
		<-j.etcdDone
	}
	if j.etcd != nil {
		j.etcd.Close()
	}
}

// masterLeases are the keys the API servers' endpoint reconciler renews
// every 10 s (its own TTL keys, no API resource): like leases, they
// would keep a trace from ever settling.
const masterLeases = "masterleases"

// ErrNoAudit says the cluster's API server writes no audit log.
var ErrNoAudit = errors.New("no audit log")

func (j *job) preflight(context.Context) (phase.Outcome, error) {
	if j.o.Source != nil {
		j.src = *j.o.Source
	} else {
		src, err := ClusterSource(j.o.Home, j.o.Name)
		if err != nil {
			return phase.Done, err
		}
		j.src = src
	}
	for _, p := range j.src.AuditLogs {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return phase.Done, fmt.Errorf("%w at %s: the API server has not written one; a cluster made before devk turned audit on gets it from the next `devk up`%s (only the API server restarts)", ErrNoAudit, p, nameFlag(j.o.Name))
		} else if err != nil {
			return phase.Done, err
		}
	}
	j.nodeIPs = map[string]bool{}
	for _, n := range j.src.Nodes {
		j.nodeIPs[n.IP] = true
	}
	return phase.Unchanged("%d audit logs, %d nodes", len(j.src.AuditLogs), len(j.src.Nodes)), nil
}

func nameFlag(name string) string {
	if name == "" || name == layout.DefaultName {
		return ""
	}
	return " --name " + name
}

// ClusterSource is what a trace of the devk cluster name reads: each
// control-plane node's audit log, every node's namespace and runtime,
// its etcd and admin kubeconfig.
func ClusterSource(home, name string) (Source, error) {
	cfg, files, err := layout.Open(home, name)
	if err != nil {
		return Source{}, err
	}
	if !cfg.Spec.Audit.On() {
		return Source{}, fmt.Errorf("%w: cluster %s's config file turns it off (audit.enabled: false); remove that line and run `devk up --config FILE`%s, which restarts only the API server", ErrNoAudit, cfg.Name, nameFlag(name))
	}
	src := Source{
		Etcd:       etcdwatch.ConnOptions{Cluster: cfg.Name, ClusterSet: true, Home: home},
		Kubeconfig: files.FirstNode().Kubeconfig("admin"),
	}
	for _, n := range cfg.Network.Nodes {
		nf, err := files.Node(cfg, n.Name)
		if err != nil {
			return Source{}, err
		}
		if n.IsControlPlane() {
			src.AuditLogs = append(src.AuditLogs, nf.AuditLog())
		}
		src.Nodes = append(src.Nodes, Node{Name: n.Name, NetNS: n.NetNSPath(), CRISocket: cfg.NodeCRISocket(n, nf), IP: n.IP})
	}
	return src, nil
}

func (j *job) record(ctx context.Context) (phase.Outcome, error) {
	for _, p := range j.src.AuditLogs {
		t, err := OpenTail(p, false)
		if err != nil {
			return phase.Done, fmt.Errorf("open the audit log: %w", err)
		}
		j.tails = append(j.tails, t)
	}
	j.res.Start = time.Now()
	if j.o.NoEtcd {
		close(j.etcdDone)
		return phase.Unchanged("%d audit logs, etcd left out (--no-etcd)", len(j.tails)), nil
	}
	cli, err := etcdwatch.Connect(ctx, j.src.Etcd)
	if err != nil {
		close(j.etcdDone)
		return phase.Done, fmt.Errorf("%w (--no-etcd traces without it)", err)
	}
	j.etcd = cli
	wctx, cancel := context.WithCancel(ctx)
	j.stopEtcd = cancel
	go func() {
		defer close(j.etcdDone)
		j.etcdErr = etcdwatch.Follow(wctx, cli, cli.Revision, etcdwatch.DecodeOptions{Ignore: bodyIgnore}, etcdwatch.DefaultExclude, func(c etcdwatch.Change) error {
			if c.Group == "" && c.Resource == masterLeases {
				return nil
			}
			now := time.Now()
			w := etcdWrite(c, now)
			j.mu.Lock()
			j.writes = append(j.writes, w)
			j.open.observe(c)
			if !heartbeat(w) {
				j.lastActivity = now
			}
			j.mu.Unlock()
			return nil
		})
	}()
	return phase.Unchanged("%d audit logs from their ends, etcd from revision %d", len(j.tails), cli.Revision), nil
}

func (j *job) nodesBefore(ctx context.Context) (phase.Outcome, error) {
	j.before, j.last, j.runtimes = map[string]nodeState{}, map[string]nodeState{}, map[string]*cri.Client{}
	rules := 0
	for _, n := range j.src.Nodes {
		if n.CRISocket != "" {
			rt, err := cri.Dial(n.CRISocket)
			if err != nil {
				return phase.Done, fmt.Errorf("node %s: %w (--no-nodes traces without the nodes)", n.Name, err)
			}
			j.runtimes[n.Name] = rt
		}
		s, err := snapshot(ctx, n, j.runtimes[n.Name])
		if err != nil {
			return phase.Done, fmt.Errorf("%w (--no-nodes traces without the nodes)", err)
		}
		j.before[n.Name], j.last[n.Name] = s, s
		for _, t := range s.rules {
			for _, lines := range t {
				rules += len(lines)
			}
		}
	}
	return phase.Unchanged("%d nodes, %d rules", len(j.src.Nodes), rules), nil
}

// pollAudit reads the lines the API servers wrote since the last poll.
func (j *job) pollAudit() error {
	var got []Request
	bad := 0
	for _, t := range j.tails {
		lines, err := t.Lines()
		for _, l := range lines {
			r, ok, perr := ParseAuditLine(l)
			if perr != nil {
				bad++
				continue
			}
			if !ok || strings.HasPrefix(r.UserAgent, Agent) {
				continue
			}
			got = append(got, r)
		}
		if err != nil {
			return err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.badLines += bad
	for _, r := range got {
		if !r.Read() && r.resource != "leases" && (j.o.NoEtcd || !heartbeatRequest(r)) {
			j.lastActivity = time.Now()
		}
	}
	j.requests = append(j.requests, got...)
	return nil
}

// pollNodes reads every node again; a change of rules or containers is
// activity. It returns what changed since the last poll, per node.
func (j *job) pollNodes(ctx context.Context) map[string]NodeTrace {
	if j.o.NoNodes {
		return nil
	}
	out := map[string]NodeTrace{}
	for _, n := range j.src.Nodes {
		s, err := snapshot(ctx, n, j.runtimes[n.Name])
		if err != nil {
			continue // the final read reports it
		}
		prev := j.last[n.Name]
		nt := NodeTrace{IPTables: RulesDiff{Added: []Rule{}, Removed: []Rule{}}}
		if s.rulesSum != prev.rulesSum {
			nt.IPTables = DiffRules(prev.rules, s.rules)
		}
		nt.Containers = diffPods(prev.pods, s.pods)
		if !nt.IPTables.Empty() || len(nt.Containers) > 0 {
			nt.Node = n.Name
			out[n.Name] = nt
			j.mu.Lock()
			j.lastActivity = time.Now()
			j.mu.Unlock()
		}
		j.last[n.Name] = s
	}
	return out
}

func (j *job) command(ctx context.Context) (phase.Outcome, error) {
	if j.o.Follow {
		return phase.Done, j.follow(ctx)
	}
	c := exec.CommandContext(ctx, j.o.Command[0], j.o.Command[1:]...)
	c.Stdin, c.Stdout, c.Stderr = j.o.Stdin, j.o.CommandOut, j.o.CommandOut
	j.res.Command = j.o.Command
	start := time.Now()
	j.cmdStart = start
	if err := c.Start(); err != nil {
		return phase.Done, fmt.Errorf("run %s: %w", j.o.Command[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			j.res.Exit = time.Now()
			j.res.ExitCode = 0
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				j.res.ExitCode = ee.ExitCode()
			case err != nil:
				return phase.Done, fmt.Errorf("run %s: %w", j.o.Command[0], err)
			}
			return phase.Changed("exit %d after %s", j.res.ExitCode, progress.Round(j.res.Exit.Sub(start))), nil
		case <-tick.C:
			if err := j.pollAudit(); err != nil {
				return phase.Done, err
			}
		}
	}
}

func (j *job) settle(ctx context.Context) (phase.Outcome, error) {
	var state settleState
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		select {
		case <-j.etcdDone:
			if j.etcdErr != nil {
				return false, j.etcdErr
			}
		default:
		}
		if err := j.pollAudit(); err != nil {
			return false, err
		}
		j.pollNodes(ctx)
		j.mu.Lock()
		last, pending := j.lastActivity, len(j.open) > 0
		j.mu.Unlock()
		state = settled(j.res.Exit, last, time.Now(), pending, j.o.Settle, j.o.For)
		return state != waiting, nil
	})
	switch {
	case err != nil:
		return phase.Done, err
	case state == timedOut:
		busy := "still busy"
		j.mu.Lock()
		if open := j.open.String(); open != "" {
			busy += " (waiting for " + open + ")"
		}
		j.mu.Unlock()
		j.res.Notes = append(j.res.Notes, fmt.Sprintf("the cluster was %s %s after the command (--for): the trace stops there", busy, j.o.For))
		return phase.Unchanged("still busy after --for %s", j.o.For), nil
	}
	j.res.Settled = true
	return phase.Unchanged("quiet for %s after %s", j.o.Settle, progress.Round(time.Since(j.res.Exit))), nil
}

func (j *job) collect(ctx context.Context) (phase.Outcome, error) {
	j.res.End = time.Now()
	if j.stopEtcd != nil {
		j.stopEtcd()
		<-j.etcdDone
		j.stopEtcd = nil
	}
	if !j.o.NoNodes {
		for _, n := range j.src.Nodes {
			nt := NodeTrace{Node: n.Name, IPTables: RulesDiff{Added: []Rule{}, Removed: []Rule{}}, Containers: []PodChange{}}
			s, err := snapshot(ctx, n, j.runtimes[n.Name])
			if err != nil {
				nt.Error = err.Error()
				s = j.last[n.Name]
			}
			b := j.before[n.Name]
			nt.IPTables = DiffRules(b.rules, s.rules)
			nt.Containers = diffPods(b.pods, s.pods)
			j.res.Nodes = append(j.res.Nodes, nt)
		}
	}
	if j.res.Nodes == nil {
		j.res.Nodes = []NodeTrace{}
	}
	events, err := listEvents(ctx, j.src.Kubeconfig, j.res.Start)
	if err != nil {
		j.res.Notes = append(j.res.Notes, fmt.Sprintf("the Events could not be listed: %v", err))
	}
	j.mu.Lock()
	reqs, writes, bad := j.requests, j.writes, j.badLines
	j.mu.Unlock()
	if bad > 0 {
		j.res.Notes = append(j.res.Notes, fmt.Sprintf("%d lines of the audit logs were no audit.k8s.io/v1 event (is --audit-log-format json?) and are left out", bad))
	}
	j.res.Requests, j.res.Reads, j.res.Etcd = assemble(reqs, writes, j.o, j.cmdStart, j.res.Exit, j.nodeIPs)
	j.res.Events = []Event{}
	for _, e := range events {
		if j.o.Filter.namespace(e.Namespace) && j.o.Filter.resource(e.group, e.resource) && len(j.o.Filter.UserAgents) == 0 {
			j.res.Events = append(j.res.Events, e)
		}
	}
	return phase.Unchanged("%d requests, %d etcd writes, %d events", len(j.res.Requests), len(j.res.Etcd), len(j.res.Events)), nil
}

// componentUsers are the prefixes of the users the cluster's own
// components authenticate as. On an HA cluster their requests reach an
// API server through HAProxy on this machine, so the source address
// alone does not tell them from the command's.
var componentUsers = []string{"system:node:", "system:serviceaccount:", "system:kube-", "system:apiserver", "system:bootstrap:"}

func component(user string) bool {
	for _, p := range componentUsers {
		if strings.HasPrefix(user, p) {
			return true
		}
	}
	return false
}

// assemble joins requests and etcd writes and keeps what the options
// ask for: write requests (reads too with Reads, counted either way),
// each marked when the command made it (received while it ran, from
// this machine rather than a node, as a user that is no component of
// the cluster), the etcd writes, filtered.
func assemble(reqs []Request, writes []EtcdWrite, o Options, start, exit time.Time, nodeIPs map[string]bool) ([]Request, map[string]int, []EtcdWrite) {
	slices.SortStableFunc(reqs, func(a, b Request) int { return a.Time.Compare(b.Time) })
	join(reqs, writes)
	outR := []Request{}
	var reads map[string]int
	for _, r := range reqs {
		r.FromCommand = !exit.IsZero() && !r.Time.Before(start) && !r.Time.After(exit) && !nodeIPs[r.sourceIP] && !component(r.User)
		if r.Read() {
			if reads == nil {
				reads = map[string]int{}
			}
			reads[r.Verb]++
			if !o.Reads {
				continue
			}
		}
		if o.Filter.Request(r) {
			outR = append(outR, r)
		}
	}
	outW := []EtcdWrite{}
	for _, w := range writes {
		if o.Filter.resource(w.Group, w.Resource) && o.Filter.namespace(w.Namespace) && o.Filter.agent(w.userAgent) {
			outW = append(outW, w)
		}
	}
	return outR, reads, outW
}
