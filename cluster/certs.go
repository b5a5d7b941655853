package cluster

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/devk/devk/certs"
	"github.com/devk/devk/cluster/internal/kubeconfig"
	"github.com/devk/devk/cluster/internal/nodecerts"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// pkiConfig is what node n's certificate set depends on.
func (c *Cluster) pkiConfig(n Node) (pki.Config, error) { return nodecerts.Config(c.Config, n.Net) }

// apiserverRunning says whether this cluster's control plane is up, in
// which case its certificates are never replaced under it.
func (c *Cluster) apiserverRunning(n Node) bool {
	_, ok := n.Files.Procs().Running("kubelet")
	return ok
}

// certPhases are certs/<name> for kubeadm's set, with etcd's under
// certs/etcd/, then certs/sa.
func certPhases() []*phase.Phase[*Cluster] {
	specs := pki.Specs(pki.Config{})
	var top []*phase.Phase[*Cluster]
	etcd := &phase.Phase[*Cluster]{Name: "etcd", Short: "etcd's CA and certificates"}
	for _, s := range specs {
		name := s.Name
		short := name + ".crt/.key, signed by " + s.CA + " (CN " + s.CommonName + ")"
		if s.IsCA() {
			short = name + ".crt/.key, a self-signed CA"
		}
		if s.CommonName == "" {
			short = name + ".crt/.key, signed by " + s.CA + " (CN the node name)"
		}
		leaf := name
		if len(name) > 5 && name[:5] == "etcd/" {
			leaf = name[5:]
		}
		p := &phase.Phase[*Cluster]{
			Name:  leaf,
			Short: short,
			IO: func(c *Cluster) ([]string, []string) {
				var reads []string
				if !s.IsCA() {
					reads = []string{pki.CertPath(c.FirstNode().Files.PKI(), s.CA), pki.KeyPath(c.FirstNode().Files.PKI(), s.CA)}
				}
				return reads, []string{pki.CertPath(c.FirstNode().Files.PKI(), name), pki.KeyPath(c.FirstNode().Files.PKI(), name)}
			},
			Run: func(ctx context.Context, c *Cluster) (phase.Outcome, error) { return c.ensureCert(c.FirstNode(), name) },
		}
		if leaf != name {
			etcd.Children = append(etcd.Children, p)
			if len(etcd.Children) == 1 {
				top = append(top, etcd)
			}
			continue
		}
		top = append(top, p)
	}
	top = append(top, &phase.Phase[*Cluster]{
		Name:  "sa",
		Short: "service-account signing key pair (sa.key, sa.pub)",
		IO: func(c *Cluster) ([]string, []string) {
			return nil, []string{c.FirstNode().Files.PKI() + "/" + pki.SAKeyName, c.FirstNode().Files.PKI() + "/" + pki.SAPubName}
		},
		Run: func(ctx context.Context, c *Cluster) (phase.Outcome, error) {
			res, err := pki.EnsureSA(c.FirstNode().Files.PKI())
			if err != nil {
				return phase.Done, err
			}
			return nodecerts.Outcome(res), nil
		},
	})
	return top
}

// ensureCert is certs/<name> on node n (nodecerts.Ensure).
func (c *Cluster) ensureCert(n Node, name string) (phase.Outcome, error) {
	cfg, err := c.pkiConfig(n)
	if err != nil {
		return phase.Done, err
	}
	return nodecerts.Ensure(n.Files.PKI(), cfg, name, c.apiserverRunning(n))
}

func kubeconfigPhases() []*phase.Phase[*Cluster] {
	var out []*phase.Phase[*Cluster]
	for _, ks := range pki.KubeconfigSpecs("NODE") {
		name := ks.Name
		out = append(out, &phase.Phase[*Cluster]{
			Name:  name,
			Short: "kubeconfig " + name + ".conf (" + ks.CommonName + ")",
			IO: func(c *Cluster) ([]string, []string) {
				return []string{c.FirstNode().Files.PKI() + "/ca.crt", c.FirstNode().Files.PKI() + "/ca.key"}, []string{c.FirstNode().Files.Kubeconfig(name)}
			},
			Run: func(ctx context.Context, c *Cluster) (phase.Outcome, error) {
				return c.ensureKubeconfig(c.FirstNode(), name)
			},
		})
	}
	return out
}

// ensureKubeconfig is kubeconfig/<name> on this node.
func (c *Cluster) ensureKubeconfig(n Node, name string) (phase.Outcome, error) {
	var spec pki.KubeconfigSpec
	for _, s := range pki.KubeconfigSpecs(n.Name()) {
		if s.Name == name {
			spec = s
		}
	}
	return kubeconfig.Ensure(kubeconfig.Component{Path: n.Files.Kubeconfig(name), ClusterName: c.Config.Name, Server: c.Config.APIServerURL(),
		PKIDir: n.Files.PKI(), Spec: spec, Validity: c.Config.Spec.LeafValidity()}, c.apiserverRunning(n))
}

// KubeconfigBytes is a kubeconfig with one cluster, user and context
// (kubeconfig.Bytes), for packages outside cluster/.
func KubeconfigBytes(clusterName, server string, caPEM []byte, user string, certPEM, keyPEM []byte) ([]byte, error) {
	return kubeconfig.Bytes(clusterName, server, caPEM, user, certPEM, keyPEM)
}

