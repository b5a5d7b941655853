package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// newTestCluster is a cluster in a temp dir with its CA made.
func newTestCluster(t *testing.T) *Cluster {
	t.Helper()
	home := t.TempDir()
	c, err := Open(Options{Name: "devk", Home: home, Reporter: progress.Discard(), UserKubeconfig: filepath.Join(home, "user.conf")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ensureCert("ca"); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestKubeconfigsReusedUntilTheCAChanges(t *testing.T) {
	c := newTestCluster(t)
	for _, ks := range pki.KubeconfigSpecs(c.Config.NodeName) {
		out, err := c.ensureKubeconfig(ks.Name)
		if err != nil {
			t.Fatal(err)
		}
		if out != phase.Changed("written") {
			t.Errorf("%s: %+v, want written", ks.Name, out)
		}
		cfg, err := clientcmd.LoadFromFile(c.Kubeconfig(ks.Name))
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(c.Kubeconfig(ks.Name)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.conf mode %v, want 0600 (it holds a private key)", ks.Name, fi.Mode().Perm())
		}
		kctx := cfg.Contexts[cfg.CurrentContext]
		if cfg.Clusters[kctx.Cluster].Server != c.Config.APIServerURL() || !strings.HasPrefix(c.Config.AdvertiseIP, "10.250.") {
			t.Errorf("%s: server %s", ks.Name, cfg.Clusters[kctx.Cluster].Server)
		}
		if err := pki.CheckClientCert(c.PKI(), "ca", cfg.AuthInfos[kctx.AuthInfo].ClientCertificateData, ks.CommonName, ks.Organization, time.Now(), 0); err != nil {
			t.Errorf("%s: %v", ks.Name, err)
		}
	}
	if out, err := c.ensureKubeconfig("admin"); err != nil || out != phase.Unchanged("reused") {
		t.Errorf("second run: %v %+v, want reused", err, out)
	}
	os.Remove(pki.CertPath(c.PKI(), "ca"))
	os.Remove(pki.KeyPath(c.PKI(), "ca"))
	if _, err := c.ensureCert("ca"); err != nil {
		t.Fatal(err)
	}
	if out, err := c.ensureKubeconfig("admin"); err != nil || out != phase.Changed("written") {
		t.Errorf("after a new CA: %v %+v, want written", err, out)
	}
}

func TestKubeletFinalize(t *testing.T) {
	c := newTestCluster(t)
	if _, err := c.ensureKubeconfig("kubelet"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if out, err := c.runKubeletFinalize(ctx); err != nil || !out.Changed {
		t.Fatalf("first finalize: %v, %+v; want a change", err, out)
	}
	current := filepath.Join(c.KubeletRoot(), "pki", "kubelet-client-current.pem")
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig("kubelet"))
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
	if out, err := c.ensureKubeconfig("kubelet"); err != nil || out != phase.Unchanged("reused") {
		t.Errorf("kubeconfig/kubelet after finalize: %v %+v, want reused", err, out)
	}
	if out, err := c.runKubeletFinalize(ctx); err != nil || out.Changed {
		t.Errorf("second finalize: %v, %+v; want no change", err, out)
	}
}

func TestKubeconfigMergeAndRemove(t *testing.T) {
	c := newTestCluster(t)
	if _, err := c.ensureKubeconfig("admin"); err != nil {
		t.Fatal(err)
	}
	// The user's kubeconfig already has another cluster.
	user := clientcmdapi.NewConfig()
	user.Clusters["prod"] = &clientcmdapi.Cluster{Server: "https://prod.example:6443"}
	user.AuthInfos["prod"] = &clientcmdapi.AuthInfo{Token: "t"}
	user.Contexts["prod"] = &clientcmdapi.Context{Cluster: "prod", AuthInfo: "prod"}
	user.CurrentContext = "prod"
	if err := clientcmd.WriteToFile(*user, c.UserKubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if out, err := c.MergeUserKubeconfig(ctx); err != nil || !out.Changed {
		t.Fatalf("first merge: %v, %+v; want a change", err, out)
	}
	got, err := clientcmd.LoadFromFile(c.UserKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if got.CurrentContext != "devk-devk" || got.Contexts["prod"] == nil || got.Clusters["devk-devk"] == nil || got.AuthInfos["devk-devk"] == nil {
		t.Fatalf("merged kubeconfig: current %q, contexts %v", got.CurrentContext, got.Contexts)
	}
	// admin.conf itself must not have been touched by the merge.
	admin, _ := clientcmd.LoadFromFile(c.Kubeconfig("admin"))
	if len(admin.Contexts) != 1 {
		t.Errorf("admin.conf has %d contexts after the merge, want 1", len(admin.Contexts))
	}
	before, _ := os.ReadFile(c.UserKubeconfig)
	if out, err := c.MergeUserKubeconfig(ctx); err != nil || out.Changed {
		t.Errorf("second merge: %v, %+v; want no change", err, out)
	}
	if after, _ := os.ReadFile(c.UserKubeconfig); string(after) != string(before) {
		t.Error("a second merge rewrote the user's kubeconfig")
	}
	removed, err := c.removeUserContext(ctx)
	if err != nil || !removed {
		t.Fatalf("removeUserContext = %v, %v", removed, err)
	}
	got, _ = clientcmd.LoadFromFile(c.UserKubeconfig)
	if got.Contexts["devk-devk"] != nil || got.Clusters["devk-devk"] != nil || got.Contexts["prod"] == nil || got.CurrentContext != "" {
		t.Errorf("after removal: current %q, contexts %v, clusters %v", got.CurrentContext, got.Contexts, got.Clusters)
	}
}

// TestUserKubeconfigSafety: the merged file is 0600 (it holds a
// cluster-admin key) with the old one kept, a stale client-go lock left by
// a kill is recovered, and under sudo the file goes back to the user.
func TestUserKubeconfigSafety(t *testing.T) {
	c := newTestCluster(t)
	var out bytes.Buffer
	c.Reporter = progress.New(&out, progress.Options{Mode: progress.Plain})
	if _, err := c.ensureKubeconfig("admin"); err != nil {
		t.Fatal(err)
	}
	user := clientcmdapi.NewConfig()
	user.Clusters["prod"] = &clientcmdapi.Cluster{Server: "https://prod.example:6443"}
	if err := clientcmd.WriteToFile(*user, c.UserKubeconfig); err != nil {
		t.Fatal(err)
	}
	os.Chmod(c.UserKubeconfig, 0o644)
	before, _ := os.ReadFile(c.UserKubeconfig)
	// A lock a killed kubectl left a minute ago.
	lock := c.UserKubeconfig + ".lock"
	os.WriteFile(lock, nil, 0o600)
	old := time.Now().Add(-time.Minute)
	os.Chtimes(lock, old, old)
	if _, err := c.MergeUserKubeconfig(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(c.UserKubeconfig); fi.Mode().Perm() != 0o600 {
		t.Errorf("merged kubeconfig mode %v, want 0600", fi.Mode().Perm())
	}
	if prev, _ := os.ReadFile(userKubeconfigBackup(c.UserKubeconfig)); string(prev) != string(before) {
		t.Error("the previous kubeconfig was not kept")
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("lock left behind: %v", err)
	}
	joined := out.String()
	if !strings.Contains(joined, "0600") || !strings.Contains(joined, "killed") {
		t.Errorf("the chmod and the stale lock were not reported: %q", joined)
	}

	t.Run("sudo", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to chown")
		}
		home := filepath.Join(t.TempDir(), "alice")
		os.Mkdir(home, 0o755)
		os.Chown(home, 4242, 4242)
		c.UserKubeconfig = filepath.Join(home, ".kube", "config")
		t.Setenv("SUDO_UID", "4242")
		t.Setenv("SUDO_GID", "4243")
		if _, err := c.MergeUserKubeconfig(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{c.UserKubeconfig, filepath.Dir(c.UserKubeconfig)} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4242 || st.Gid != 4243 {
				t.Errorf("%s owned by %d:%d, want 4242:4243", p, st.Uid, st.Gid)
			}
		}
	})
}
