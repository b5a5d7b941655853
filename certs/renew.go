package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// Renewal timing: every default once, here.
const (
	// DefaultRestartTimeout bounds the wait for the restarted static pods
	// to run again and serve the renewed certificates.
	DefaultRestartTimeout = 3 * time.Minute
	renewPollInterval     = 250 * time.Millisecond
	// tlsDialTimeout bounds one look at a server's certificate.
	tlsDialTimeout = 3 * time.Second
)

// FailpointJob names renew's kill points in test builds:
// certs-renew/<phase>, and certs-renew/renew/<name> before each file.
// On several nodes each point acts on the first node that reaches it.
const FailpointJob = "certs-renew"

// AllNames is the argument that renews every certificate devk can.
const AllNames = "all"

// RenewNode is a control-plane node renew goes through: its name (the
// kubelet's: its static pods' mirror names end in it; an empty name on a
// node given by its directories is read from its runtime, any static pod
// named <pod>-…), its files and runtime, where its static pods are
// restarted, and behind a load balancer how to take its API server out
// and put it back (cluster.TakeOutAPIServer and PutBackAPIServer, as the
// rolling swap uses them). -o json writes it as JSONView says.
type RenewNode struct {
	layout.ControlPlaneNode
	// MergeAdmin, when set, puts the node's renewed admin.conf's
	// credentials where the user's kubectl finds them: a devk cluster's
	// first node's, as context devk-NAME in RenewOptions.UserKubeconfig,
	// merged as up merges it. Nil on every other node.
	MergeAdmin func(context.Context) (phase.Outcome, error)
}

// renewNodeJSON is a RenewNode in a result: its name and files, as
// check-expiration's report lists them, and its runtime.
type renewNodeJSON struct {
	NodeFiles
	CRISocket string `json:"criSocket"`
}

// JSONView is what MarshalJSON writes.
func (n RenewNode) JSONView() any {
	return renewNodeJSON{NodeFiles: nodeFiles(n.ControlPlaneNode), CRISocket: n.Node.CRISocket}
}

// MarshalJSON writes JSONView.
func (n RenewNode) MarshalJSON() ([]byte, error) { return json.Marshal(n.JSONView()) }

// files is where the node keeps the certificates and kubeconfigs.
func (n RenewNode) files() Files { return filesOf(n.Node) }

// RenewOptions say what renew renews, on which nodes.
type RenewOptions struct {
	// Nodes are renewed one at a time, in this order, each verified (and
	// put back into the load balancer) before the next one is touched.
	Nodes []RenewNode `json:"nodes"`
	// Names are kubeadm's names (apiserver, admin.conf, …) or AllNames.
	Names []string `json:"names"`
	// Validity is the renewed certificates' lifetime (pki.CertValidity).
	Validity time.Duration `json:"validity"`
	// Timeout bounds the wait for the restarted pods (DefaultRestartTimeout).
	Timeout time.Duration `json:"timeout"`
	// StopGrace, when set, is how long a restarted API server's or
	// etcd's container gets after SIGTERM on a node taken out of the load
	// balancer: an API server ends its connections gracefully (its HTTP/2
	// clients are told to go elsewhere), etcd hands its leadership on.
	// Zero: the containers go with their sandbox, at once.
	StopGrace      time.Duration    `json:"stopGrace,omitempty"`
	UserKubeconfig string           `json:"userKubeconfig,omitempty"`
	Now            func() time.Time `json:"-"`
}

// Renewed is one certificate renew replaced.
type Renewed struct {
	// Node is the node whose file it is.
	Node      string    `json:"node,omitempty"`
	Name      string    `json:"name"`
	Path      string    `json:"path"`
	OldSerial string    `json:"oldSerial"`
	Serial    string    `json:"serial"`
	NotAfter  time.Time `json:"notAfter"`
	// Verified says how the new certificate was seen in use.
	Verified string `json:"verified,omitempty"`

	cert    Cert
	renewed *x509.Certificate
}

// Restarted is a static pod renew restarted.
type Restarted struct {
	Node string `json:"node,omitempty"`
	Pod  string `json:"pod"`
}