// UserKubeconfigFile is the file context devk-<name> goes into:
// --kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config.
func (c *Cluster) UserKubeconfigFile() string {
	if c.UserKubeconfig != "" {
		return c.UserKubeconfig
	}
	return kubeconfig.DefaultUserPath()
}

// userKubeconfig is the user's kubeconfig, whose changes besides devk's
// context go to c's reporter.
func (c *Cluster) userKubeconfig() kubeconfig.User {
	return kubeconfig.User{Path: c.UserKubeconfigFile(), Reporter: c.Reporter}
}

// ContextName is the user's kubeconfig context for a cluster.
func ContextName(name string) string { return kubeconfig.ContextName(name) }

// MergeUserKubeconfig adds cluster, user and context devk-<name>, from
// admin.conf, to the user's kubeconfig and makes it the current context
// when it was added or changed: up's kubeconfig-merge phase, and what
// `devk certs renew` runs after renewing admin.conf.
func (c *Cluster) MergeUserKubeconfig(ctx context.Context) (phase.Outcome, error) {
	return c.userKubeconfig().MergeAdmin(ctx, c.Config.Name, c.FirstNode().Files.Kubeconfig("admin"))
}

// removeUserContext takes devk-<name> out of the user's kubeconfig.
func (c *Cluster) removeUserContext(ctx context.Context) (bool, error) {
	return c.userKubeconfig().RemoveContext(ctx, c.Config.Name)
}

// CertsWarnWithin is how close to expiry a certificate makes up warn.
const CertsWarnWithin = 30 * 24 * time.Hour

// CertNodes are the control-plane nodes called names as devk certs
// check-expiration and renew go through them, in the cluster's order
// (node 0 first): each node's own files and runtime, behind HAProxy how
// to take its API server out and put it back, and on node 0 the merge of
// its renewed admin.conf into the user's kubeconfig, as up merges it.
func (c *Cluster) CertNodes(names []string) ([]certs.RenewNode, error) {
	cps, err := c.ControlPlaneNodes()
	if err != nil {
		return nil, err
	}
	var out []certs.RenewNode
	for _, cp := range cps {
		if !slices.Contains(names, cp.Name) {
			continue
		}
		n := certs.RenewNode{ControlPlaneNode: cp}
		if cp.Name == c.Config.FirstNode().Name {
			n.MergeAdmin = c.MergeUserKubeconfig
		}
		out = append(out, n)
	}
	return out, nil
}

// StaticPodStopGrace is how long a static pod's container gets after
// SIGTERM when a swap or a certificate renewal restarts it on a node
// taken out of HAProxy (swap.Options.StopGrace,
// certs.RenewOptions.StopGrace): staticpod.HAStopGrace behind HAProxy,
// none without.
func (c *Cluster) StaticPodStopGrace() time.Duration {
	if c.Config.HA() {
		return staticpod.HAStopGrace
	}
	return 0
}

// runCertsExpiry warns about what expires within CertsWarnWithin, or with
// RenewCerts renews everything devk can on node 0 (the pipeline of devk
// certs renew, its steps reported under this phase; behind HAProxy its
// API server taken out around its restart). The other control-plane
// nodes are left to `devk certs renew`: up starts them in its later
// nodes phase, and renew needs a node's pods running.
func (c *Cluster) runCertsExpiry(ctx context.Context) (phase.Outcome, error) {
	n0 := c.FirstNode()
	if c.RenewCerts {
		validity := c.Config.Spec.LeafValidity()
		if validity == 0 {
			validity = pki.CertValidity
		}
		nodes, err := c.CertNodes([]string{n0.Name()})
		if err != nil {
			return phase.Done, err
		}
		j, err := certs.Renew(ctx, certs.RenewOptions{Nodes: nodes, Names: []string{certs.AllNames},
			Validity: validity, StopGrace: c.StaticPodStopGrace(), UserKubeconfig: c.UserKubeconfigFile()},
			phase.Options{Reporter: progress.Under(c.Reporter, "certs-expiry")})
		if err != nil {
			return phase.Done, err
		}
		var pods []string
		for _, r := range j.Restarted {
			pods = append(pods, r.Pod)
		}
		return phase.Changed("renewed %d, restarted %s", len(j.Renewed), strings.Join(pods, ", ")), nil
	}
	r, err := certs.Inspect(n0.Files.ControlPlane(c.Config, n0.Net), time.Now())
	if err != nil {
		return phase.Done, err
	}
	soon := r.ExpiringWithin(CertsWarnWithin)
	if len(soon) == 0 {
		return phase.Unchanged("nothing expires within %s", certs.HumanDuration(certs.Duration(CertsWarnWithin))), nil
	}
	c.Reporter.Infof("  warning: %d certificates expire within %s (%s): `devk up --renew-certs` or `devk certs renew all` renews them", len(soon),
		certs.HumanDuration(certs.Duration(CertsWarnWithin)), strings.Join(soon, ", "))
	return phase.Unchanged("%d expire within %s: %s", len(soon), certs.HumanDuration(certs.Duration(CertsWarnWithin)), strings.Join(soon, ", ")), nil
}
