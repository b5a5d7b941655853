//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/internal/layout"
)

// TestExportLogs exports the shared cluster's logs: a non-empty log of
// every control-plane component, kube-proxy and CoreDNS, the kubelet's
// and containerd's logs, the manifests, the objects with the node and
// the kube-system pods, the Secrets redacted, nothing missing and no key
// or kubeconfig; then the same as a tarball under the default name.
func TestExportLogs(t *testing.T) {
	c := Cluster(t)
	cfg, _, err := layout.Open(c.Home, layout.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	node := cfg.FirstNode().Name
	dir := filepath.Join(t.TempDir(), "logs")
	r := MustDevkEnv(t, c.Tree, c.Env, "export", "logs", dir, "-o", "json")
	var res struct {
		Path                          string
		Files, ContainerLogs, Objects int
		Resources                     int
		Missing                       []string
	}
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || res.Path != dir {
		t.Fatalf("devk export logs -o json: %v\n%s", err, r.Stdout)
	}
	t.Logf("exported %d files: %d container logs, %d objects of %d resources, in %s", res.Files, res.ContainerLogs, res.Objects, res.Resources, r.Took)
	if len(res.Missing) > 0 {
		t.Errorf("missing from the export of a healthy cluster: %q", res.Missing)
	}
	if _, err := os.Stat(filepath.Join(dir, "errors.txt")); err == nil {
		t.Errorf("errors.txt written for a healthy cluster")
	}

	nonEmpty := func(what, pattern string) {
		t.Helper()
		matches, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.Size() > 0 {
				return
			}
		}
		t.Errorf("%s: no non-empty %s (matches: %v)", what, pattern, matches)
	}
	for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
		nonEmpty(comp, filepath.Join(node, "containers", "kube-system_"+comp+"-"+node+"_"+comp+"_*.log"))
		nonEmpty(comp+"'s manifest", filepath.Join(node, "manifests", comp+".yaml"))
	}
	nonEmpty("kube-proxy", filepath.Join(node, "containers", "kube-system_kube-proxy-*_kube-proxy_*.log"))
	nonEmpty("CoreDNS", filepath.Join(node, "containers", "kube-system_coredns-*_coredns_*.log"))
	for _, f := range []string{"kubelet.log", "containerd.log", "containers.txt", "kubelet-config.yaml"} {
		nonEmpty(f, filepath.Join(node, f))
	}
	for _, f := range []string{"cluster.json", "timings.txt", "status.json", "README.txt"} {
		nonEmpty(f, f)
	}

	read := func(rel string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Error(err)
		}
		return string(data)
	}
	if nodes := read("objects/nodes.yaml"); !strings.Contains(nodes, "name: "+node) {
		t.Errorf("objects/nodes.yaml lacks the node %s", node)
	}
	pods := read("objects/pods.yaml")
	for _, want := range []string{"name: kube-apiserver-" + node, "name: etcd-" + node, "name: coredns-", "name: kube-proxy-", "namespace: kube-system"} {
		if !strings.Contains(pods, want) {
			t.Errorf("objects/pods.yaml lacks %q", want)
		}
	}
	// The Secrets are there, their values not.
	secrets := read("objects/secrets.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := clientFor(t, c.Kubeconfig).CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 || !strings.Contains(secrets, "REDACTED") {
		t.Errorf("%d Secrets in the cluster; objects/secrets.yaml:\n%s", len(list.Items), secrets)
	}
	for _, s := range list.Items {
		if !strings.Contains(secrets, "name: "+s.Name) {
			t.Errorf("Secret %s/%s is not in the export", s.Namespace, s.Name)
		}
		for k, v := range s.Data {
			if len(v) >= 8 && (strings.Contains(secrets, string(v)) || strings.Contains(secrets, base64.StdEncoding.EncodeToString(v))) {
				t.Errorf("Secret %s/%s's %s is in the export", s.Namespace, s.Name, k)
			}
		}
	}
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && (strings.HasSuffix(path, ".key") || strings.HasSuffix(path, ".conf")) {
			t.Errorf("%s exported", path)
		}
		return nil
	})

	// Another user of the machine makes the destination first, to plant
	// links in it once the export starts (issue 33): refused, and
	// nothing is written in it.
	shared, err := os.MkdirTemp("", "devk-e2e-export-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(shared, "logs")
	if out, err := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "mkdir", "-m", "0777", theirs).CombinedOutput(); err != nil {
		t.Fatalf("mkdir as uid 65534: %v\n%s", err, out)
	}
	if r := Devk(t, c.Tree, c.Env, "export", "logs", theirs); r.Err == nil || !strings.Contains(r.Stderr, theirs+" belongs to uid 65534, not to devk's user (uid 0)") {
		t.Errorf("export logs into uid 65534's directory: %v\n%s", r.Err, r.Stderr)
	}
	if ents, err := os.ReadDir(theirs); err != nil || len(ents) > 0 {
		t.Errorf("the refused destination holds %v (%v)", ents, err)
	}

	// A tarball under the default name in the working directory.
	cwd := t.TempDir()
	r = MustDevkEnv(t, cwd, c.Env, "export", "logs", "--tar")
	tarball := strings.TrimSpace(r.Stdout)
	if filepath.Dir(tarball) != cwd || !strings.HasPrefix(filepath.Base(tarball), "devk-logs-devk-") || !strings.HasSuffix(tarball, ".tar.gz") {
		t.Fatalf("devk export logs --tar printed %q; want ./devk-logs-devk-TIME.tar.gz in %s", r.Stdout, cwd)
	}
	out, err := exec.Command("tar", "tzf", tarball).Output()
	if err != nil {
		t.Fatalf("tar tzf %s: %v", tarball, err)
	}
	top := strings.TrimSuffix(filepath.Base(tarball), ".tar.gz")
	for _, want := range []string{top + "/" + node + "/kubelet.log", top + "/objects/pods.yaml", top + "/" + node + "/manifests/kube-apiserver.yaml"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("the tarball lacks %s:\n%s", want, out)
		}
	}
}
