package kubeconfig

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

const (
	testCluster = "devk"
	testServer  = "https://10.250.0.2:6443"
	testNode    = "node-1"
)

// newCA makes the cluster CA in dir.
func newCA(t testing.TB, dir string) {
	t.Helper()
	for _, s := range pki.Specs(pki.Config{}) {
		if s.Name == pki.CAName {
			if _, err := pki.Ensure(dir, s, time.Now(), true); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("pki has no CA spec")
}

// component is name's kubeconfig in dir, signed by the CA in dir.
func component(t testing.TB, dir, name string) Component {
	t.Helper()
	for _, ks := range pki.KubeconfigSpecs(testNode) {
		if ks.Name == name {
			return Component{Path: filepath.Join(dir, name+".conf"), ClusterName: testCluster, Server: testServer, PKIDir: dir, Spec: ks}
		}
	}
	t.Fatalf("no kubeconfig %s", name)
	return Component{}
}

func TestComponentsReusedUntilTheCAChanges(t *testing.T) {
	dir := t.TempDir()
	newCA(t, dir)
	for _, ks := range pki.KubeconfigSpecs(testNode) {
		k := component(t, dir, ks.Name)
		out, err := Ensure(k, false)
		if err != nil {
			t.Fatal(err)
		}
		if out != phase.Changed("written") {
			t.Errorf("%s: %+v, want written", ks.Name, out)
		}
		cfg, err := clientcmd.LoadFromFile(k.Path)
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(k.Path); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.conf mode %v, want 0600 (it holds a private key)", ks.Name, fi.Mode().Perm())
		}
		kctx := cfg.Contexts[cfg.CurrentContext]
		if cfg.Clusters[kctx.Cluster].Server != testServer {
			t.Errorf("%s: server %s", ks.Name, cfg.Clusters[kctx.Cluster].Server)
		}
		if err := pki.CheckClientCert(dir, pki.CAName, cfg.AuthInfos[kctx.AuthInfo].ClientCertificateData, ks.CommonName, ks.Organization, time.Now(), 0); err != nil {
			t.Errorf("%s: %v", ks.Name, err)
		}
	}
	admin := component(t, dir, "admin")
	if out, err := Ensure(admin, false); err != nil || out != phase.Unchanged("reused") {
		t.Errorf("second run: %v %+v, want reused", err, out)
	}
	if out, err := Ensure(Component{Path: admin.Path, ClusterName: testCluster, Server: "https://10.250.0.3:6443", PKIDir: dir, Spec: admin.Spec}, false); err != nil || out != phase.Changed("written") {
		t.Errorf("another server: %v %+v, want written", err, out)
	}
	os.Remove(pki.CertPath(dir, pki.CAName))
	os.Remove(pki.KeyPath(dir, pki.CAName))
	newCA(t, dir)
	if out, err := Ensure(admin, false); err != nil || out != phase.Changed("written") {
		t.Errorf("after a new CA: %v %+v, want written", err, out)
	}
}

// TestExpiringComponentKeptUnderARunningControlPlane: a kubeconfig whose
// certificate is about to expire is left to certs-expiry while the
// control plane runs, and replaced when it does not.
func TestExpiringComponentKeptUnderARunningControlPlane(t *testing.T) {
	dir := t.TempDir()
	newCA(t, dir)
	k := component(t, dir, "admin")
	caPEM, err := os.ReadFile(pki.CertPath(dir, pki.CAName))
	if err != nil {
		t.Fatal(err)
	}
	// Issued a year less an hour ago: within pki.RenewBefore of its end.
	crt, key, err := pki.ClientCert(dir, pki.CAName, k.Spec.CommonName, k.Spec.Organization, time.Now().Add(-pki.CertValidity+time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := Bytes(k.ClusterName, k.Server, caPEM, k.Spec.CommonName, crt, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.Path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := Ensure(k, true); err != nil || out != phase.Unchanged("expiring; left to certs-expiry") {
		t.Errorf("control plane running: %v %+v, want it left to certs-expiry", err, out)
	}
	if after, _ := os.ReadFile(k.Path); !bytes.Equal(after, data) {
		t.Error("the expiring kubeconfig was rewritten under a running control plane")
	}
	if out, err := Ensure(k, false); err != nil || out != phase.Changed("written") {
		t.Errorf("control plane stopped: %v %+v, want written", err, out)
	}
}

// user is a user's kubeconfig in a temp dir, and an admin.conf for the
// cluster to merge into it.
func user(t testing.TB, dir string) (u User, admin string) {
	t.Helper()
	newCA(t, dir)
	k := component(t, dir, "admin")
	if _, err := Ensure(k, false); err != nil {
		t.Fatal(err)
	}
	return User{Path: filepath.Join(dir, ".kube", "config"), Reporter: progress.Discard()}, k.Path
}

func TestMergeAndRemove(t *testing.T) {
	u, admin := user(t, t.TempDir())
	// The user's kubeconfig already has another cluster.
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["prod"] = &clientcmdapi.Cluster{Server: "https://prod.example:6443"}
	cfg.AuthInfos["prod"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["prod"] = &clientcmdapi.Context{Cluster: "prod", AuthInfo: "prod"}
	cfg.CurrentContext = "prod"
	if err := clientcmd.WriteToFile(*cfg, u.Path); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if out, err := u.MergeAdmin(ctx, testCluster, admin); err != nil || !out.Changed {
		t.Fatalf("first merge: %v, %+v; want a change", err, out)
	}
	got, err := clientcmd.LoadFromFile(u.Path)
	if err != nil {
		t.Fatal(err)
	}
	if got.CurrentContext != "devk-devk" || got.Contexts["prod"] == nil || got.Clusters["devk-devk"] == nil || got.AuthInfos["devk-devk"] == nil {
		t.Fatalf("merged kubeconfig: current %q, contexts %v", got.CurrentContext, got.Contexts)
	}
	// admin.conf itself must not have been touched by the merge.
	a, _ := clientcmd.LoadFromFile(admin)
	if len(a.Contexts) != 1 {
		t.Errorf("admin.conf has %d contexts after the merge, want 1", len(a.Contexts))
	}
	before, _ := os.ReadFile(u.Path)
	if out, err := u.MergeAdmin(ctx, testCluster, admin); err != nil || out.Changed {
		t.Errorf("second merge: %v, %+v; want no change", err, out)
	}
	if after, _ := os.ReadFile(u.Path); string(after) != string(before) {
		t.Error("a second merge rewrote the user's kubeconfig")
	}
	removed, err := u.RemoveContext(ctx, testCluster)
	if err != nil || !removed {
		t.Fatalf("RemoveContext = %v, %v", removed, err)
	}
	got, _ = clientcmd.LoadFromFile(u.Path)
	if got.Contexts["devk-devk"] != nil || got.Clusters["devk-devk"] != nil || got.Contexts["prod"] == nil || got.CurrentContext != "" {
		t.Errorf("after removal: current %q, contexts %v, clusters %v", got.CurrentContext, got.Contexts, got.Clusters)
	}
	if removed, err := u.RemoveContext(ctx, testCluster); err != nil || removed {
		t.Errorf("second removal = %v, %v; want nothing removed", removed, err)
	}
}

// TestUserKubeconfigSafety: the merged file is 0600 (it holds a
// cluster-admin key) with the old one kept, a stale client-go lock left by
// a kill is recovered, and under sudo the file goes back to the user.
func TestUserKubeconfigSafety(t *testing.T) {
	u, admin := user(t, t.TempDir())
	var out bytes.Buffer
	u.Reporter = progress.New(&out, progress.Options{Mode: progress.Plain})
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["prod"] = &clientcmdapi.Cluster{Server: "https://prod.example:6443"}
	if err := clientcmd.WriteToFile(*cfg, u.Path); err != nil {
		t.Fatal(err)
	}
	os.Chmod(u.Path, 0o644)
	before, _ := os.ReadFile(u.Path)
	// A lock a killed kubectl left a minute ago.
	lock := u.Path + ".lock"
	os.WriteFile(lock, nil, 0o600)
	old := time.Now().Add(-time.Minute)
	os.Chtimes(lock, old, old)
	if _, err := u.MergeAdmin(context.Background(), testCluster, admin); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(u.Path); fi.Mode().Perm() != 0o600 {
		t.Errorf("merged kubeconfig mode %v, want 0600", fi.Mode().Perm())
	}
	if prev, _ := os.ReadFile(BackupPath(u.Path)); string(prev) != string(before) {
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
		u.Path = filepath.Join(home, ".kube", "config")
		t.Setenv("SUDO_UID", "4242")
		t.Setenv("SUDO_GID", "4243")
		if _, err := u.MergeAdmin(context.Background(), testCluster, admin); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{u.Path, filepath.Dir(u.Path)} {
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
