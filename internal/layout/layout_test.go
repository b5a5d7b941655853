package layout

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestOpenNoCluster(t *testing.T) {
	home := t.TempDir()
	_, _, err := Open(home, "dev2")
	var nc *NoClusterError
	if !errors.Is(err, ErrNoCluster) || !errors.As(err, &nc) || !strings.Contains(err.Error(), "there are none") {
		t.Fatalf("Open of a missing cluster: %v", err)
	}
	cfg := placed(t, "devk")
	p := HomeFiles(home).Cluster("devk")
	os.MkdirAll(p.Dir, 0o755)
	os.WriteFile(p.ConfigFile(), []byte(`{"name":"devk"}`), 0o644)
	if _, _, err := Open(home, "devk"); err == nil || errors.Is(err, ErrNoCluster) {
		t.Fatalf("a cluster.json that fails validation: %v; want a validation error", err)
	}
	writeConfig(t, p, cfg)
	got, gp, err := Open(home, "")
	if err != nil || got.Name != "devk" || gp != p {
		t.Fatalf("Open = %+v, %v, %v", got.Name, gp, err)
	}
	if _, _, err := Open(home, "dev2"); err == nil || !strings.Contains(err.Error(), "there are: devk") {
		t.Fatalf("Open of a missing cluster beside devk: %v", err)
	}
	if _, _, err := Open(home, "../x"); err == nil || errors.Is(err, ErrNoCluster) {
		t.Fatalf("Open of a bad name: %v", err)
	}
}

func writeConfig(t *testing.T, p ClusterFiles, cfg Config) {
	t.Helper()
	data, err := EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.ConfigFile(), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHomeDirResolvesSymlinks(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "home")
	os.Symlink(real, link)
	got, err := HomeDir(link)
	if want, _ := filepath.EvalSymlinks(real); err != nil || got != want {
		t.Fatalf("HomeDir(%s) = %s, %v; want %s", link, got, err, want)
	}
	t.Setenv("DEVK_HOME", "rel")
	if got, _ := HomeDir(""); !filepath.IsAbs(got) {
		t.Fatalf("HomeDir from a relative DEVK_HOME = %s; want absolute", got)
	}
}

func TestNodeEtcd(t *testing.T) {
	dir := t.TempDir()
	n := Kubeadm(dir)
	// No manifest: kubeadm's file names and address.
	e := n.Etcd()
	want := Etcd{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: filepath.Join(dir, "pki/etcd/ca.crt"),
		Cert: filepath.Join(dir, "pki/apiserver-etcd-client.crt"), Key: filepath.Join(dir, "pki/apiserver-etcd-client.key"), Prefix: "/registry"}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("Etcd without a manifest = %+v, want %+v", e, want)
	}
	// The manifest's flags win, quoted or not, in command or args.
	os.MkdirAll(n.ManifestsDir, 0o755)
	os.WriteFile(filepath.Join(n.ManifestsDir, "kube-apiserver.yaml"), []byte(`apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system}
spec:
  containers:
  - name: kube-apiserver
    command:
    - kube-apiserver
    - "--etcd-servers=https://10.0.0.1:2379,https://10.0.0.2:2379"
    - --etcd-cafile=/x/ca.crt
    args: ['--etcd-prefix=/other']
`), 0o644)
	e = n.Etcd()
	if !reflect.DeepEqual(e.Endpoints, []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379"}) || e.CACert != "/x/ca.crt" || e.Prefix != "/other" || e.Cert != want.Cert {
		t.Fatalf("Etcd from the manifest = %+v", e)
	}
	// A devk cluster's node uses its own etcd address.
	cfg := NewConfig("devk")
	cfg.Ports.EtcdClient = 12379
	if got := HomeFiles(dir).Cluster("devk").FirstNode().ControlPlane(cfg, NodeNet{Name: "n", IP: "127.0.0.2"}).Etcd().Endpoints; !reflect.DeepEqual(got, []string{"https://127.0.0.2:12379"}) {
		t.Fatalf("devk node's etcd = %v", got)
	}
	// A node kubeadm bootstrapped inside devk: its manifest names the
	// paths inside the node and etcd on the node's loopback; from this
	// machine they are the node's files and its address.
	nf := HomeFiles(dir).Cluster("kad").FirstNode()
	os.MkdirAll(nf.Manifests(), 0o755)
	os.WriteFile(nf.ManifestPath("kube-apiserver"), []byte(`apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system}
spec:
  containers:
  - name: kube-apiserver
    command: [kube-apiserver, --etcd-servers=https://127.0.0.1:2379, --etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt,
      --etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt, --etcd-keyfile=/etc/kubernetes-other/k.key]
`), 0o644)
	cfg.Ports.EtcdClient = 2379
	cfg.Spec.Bootstrapper = BootstrapperKubeadm
	e = nf.ControlPlane(cfg, NodeNet{Name: "kad-control-plane", IP: "10.250.0.2"}).Etcd()
	if !reflect.DeepEqual(e.Endpoints, []string{"https://10.250.0.2:2379"}) || e.CACert != nf.PKI()+"/etcd/ca.crt" ||
		e.Cert != nf.PKI()+"/apiserver-etcd-client.crt" || e.Key != "/etc/kubernetes-other/k.key" {
		t.Fatalf("kubeadm-in-devk node's etcd = %+v", e)
	}
}

// TestControllers: devk's controller-manager and scheduler are reached
// at the node's address from the host, kubeadm's on the node's loopback
// from inside its network namespace.
func TestController(t *testing.T) {
	n := NodeNet{Name: "k-control-plane", IP: "10.250.0.2", NetNS: "devk-k-control-plane"}
	var cfg Config
	if base, netns := cfg.Controller(n, 10257); base != "https://10.250.0.2:10257" || netns != "" {
		t.Errorf("devk's bootstrap: Controller = %q, %q; want the node's address from the host", base, netns)
	}
	cfg.Spec.Bootstrapper = BootstrapperKubeadm
	if base, netns := cfg.Controller(n, 10259); base != "https://127.0.0.1:10259" || netns != n.NetNSPath() {
		t.Errorf("kubeadm's: Controller = %q, %q; want %s inside %s", base, netns, KubeadmControllersHost, n.NetNSPath())
	}
}