// RenewJob is the state of one renewal: the phases run once per node,
// on the node in turn.
type RenewJob struct {
	RenewOptions
	// Renewed and Restarted are every node's, node by node, once the
	// node's renewal is verified.
	Renewed   []*Renewed  `json:"renewed"`
	Restarted []Restarted `json:"restarted"`
	// KubeconfigMerged says what MergeAdmin did with the renewed
	// admin.conf, when it ran.
	KubeconfigMerged string `json:"kubeconfigMerged,omitempty"`

	// node is the node the phases act on.
	node *nodeRenewal
}

// nodeRenewal is one node's part of a renewal.
type nodeRenewal struct {
	RenewNode
	// now, names, validity, timeout and stopGrace are the job's: a node
	// renewed after others signs from the time its turn comes.
	now       func() time.Time
	names     []string
	validity  time.Duration
	timeout   time.Duration
	stopGrace time.Duration

	selected []Cert
	// skipped are what "all" leaves out; absent, named certificates the
	// node does not have (an optional one: super-admin.conf on a node
	// that joined).
	skipped, absent []string
	renewed         []*Renewed
	restarted       []string
	rt              *cri.Client
	removed         map[string]bool // sandbox IDs removed
	// out says its API server was taken out of the load balancer and not
	// put back yet.
	out bool
}

// RenewPhases are `devk certs renew` on one node: select, renew,
// restart, verify, and on a devk cluster's first node kubeconfig-merge.
func RenewPhases() []*phase.Phase[*RenewJob] {
	node := func(j *RenewJob) *nodeRenewal { return j.node }
	return append(phase.Map(nodeRenewalPhases(), node), mergeAdminPhase())
}

// nodeRenewalPhases are the node's own phases of RenewPhases, on the
// node the job is at.
func nodeRenewalPhases() []*phase.Phase[*nodeRenewal] {
	needs := []string{"select"}
	return []*phase.Phase[*nodeRenewal]{
		{
			Name:  "select",
			Short: "read the node's certificates and kubeconfigs, check each named one can be renewed (its CA's key is here) and that the node's runtime runs the static pods that use them",
			IO: func(n *nodeRenewal) ([]string, []string) {
				return []string{n.Node.PKIDir, n.files().KubeconfigDir, n.Node.ManifestsDir, n.Node.CRISocket}, nil
			},
			Run: phase.Method((*nodeRenewal).sel),
		},
		{
			Name:  "renew",
			Short: "sign each anew from its CA (the node's copy of the shared CA): same subject, SANs, usages and key, new serial; each file written atomically after a copy (.devk-prev)",
			Needs: needs,
			IO: func(n *nodeRenewal) ([]string, []string) {
				var w []string
				for _, c := range n.selected {
					w = append(w, c.Path)
				}
				return []string{n.Node.PKIDir + " (CAs)"}, w
			},
			Run: phase.Method((*nodeRenewal).renew),
		},
		{
			Name:  "restart",
			Short: "behind a load balancer, take the node's API server out of it when its API server or etcd restarts (and stop those gracefully); remove the pod sandboxes of the static pods that use a renewed file, through CRI, so the kubelet recreates them from their unchanged manifests",
			Needs: needs,
			IO: func(n *nodeRenewal) ([]string, []string) {
				w := []string{n.Node.CRISocket + " (pod sandboxes of " + strings.Join(n.pods(), ", ") + ")"}
				if n.TakeOut != nil {
					w = append(w, "the load balancer's server "+n.Name+" (drained)")
				}
				return nil, w
			},
			Run: phase.Method((*nodeRenewal).restart),
		},
		{
			Name:  "verify",
			Short: "wait until the node's API server, etcd, controller-manager and scheduler present the new serials on their ports (each that has its serving certificate as a file), its API server's /readyz is ok and every renewed kubeconfig authenticates as its subject (behind a load balancer, the node's API server is put back once its phases are done, and the next node waits until the load balancer's checks pass on it)",
			Needs: needs,
			IO: func(*nodeRenewal) ([]string, []string) {
				return []string{"the TLS ports of the API server, etcd, the controller-manager and the scheduler", "SelfSubjectReview"}, nil
			},
			Run: phase.Method((*nodeRenewal).verify),
		},
	}
}

