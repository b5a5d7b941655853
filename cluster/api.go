package cluster

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/devk/devk/cluster/internal/bootstrap"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// Client is a clientset with the super-admin credential (system:masters),
// which works before any RBAC binding exists.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	cs, err := kube.Client(c.FirstNode().Files.Kubeconfig("super-admin"), kube.WithTimeout(apiRequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("%w (run `devk up`)", err)
	}
	return cs, nil
}

// UploadConfig stores cluster.json in ConfigMap devk-config and binds
// admin.conf's group to cluster-admin.
func (c *Cluster) UploadConfig(ctx context.Context) (phase.Outcome, error) {
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	n, err := bootstrap.UploadConfig(ctx, cs, c.Config)
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(n > 0, "%d objects written", n), nil
}

func (c *Cluster) runMarkControlPlane(ctx context.Context) (phase.Outcome, error) {
	return c.markControlPlane(ctx, c.FirstNode())
}

// markControlPlane labels control-plane node n, and taints it when the
// cluster keeps the taint.
func (c *Cluster) markControlPlane(ctx context.Context, cp Node) (phase.Outcome, error) {
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	name := cp.Name()
	taint := c.Config.KeepTaint
	patched, err := bootstrap.MarkControlPlane(ctx, cs, name, taint, cp.Files.LogFile("kubelet"))
	switch {
	case err != nil:
		return phase.Done, err
	case !patched:
		return phase.Unchanged("already marked"), nil
	case taint:
		return phase.Changed("labelled and tainted %s (--keep-taint)", name), nil
	}
	return phase.Changed("labelled %s, no control-plane taint", name), nil
}

// runBootstrapToken makes what kubeadm's bootstrap-token phase makes: a
// token (kept while it has more than bootstrap.TokenMinLeft left), the
// RBAC that lets its holders post node CSRs and get them approved,
// auto-approval of node certificate rotation, and the cluster-info
// ConfigMap in kube-public that joining nodes read anonymously; and
// writes the token where node add finds it.
func (c *Cluster) runBootstrapToken(ctx context.Context) (phase.Outcome, error) {
	cs, err := c.Client()
	if err != nil {
		return phase.Done, err
	}
	tok, changed, err := bootstrap.EnsureToken(ctx, cs, time.Now())
	if err != nil {
		return phase.Done, err
	}
	n := 0
	if changed {
		n++
	}
	bound, err := bootstrap.ApplyNodeRBAC(ctx, cs)
	if err != nil {
		return phase.Done, err
	}
	caPEM, err := os.ReadFile(pki.CertPath(c.caDir(), pki.CAName))
	if err != nil {
		return phase.Done, err
	}
	info, err := bootstrap.ApplyClusterInfo(ctx, cs, c.Config.APIServerURL(), caPEM)
	if err != nil {
		return phase.Done, err
	}
	n += bound + info
	token := bootstraputil.TokenFromIDAndSecret(tok.ID, tok.Secret)
	if _, err := atomicfile.WriteIfChanged(c.Files.BootstrapToken(), []byte(token+"\n"), 0o600, ""); err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(n > 0, "token %s.… (%d objects written)", tok.ID, n), nil
}
