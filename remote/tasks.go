package remote

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/agent"
	"github.com/devk/devk/certs"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/etcdwatch"
)

// Certs reads the certificates of the control-plane nodes only names (all
// when empty), each by its node's agent, into one report as
// check-expiration prints it.
func (s *Session) Certs(ctx context.Context, only []string) (*certs.Report, error) {
	nodes, err := s.ControlPlanes(ctx, only)
	if err != nil {
		return nil, err
	}
	r := &certs.Report{Now: time.Now()}
	for _, n := range nodes {
		if _, err := s.withKubelet(ctx, &n); err != nil {
			return nil, err
		}
		var one certs.Report
		if err := s.doStep(ctx, n.Node, "certs", agent.Task{Kind: agent.KindCerts, Certs: &n.Files}, &one, func() string {
			return fmt.Sprintf("%d certificates, %d CAs (%s)", len(one.Certs), len(one.CAs), n.Files.PKIDir)
		}); err != nil {
			return nil, err
		}
		r.Add(n.Node, &one)
	}
	return r, nil
}

// DigestSources are the views of what the cluster runs that `devk digest
// verify` compares, for the static pods of binaries: on each
// control-plane node, what its manifest names and its runtime runs (read
// there by the node's agent) and its mirror pod; the addons' workloads
// and pods through the API.
func (s *Session) DigestSources(ctx context.Context, binaries []string) ([]digest.Source, error) {
	nodes, err := s.ControlPlanes(ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []digest.Source
	for _, n := range nodes {
		kf, err := s.withKubelet(ctx, &n)
		if err != nil {
			return nil, err
		}
		var v digest.NodeViews
		task := agent.Task{Kind: agent.KindDigest, Digest: &agent.DigestTask{ManifestsDir: kf.StaticPodPath, CRISocket: kf.CRISocket, NodeName: n.Node, Binaries: binaries}}
		if err := s.doStep(ctx, n.Node, "digest", task, &v, func() string {
			return fmt.Sprintf("%d static pods (%s, %s)", len(binaries), kf.StaticPodPath, kf.CRISocket)
		}); err != nil {
			return nil, err
		}
		out = append(out, v.Sources(n.Node)...)
		out = append(out, digest.OnNode{Node: n.Node, Source: digest.Mirror{Client: s.cs, NodeName: n.Node}})
	}
	return append(out, digest.Workload{Client: s.cs}, digest.Pods{Client: s.cs}), nil
}

// Etcd runs `devk etcd ls|get` (e: its verb and query) on the etcd of
// control-plane node (the first when ""), by that node's agent with its
// API server's --etcd-* flags, and returns what it printed.
func (s *Session) Etcd(ctx context.Context, node string, e agent.EtcdTask) (string, error) {
	cp, err := s.etcdNode(ctx, node, &e)
	if err != nil {
		return "", err
	}
	r, err := s.etcd(ctx, cp, e)
	return r.Output, err
}

// EtcdDiff runs `devk etcd diff` (e: its verb, query and --exclude; Rev
// its --since-rev, or 0) through the cluster, on the etcd of control-plane
// node (the first when ""). devk reads etcd's revision through the API
// (a list's resourceVersion is etcd's revision) before and after change
// makes the change here (the user's command runs on this machine), and
// the node's agent prints every key changed between the two, as a local
// diff does, to out: what the agent's own pod writes comes after, and
// is not in it. change is etcdwatch.DiffOptions.RunChange; a command
// that failed is the error once its diff is printed, as locally.
func (s *Session) EtcdDiff(ctx context.Context, node string, e agent.EtcdTask, change func(ctx context.Context, from int64) (cmdErr, err error), out io.Writer) error {
	cp, err := s.etcdNode(ctx, node, &e)
	if err != nil {
		return err
	}
	var cmdErr error
	if e.Rev == 0 {
		if e.Rev, err = s.revision(ctx); err != nil {
			return err
		}
		if cmdErr, err = change(ctx, e.Rev); err != nil {
			return err
		}
	}
	if e.UntilRev, err = s.revision(ctx); err != nil {
		return err
	}
	r, err := s.etcd(ctx, cp, e)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(out, r.Output); err != nil {
		return err
	}
	return etcdwatch.CommandFailed(cmdErr)
}

// revision is etcd's revision now, as the API server reads it: the
// resourceVersion of a (consistent) list of kube-system's pods, which
// finding the control planes may read already.
func (s *Session) revision(ctx context.Context) (int64, error) {
	l, err := s.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("read etcd's revision through the API server: %w", err)
	}
	rev, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil || rev <= 0 {
		return 0, fmt.Errorf("the API server's resourceVersion %q is no etcd revision: devk etcd diff through the cluster needs a cluster stored in etcd", l.ResourceVersion)
	}
	return rev, nil
}

// EtcdWatch runs `devk etcd watch` (e: its verb, query, --exclude and
// --from-rev as Rev) through the cluster, on the etcd of control-plane
// node (the first when ""): the node's agent prints each change as it
// comes, which goes to out, until ctx ends (Ctrl-C); then its pod is
// deleted.
func (s *Session) EtcdWatch(ctx context.Context, node string, e agent.EtcdTask, out io.Writer) error {
	cp, err := s.etcdNode(ctx, node, &e)
	if err != nil {
		return err
	}
	err = s.Stream(ctx, cp.Node, agent.Task{Kind: agent.KindEtcd, Etcd: &e}, out)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// etcdNode is control-plane node (the first when "") whose etcd e reads,
// e's connection set to its API server's (e's own prefix kept: the
// user's --etcd-prefix).
func (s *Session) etcdNode(ctx context.Context, node string, e *agent.EtcdTask) (ControlPlane, error) {
	var only []string
	if node != "" {
		only = []string{node}
	}
	nodes, err := s.ControlPlanes(ctx, only)
	if err != nil {
		return ControlPlane{}, err
	}
	cp := nodes[0]
	if len(cp.Etcd.Endpoints) == 0 || cp.Etcd.Cert == "" {
		return ControlPlane{}, fmt.Errorf("node %s: its API server has no --etcd-servers and --etcd-certfile: devk cannot reach its etcd as it does", cp.Node)
	}
	prefix := e.Conn.Prefix
	e.Conn = cp.Etcd
	if prefix != "" {
		e.Conn.Prefix = prefix
	}
	return cp, nil
}

// etcd runs etcd task e on cp's agent.
func (s *Session) etcd(ctx context.Context, cp ControlPlane, e agent.EtcdTask) (agent.EtcdResult, error) {
	var r agent.EtcdResult
	err := s.doStep(ctx, cp.Node, "etcd-"+e.Verb, agent.Task{Kind: agent.KindEtcd, Etcd: &e}, &r, func() string { return strings.Join(e.Conn.Endpoints, ",") })
	return r, err
}