// mergeAdminPhase, RenewPhases' last, puts a devk cluster's first
// node's renewed admin credentials into the user's kubeconfig.
func mergeAdminPhase() *phase.Phase[*RenewJob] {
	return &phase.Phase[*RenewJob]{
		Name:  mergePhase,
		Short: "a devk cluster's first node's, when its admin.conf was renewed: put its new credentials into your kubeconfig's context devk-NAME, as devk up does",
		Needs: []string{"select", "renew"},
		If: func(j *RenewJob) (bool, string) {
			switch {
			case j.node.MergeAdmin == nil:
				return false, "no context of yours has this node's admin.conf (devk up merges a devk cluster's first node's)"
			case !slices.ContainsFunc(j.node.renewed, func(r *Renewed) bool { return r.Name == AdminConf }):
				return false, AdminConf + " was not renewed"
			}
			return true, ""
		},
		IO: func(j *RenewJob) ([]string, []string) {
			if j.node.MergeAdmin == nil {
				return nil, nil
			}
			return []string{filepath.Join(j.node.files().KubeconfigDir, AdminConf)}, []string{j.UserKubeconfig}
		},
		Run: phase.Method((*RenewJob).mergeAdmin),
	}
}

// Renew runs the pipeline on each node in turn. Every node's selection
// is checked before any node changes; a node whose API server is out of
// the load balancer (a renewal killed there) is put back first. On a
// failure after a node's files were replaced, that node's previous ones
// are put back (and its pods restarted again, its API server put back)
// before the error returns; the nodes before it keep their renewed and
// verified certificates, the nodes after it are not touched.
func Renew(ctx context.Context, o RenewOptions, popts phase.Options) (*RenewJob, error) {
	if o.Validity == 0 {
		o.Validity = pki.CertValidity
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultRestartTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	j := &RenewJob{RenewOptions: o}
	if len(o.Nodes) == 0 {
		return j, errors.New("no node to renew on")
	}
	plan, err := j.plan()
	if err != nil {
		return j, err
	}
	base := popts.Reporter
	if base == nil {
		base = progress.Discard()
	}
	for _, n := range plan {
		if len(n.selected) == 0 {
			base.Skip(n.Name, "has none of "+strings.Join(n.absent, ", "))
		}
	}
	if !popts.DryRun {
		for _, n := range o.Nodes {
			if err := n.EnsureIn(ctx); err != nil {
				return j, err
			}
		}
	}
	popts.Job = FailpointJob
	var done []string
	for i, n := range plan {
		if len(n.selected) == 0 {
			continue
		}
		pi := popts
		if len(o.Nodes) > 1 {
			pi.Reporter = progress.Under(base, n.Name)
			if popts.DryRun && popts.PlanOut != nil {
				fmt.Fprintf(popts.PlanOut, "node %s: ", n.Name)
			}
		}
		j.node = n
		_, err := phase.Run(ctx, RenewPhases(), j, pi)
		err = j.finishNode(ctx, err, popts.DryRun)
		if err != nil {
			return j, nodeError(n, err, done, plan[i+1:])
		}
		done = append(done, n.Name)
	}
	j.node = nil
	return j, nil
}

// nodeError says on which node a renewal failed, and what became of the
// others.
func nodeError(n *nodeRenewal, err error, done []string, after []*nodeRenewal) error {
	if n.Name == "" {
		return err
	}
	err = fmt.Errorf("node %s: %w", n.Name, err)
	if len(done) > 0 {
		err = fmt.Errorf("%w (renewed and in use already on %s)", err, strings.Join(done, ", "))
	}
	var rest []string
	for _, a := range after {
		if len(a.selected) > 0 {
			rest = append(rest, a.Name)
		}
	}
	if len(rest) > 0 {
		err = fmt.Errorf("%w (not renewed on %s: run the renewal again)", err, strings.Join(rest, ", "))
	}
	return err
}

// plan checks every node's selection from its files alone, before any
// node changes: a name no node can renew, a missing file or an external
// CA stops the renewal here. A node with none of the named
// certificates (an optional one it lacks) is left out; if every node
// is, that is an error.
func (j *RenewJob) plan() ([]*nodeRenewal, error) {
	var out []*nodeRenewal
	found := false
	for _, rn := range j.Nodes {
		n := &nodeRenewal{RenewNode: rn, now: j.Now, names: j.Names, validity: j.Validity, timeout: j.Timeout, stopGrace: j.StopGrace, removed: map[string]bool{}}
		if err := n.choose(); err != nil {
			if n.Name != "" {
				err = fmt.Errorf("node %s: %w", n.Name, err)
			}
			return nil, err
		}
		found = found || len(n.selected) > 0
		out = append(out, n)
	}
	if !found {
		where := "this node"
		if len(out) > 1 {
			var names []string
			for _, n := range out {
				names = append(names, n.Name)
			}
			where = "any of " + strings.Join(names, ", ")
		}
		var quoted []string
		for _, name := range j.Names {
			quoted = append(quoted, strconv.Quote(name))
		}
		return nil, fmt.Errorf("no certificate %s on %s: there is nothing to renew (check-expiration lists what each node has)", strings.Join(quoted, ", "), where)
	}
	return out, nil
}

// finishNode ends a node's renewal. On success it puts the node's API
// server back into the load balancer and waits until its checks pass,
// and records what the node renewed and restarted. On a failure after
// its files were replaced (but not in kubeconfig-merge, which runs once
// they are in use) it puts the previous files back and restarts the
// pods again; after any failure the API server is put back without
// waiting.
func (j *RenewJob) finishNode(ctx context.Context, err error, dryRun bool) error {
	n := j.node
	defer func() {
		if n.rt != nil {
			n.rt.Close()
			n.rt = nil
		}
	}()
	var failed *phase.Failed
	inMerge := errors.As(err, &failed) && failed.Path == mergePhase
	if err != nil && len(n.renewed) > 0 && !inMerge && !dryRun {
		err = n.rollback(err)
	}
	if n.out {
		if err != nil {
			// Interrupted or failed: put it back without waiting (the
			// load balancer's runtime API calls are bounded); its
			// checks decide whether it gets traffic.
			if perr := n.PutBack(context.WithoutCancel(ctx), false); perr != nil {
				err = fmt.Errorf("%w (putting its API server back into the load balancer also failed: %v; the next renewal puts it back)", err, perr)
			}
		} else if perr := n.PutBack(ctx, true); perr != nil {
			err = fmt.Errorf("the renewed certificates are in use and kept, but putting its API server back into the load balancer failed: %w", perr)
		}
		n.out = false
	}
	if err == nil && !dryRun {
		j.Renewed = append(j.Renewed, n.renewed...)
		for _, p := range n.restarted {
			j.Restarted = append(j.Restarted, Restarted{Node: n.Name, Pod: p})
		}
	}
	return err
}

const mergePhase = "kubeconfig-merge"

// AdminConf is the kubeconfig whose credentials a devk cluster merges
// into the user's kubeconfig.
const AdminConf = "admin.conf"

// mergeAdmin runs the node's MergeAdmin. The renewed files are in use
// by now, so a failure here keeps them and says how to merge again.
func (j *RenewJob) mergeAdmin(ctx context.Context) (phase.Outcome, error) {
	out, err := j.node.MergeAdmin(ctx)
	if err != nil {
		return phase.Done, fmt.Errorf("the renewed certificates are in use and kept, but your kubeconfig still has the old %s credentials: %w; fix that, then `devk up phase kubeconfig-merge`", AdminConf, err)
	}
	j.KubeconfigMerged = out.Detail
	return out, nil
}

func (n *nodeRenewal) pods() []string {
	var out []string
	for _, c := range n.selected {
		for _, p := range c.pods {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// choose reads the node's certificates and picks the named ones (or,
// for AllNames, every one devk can renew). It reads files only.
func (n *nodeRenewal) choose() error {
	r, err := Inspect(n.Node, n.now())
	if err != nil {
		return err
	}
	known := map[string]Cert{}
	var names []string
	for _, c := range r.Certs {
		known[c.Name] = c
		names = append(names, c.Name)
	}
	n.selected, n.skipped, n.absent = nil, nil, nil
	all := slices.Contains(n.names, AllNames)
	if all && len(n.names) > 1 {
		return fmt.Errorf("%q renews every certificate: name no others beside it", AllNames)
	}
	if all {
		for _, c := range r.Certs {
			if c.Missing || !c.Renewable {
				n.skipped = append(n.skipped, c.Name)
				continue
			}
			n.selected = append(n.selected, c)
		}
		if len(n.selected) == 0 {
			return fmt.Errorf("nothing devk can renew here (%s cannot be)", strings.Join(n.skipped, ", "))
		}
		return nil
	}
	for _, name := range n.names {
		c, ok := known[name]
		switch {
		case !ok && slices.Contains(Names(), name):
			// An optional certificate this node does not have.
			if !slices.Contains(n.absent, name) {
				n.absent = append(n.absent, name)
			}
			continue
		case !ok:
			return fmt.Errorf("no certificate %q: use one of %s, or %s", name, strings.Join(names, ", "), AllNames)
		case c.Missing:
			return fmt.Errorf("%s is missing (%s): there is nothing to renew", name, c.Path)
		case !c.Renewable:
			return fmt.Errorf("%s cannot be renewed here: %s", name, c.Why)
		}
		if !slices.ContainsFunc(n.selected, func(s Cert) bool { return s.Name == name }) {
			n.selected = append(n.selected, c)
		}
	}
	return nil
}

func (n *nodeRenewal) sel(ctx context.Context) (phase.Outcome, error) {
	if err := n.choose(); err != nil {
		return phase.Done, err
	}
	if len(n.selected) == 0 {
		return phase.Done, fmt.Errorf("the node has none of %s", strings.Join(n.absent, ", "))
	}
	// The pods must be running: renewing under a stopped node would leave
	// nothing to restart and nothing to verify.
	rt, err := n.runtime()
	if err != nil {
		return phase.Done, err
	}
	if _, err := rt.Version(ctx); err != nil {
		return phase.Done, fmt.Errorf("%w: renew needs the cluster running (devk up), to restart and verify what uses the certificates", err)
	}
	if n.Name == "" {
		// the kubelet's node name, from its static pods' sandboxes: a
		// pod is then found by its exact name, never another node's
		n.Name = digest.NodeName(ctx, rt, digest.StaticPodNames())
	}
	for _, p := range n.pods() {
		sbs, err := n.sandboxes(ctx, p)
		if err != nil {
			return phase.Done, err
		}
		if !slices.ContainsFunc(sbs, func(s cri.Sandbox) bool { return s.Ready }) {
			return phase.Done, fmt.Errorf("static pod %s does not run on %s: renew needs the cluster running (devk up), to restart and verify what uses the certificates", p, n.Node.CRISocket)
		}
	}
	var sel []string
	for _, c := range n.selected {
		sel = append(sel, c.Name)
	}
	detail := strings.Join(sel, ", ")
	if len(n.skipped) > 0 {
		detail += "; not " + strings.Join(n.skipped, ", ") + " (missing or under an external CA)"
	}
	if len(n.absent) > 0 {
		detail += "; the node has no " + strings.Join(n.absent, ", ")
	}
	return phase.Unchanged("%s", detail), nil
}

// runtime is the connection to the node's runtime, made once (select
// makes it; a phase run alone by --only makes it when it needs it).
func (n *nodeRenewal) runtime() (*cri.Client, error) {
	if n.rt == nil {
		rt, err := cri.Dial(n.Node.CRISocket)
		if err != nil {
			return nil, err
		}
		n.rt = rt
	}
	return n.rt, nil
}

// sandboxes are the static pod's sandboxes on the node's runtime.
func (n *nodeRenewal) sandboxes(ctx context.Context, pod string) ([]cri.Sandbox, error) {
	rt, err := n.runtime()
	if err != nil {
		return nil, err
	}
	all, err := rt.Sandboxes(ctx, metav1.NamespaceSystem)
	if err != nil {
		return nil, err
	}
	var out []cri.Sandbox
	for _, s := range all {
		if !s.Static {
			continue
		}
		if s.PodName == kube.MirrorPodName(pod, n.Name) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (n *nodeRenewal) renew(ctx context.Context) (phase.Outcome, error) {
	now := n.now()
	for _, c := range n.selected {
		if err := ctx.Err(); err != nil {
			return phase.Done, err
		}
		failpoint.Hit(FailpointJob + "/renew/" + c.Name)
		var old, renewed *x509.Certificate
		var err error
		if c.spec != "" {
			old, renewed, err = pki.Renew(n.Node.PKIDir, c.spec, c.caSpec, now, n.validity)
		} else {
			old, renewed, err = pki.RenewKubeconfig(n.Node.PKIDir, c.caSpec, c.Path, now, n.validity)
		}
		if err != nil {
			return phase.Done, fmt.Errorf("renew %s: %w", c.Name, err)
		}
		n.renewed = append(n.renewed, &Renewed{Node: n.Name, Name: c.Name, Path: c.Path, OldSerial: old.SerialNumber.Text(16),
			Serial: renewed.SerialNumber.Text(16), NotAfter: renewed.NotAfter, cert: c, renewed: renewed})
	}
	return phase.Changed("%d renewed, valid until %s", len(n.renewed), n.renewed[0].NotAfter.UTC().Format(time.RFC3339)), nil
}

// behindLB are the static pods whose restart takes a node's API server
// out of service: the API server itself, and the etcd member it uses
// (the node's own).
var behindLB = []string{"kube-apiserver", "etcd"}

// restart removes the sandboxes of every pod that uses a renewed file.
// Behind a load balancer, when the API server or its etcd restarts, the
// node's API server is taken out of the load balancer first, and those
// two stop gracefully (stopGrace) before their sandboxes go.
func (n *nodeRenewal) restart(ctx context.Context) (phase.Outcome, error) {
	n.restarted = nil
	pods := n.pods()
	var how string
	if n.TakeOut != nil && !n.out && slices.ContainsFunc(pods, func(p string) bool { return slices.Contains(behindLB, p) }) {
		if err := n.TakeOut(ctx); err != nil {
			return phase.Done, fmt.Errorf("take the API server out of the load balancer: %w", err)
		}
		n.out = true
		how = "; the API server out of the load balancer"
	}
	for _, p := range pods {
		if n.out && n.stopGrace > 0 && slices.Contains(behindLB, p) {
			if err := n.stopGracefully(ctx, p); err != nil {
				return phase.Done, fmt.Errorf("restart %s: %w", p, err)
			}
		}
		sbs, err := n.sandboxes(ctx, p)
		if err != nil {
			return phase.Done, err
		}
		for _, s := range sbs {
			if err := n.rt.RemoveSandbox(ctx, s.ID); err != nil {
				return phase.Done, fmt.Errorf("restart %s: %w", p, err)
			}
			n.removed[s.ID] = true
		}
		n.restarted = append(n.restarted, p)
	}
	if len(n.restarted) == 0 {
		return phase.Unchanged("no static pod uses a renewed file"), nil
	}
	return phase.Changed("%s%s", strings.Join(n.restarted, ", "), how), nil
}

// stopGracefully stops the pod's running containers with stopGrace.
func (n *nodeRenewal) stopGracefully(ctx context.Context, pod string) error {
	rt, err := n.runtime()
	if err != nil {
		return err
	}
	cts, err := rt.Containers(ctx, cri.Filter{PodName: kube.MirrorPodName(pod, n.Name), PodNamespace: metav1.NamespaceSystem, RunningOnly: true})
	if err != nil {
		return err
	}
	for _, ct := range cts {
		if err := rt.StopContainer(ctx, ct.ID, n.stopGrace); err != nil {
			return err
		}
	}
	return nil
}

// verify waits until each restarted pod runs in a new sandbox, the
// servers present the renewed certificates, and each renewed kubeconfig
// authenticates as its subject.
func (n *nodeRenewal) verify(ctx context.Context) (phase.Outcome, error) {
	checks := map[*Renewed]func(context.Context) (string, error){}
	for _, r := range n.renewed {
		if f := n.checkOf(r); f != nil {
			checks[r] = f
		}
	}
	lastErr := map[string]error{}
	t0 := time.Now()
	err := wait.PollUntilContextTimeout(ctx, renewPollInterval, n.timeout, true, func(ctx context.Context) (bool, error) {
		for _, p := range n.restarted {
			sbs, err := n.sandboxes(ctx, p)
			if err != nil {
				// The poll's own deadline may end a call; a runtime
				// that keeps failing is said when the wait ends.
				lastErr[p] = err
				return false, nil
			}
			if !slices.ContainsFunc(sbs, func(s cri.Sandbox) bool { return s.Ready && !n.removed[s.ID] }) {
				lastErr[p] = fmt.Errorf("static pod %s has no new sandbox yet", p)
				return false, nil
			}
			delete(lastErr, p)
		}
		done := true
		for r, check := range checks {
			how, err := check(ctx)
			if err != nil {
				lastErr[r.Name] = err
				done = false
				continue
			}
			r.Verified = how
			delete(lastErr, r.Name)
			delete(checks, r)
		}
		return done, nil
	})
	if poll.TimedOut(ctx, err) {
		var why []string
		for name, e := range lastErr {
			why = append(why, name+": "+e.Error())
		}
		slices.Sort(why)
		return phase.Done, fmt.Errorf("not in use after %s: %s", n.timeout, strings.Join(why, "; "))
	}
	if err != nil {
		return phase.Done, err
	}
	for _, r := range n.renewed {
		if r.Verified == "" {
			r.Verified = "used by " + strings.Join(r.cert.pods, ", ") + ", restarted and running"
			if len(r.cert.pods) == 0 {
				r.Verified = "written (no static pod names it)"
			}
		}
	}
	return phase.Unchanged("%d certificates in use, %d pods restarted in %s", len(n.renewed), len(n.restarted), time.Since(t0).Round(100*time.Millisecond)), nil
}

// checkOf is how r is seen in use, nil when only the restart shows it: a
// serving certificate by the serial its server presents, a kubeconfig by
// authenticating with it.
func (n *nodeRenewal) checkOf(r *Renewed) func(context.Context) (string, error) {
	if r.cert.spec == "" {
		return func(ctx context.Context) (string, error) {
			cs, err := kube.Client(r.Path)
			if err != nil {
				return "", err
			}
			rev, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			if got, want := rev.Status.UserInfo.Username, r.renewed.Subject.CommonName; got != want {
				return "", fmt.Errorf("authenticates as %q, want %q", got, want)
			}
			return "authenticates as " + r.renewed.Subject.CommonName, nil
		}
	}
	addr, err := n.servingAddr(r.cert)
	if err != nil || addr == "" {
		return nil
	}
	return func(ctx context.Context) (string, error) {
		serial, err := presentedSerial(ctx, addr)
		if err != nil {
			return "", err
		}
		if serial.Cmp(r.renewed.SerialNumber) != 0 {
			return "", fmt.Errorf("%s presents serial %s, not the renewed %s", addr, serial.Text(16), r.Serial)
		}
		if r.cert.spec == "apiserver" {
			// Healthy too: /readyz covers etcd and the API server's
			// own start.
			if err := kube.Probe(ctx, "https://"+addr+"/readyz"); err != nil {
				return "", err
			}
			return addr + " presents serial " + r.Serial + ", /readyz ok", nil
		}
		return addr + " presents serial " + r.Serial, nil
	}
}

// server is a component that serves one of the certificates: its static
// pod and container, and the address it presents the certificate on,
// from the container's flags ("" when they name none devk can reach).
type server struct {
	pod  string
	addr func(flags map[string]string) string
}

// servers are the serving certificates renew verifies by the serial their
// server presents.
var servers = map[string]server{
	"apiserver": {"kube-apiserver", func(f map[string]string) string {
		if f["advertise-address"] == "" {
			return ""
		}
		return net.JoinHostPort(f["advertise-address"], flagOr(f, "secure-port", strconv.Itoa(layout.DefaultPorts.APIServer)))
	}},
	"etcd/server":               {"etcd", firstHTTPSURL("advertise-client-urls")},
	"etcd/peer":                 {"etcd", firstHTTPSURL("initial-advertise-peer-urls")},
	pki.ControllerManagerServer: {"kube-controller-manager", securePort(layout.DefaultPorts.ControllerManager)},
	pki.SchedulerServer:         {"kube-scheduler", securePort(layout.DefaultPorts.Scheduler)},
}

func flagOr(f map[string]string, name, def string) string {
	if v := f[name]; v != "" {
		return v
	}
	return def
}

// firstHTTPSURL is the host:port of the first URL of an etcd flag.
func firstHTTPSURL(flag string) func(map[string]string) string {
	return func(f map[string]string) string {
		first, _, _ := strings.Cut(f[flag], ",")
		u, err := neturl.Parse(first)
		if err != nil || u.Scheme != "https" {
			return ""
		}
		return u.Host
	}
}

// securePort is where a controller-manager or scheduler serves:
// --bind-address (all addresses, or none given: loopback) and
// --secure-port (def when not given; 0 serves nothing).
func securePort(def int) func(map[string]string) string {
	return func(f map[string]string) string {
		port := flagOr(f, "secure-port", strconv.Itoa(def))
		if port == "0" {
			return ""
		}
		host := f["bind-address"]
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, port)
	}
}

// servingAddr is where the server of c presents it, from its manifest;
// "" when c is no serving certificate devk knows, or its server's
// manifest does not name it (a cluster whose manifests predate the file).
func (n *nodeRenewal) servingAddr(c Cert) (string, error) {
	srv, ok := servers[c.spec]
	if !ok || !slices.Contains(c.pods, srv.pod) {
		return "", nil
	}
	data, err := os.ReadFile(filepath.Join(n.Node.ManifestsDir, srv.pod+".yaml"))
	if err != nil {
		return "", err
	}
	p, err := staticpod.Parse(data)
	if err != nil {
		return "", err
	}
	return srv.addr(staticpod.Flags(p, srv.pod)), nil
}

// presentedSerial is the serial of the certificate the TLS server at addr
// presents. It is read during the handshake, which may then fail (etcd
// asks for a client certificate devk does not send).
func presentedSerial(ctx context.Context, addr string) (*big.Int, error) {
	var serial *big.Int
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: tlsDialTimeout}, Config: &tls.Config{
		InsecureSkipVerify: true, // only the serial is read; nothing is sent
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 {
				if crt, err := x509.ParseCertificate(raw[0]); err == nil {
					serial = crt.SerialNumber
				}
			}
			return nil
		},
	}}
	dctx, cancel := context.WithTimeout(ctx, tlsDialTimeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if conn != nil {
		conn.Close()
	}
	if serial != nil {
		return serial, nil
	}
	if err == nil {
		err = errors.New("no certificate presented")
	}
	return nil, fmt.Errorf("%s: %w", addr, err)
}

// rollback puts back every file renew replaced and restarts the pods
// again, so they run with what they had.
func (n *nodeRenewal) rollback(cause error) error {
	var restored []string
	var errs []error
	for _, r := range n.renewed {
		ok, err := pki.Restore(r.Path)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			restored = append(restored, r.Name)
		}
	}
	if len(n.restarted) > 0 && n.rt != nil {
		ctx, cancel := context.WithTimeout(context.Background(), tlsDialTimeout*10)
		defer cancel()
		if _, err := n.restart(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	msg := fmt.Errorf("%w; put back the previous %s", cause, strings.Join(restored, ", "))
	if len(n.restarted) > 0 {
		msg = fmt.Errorf("%w and restarted %s again", msg, strings.Join(n.restarted, ", "))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w (rolling back also failed: %v)", msg, errors.Join(errs...))
	}
	return msg
}
