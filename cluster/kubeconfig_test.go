package cluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// newTestCluster is a cluster in a temp dir with its CA made.
func newTestCluster(t *testing.T) *Cluster {
	t.Helper()
	home := t.TempDir()
	c, err := Open(Options{Name: "devk", Home: home, Reporter: progress.Discard(), UserKubeconfig: filepath.Join(home, "user.conf")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ensureCert(c.FirstNode(), "ca"); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestKubeletFinalize(t *testing.T) {
	c := newTestCluster(t)
	if _, err := c.ensureKubeconfig(c.FirstNode(), "kubelet"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if out, err := c.runKubeletFinalize(ctx); err != nil || !out.Changed {
		t.Fatalf("first finalize: %v, %+v; want a change", err, out)
	}
	current := filepath.Join(c.FirstNode().Files.KubeletRoot(), "pki", "kubelet-client-current.pem")
	cfg, err := clientcmd.LoadFromFile(c.FirstNode().Files.Kubeconfig("kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	ai := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if ai.ClientCertificate != current || ai.ClientKey != current || len(ai.ClientCertificateData) > 0 {
		t.Errorf("kubelet.conf user = %+v, want both pointing at %s", ai, current)
	}
	if target, err := os.Readlink(current); err != nil || filepath.Dir(target) != "." {
		t.Errorf("%s should be a relative symlink as the kubelet makes: %q %v", current, target, err)
	}
	// The kubeconfig phase accepts the finalized kubelet.conf as it is.
	if out, err := c.ensureKubeconfig(c.FirstNode(), "kubelet"); err != nil || out != phase.Unchanged("reused") {
		t.Errorf("kubeconfig/kubelet after finalize: %v %+v, want reused", err, out)
	}
	if out, err := c.runKubeletFinalize(ctx); err != nil || out.Changed {
		t.Errorf("second finalize: %v, %+v; want no change", err, out)
	}
}
