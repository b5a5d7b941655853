package etcdwatch

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeCluster lays out a devk cluster directory as `devk up` does: its
// cluster.json (NewConfig placed, changed by edit), the etcd PKI and, when
// given, the API server's manifest.
func fakeCluster(t *testing.T, home, name, manifest string, edit func(*layout.Config)) string {
	t.Helper()
	p := writeClusterJSON(t, home, name, edit).FirstNode()
	writeFile(t, filepath.Join(p.PKI(), "etcd", "ca.crt"), "ca")
	writeFile(t, filepath.Join(p.PKI(), "apiserver-etcd-client.crt"), "crt")
	writeFile(t, filepath.Join(p.PKI(), "apiserver-etcd-client.key"), "key")
	if manifest != "" {
		writeFile(t, p.ManifestPath("kube-apiserver"), manifest)
	}
	return p.Dir
}

// writeClusterJSON writes the cluster.json of a new cluster (NewConfig
// placed on the first node subnet, 10.250.0.0/24, changed by edit) as
// `devk up` does.
func writeClusterJSON(t *testing.T, home, name string, edit func(*layout.Config)) layout.ClusterFiles {
	t.Helper()
	p := layout.HomeFiles(home).Cluster(name)
	cfg := layout.NewConfig(name)
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	data, err := layout.EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p.ConfigFile(), string(data))
	return p
}

const apiserverManifest = `apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - name: kube-apiserver
    command:
    - kube-apiserver
    - --advertise-address=127.0.0.1
    - --etcd-cafile=/host/pki/etcd/ca.crt
    - --etcd-servers=https://127.0.0.1:22379
    - --etcd-prefix=/kubernetes.io
`

func TestResolve(t *testing.T) {
	home := t.TempDir()
	devkDir := fakeCluster(t, home, "devk", "", nil)
	otherDir := fakeCluster(t, home, "other", apiserverManifest, nil)
	jsonDir := fakeCluster(t, home, "ports", "", func(c *layout.Config) {
		_, subnet, _ := net.ParseCIDR("10.250.9.0/24")
		if err := c.PlaceAt(subnet, nil, nil); err != nil {
			t.Fatal(err)
		}
		c.Ports.EtcdClient = 12379
	})
	brokenDir := filepath.Join(home, "clusters", "broken")
	writeFile(t, filepath.Join(brokenDir, "cluster.json"), `{"name":"broken"}`)
	kubeadm := t.TempDir()
	writeFile(t, filepath.Join(kubeadm, "pki", "etcd", "ca.crt"), "ca")
	emptyHome, emptyKubeadm := t.TempDir(), t.TempDir()

	pki := func(dir string) (string, string, string) {
		return filepath.Join(dir, "pki", "etcd", "ca.crt"), filepath.Join(dir, "pki", "apiserver-etcd-client.crt"), filepath.Join(dir, "pki", "apiserver-etcd-client.key")
	}
	devkCA, devkCert, devkKey := pki(devkDir)
	_, otherCert, otherKey := pki(otherDir)
	jsonCA, jsonCert, jsonKey := pki(jsonDir)
	kCA, kCert, kKey := pki(kubeadm)

	tests := []struct {
		name string
		o    ConnOptions
		env  map[string]string
		// home is $DEVK_HOME
		home    string
		want    Endpoint
		source  string
		wantErr string
		// noCluster: the error is layout's (errors.Is ErrNoCluster)
		noCluster bool
	}{
		{
			name:   "default devk cluster",
			o:      ConnOptions{Home: home, KubeadmDir: kubeadm},
			want:   Endpoint{Endpoints: []string{"https://10.250.0.2:2379"}, CACert: devkCA, Cert: devkCert, Key: devkKey, Prefix: "/registry"},
			source: `devk cluster "devk"`,
		},
		{
			name:   "DEVK_HOME from the environment",
			o:      ConnOptions{KubeadmDir: kubeadm},
			home:   home,
			want:   Endpoint{Endpoints: []string{"https://10.250.0.2:2379"}, CACert: devkCA, Cert: devkCert, Key: devkKey, Prefix: "/registry"},
			source: `devk cluster "devk"`,
		},
		{
			name:   "named cluster reads the apiserver manifest",
			o:      ConnOptions{Home: home, Cluster: "other", ClusterSet: true},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:22379"}, CACert: "/host/pki/etcd/ca.crt", Cert: otherCert, Key: otherKey, Prefix: "/kubernetes.io"},
			source: `devk cluster "other"`,
		},
		{
			name:   "cluster.json ports",
			o:      ConnOptions{Home: home, Cluster: "ports", ClusterSet: true},
			want:   Endpoint{Endpoints: []string{"https://10.250.9.2:12379"}, CACert: jsonCA, Cert: jsonCert, Key: jsonKey, Prefix: "/registry"},
			source: `devk cluster "ports"`,
		},
		{
			name:      "named cluster missing",
			o:         ConnOptions{Home: home, Cluster: "nope", ClusterSet: true, KubeadmDir: kubeadm},
			wantErr:   `no devk cluster "nope" in ` + home + " (there are: broken, devk, other, ports; pick one with --cluster): start it with `devk up --name nope`, or pass --endpoints",
			noCluster: true,
		},
		{
			name:    "named cluster whose cluster.json is not devk's",
			o:       ConnOptions{Home: home, Cluster: "broken", ClusterSet: true, KubeadmDir: kubeadm},
			wantErr: `devk cluster "broken": ` + filepath.Join(brokenDir, "cluster.json") + ": bridge is",
		},
		{
			name:   "kubeadm node when no devk cluster",
			o:      ConnOptions{Home: emptyHome, KubeadmDir: kubeadm},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: kCA, Cert: kCert, Key: kKey, Prefix: "/registry"},
			source: "kubeadm node",
		},
		{
			name: "nothing found",
			o:    ConnOptions{Home: emptyHome, KubeadmDir: emptyKubeadm},
			wantErr: `no etcd to talk to: no devk cluster "devk" in ` + emptyHome + " (there are none) and no kubeadm node (" +
				filepath.Join(emptyKubeadm, "pki", "etcd", "ca.crt") + " is missing); start a cluster with `devk up`, or pass --endpoints",
			noCluster: true,
		},
		{
			name:   "plain http endpoint needs no PKI",
			o:      ConnOptions{Endpoints: []string{"http://127.0.0.1:3379"}, Home: emptyHome, KubeadmDir: emptyKubeadm},
			want:   Endpoint{Endpoints: []string{"http://127.0.0.1:3379"}, Prefix: "/registry"},
			source: "flags",
		},
		{
			name:   "endpoint without scheme is http",
			o:      ConnOptions{Endpoints: []string{"127.0.0.1:3379"}, Home: emptyHome, KubeadmDir: emptyKubeadm},
			want:   Endpoint{Endpoints: []string{"http://127.0.0.1:3379"}, Prefix: "/registry"},
			source: "flags",
		},
		{
			name:   "https endpoint flag takes the cluster's certificates",
			o:      ConnOptions{Endpoints: []string{"https://127.0.0.1:4379"}, Home: home, KubeadmDir: kubeadm},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:4379"}, CACert: devkCA, Cert: devkCert, Key: devkKey, Prefix: "/registry"},
			source: `flags and devk cluster "devk"`,
		},
		{
			name:   "a certificate flag is not paired with the cluster's key",
			o:      ConnOptions{Endpoints: []string{"https://127.0.0.1:4379"}, Cert: "/f/c.crt", Home: home, KubeadmDir: kubeadm},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:4379"}, CACert: devkCA, Cert: "/f/c.crt", Prefix: "/registry"},
			source: `flags and devk cluster "devk"`,
		},
		{
			name: "ETCDCTL variables override discovery",
			o:    ConnOptions{Home: home, KubeadmDir: kubeadm},
			env: map[string]string{"ETCDCTL_ENDPOINTS": "https://10.0.0.1:2379, https://10.0.0.2:2379",
				"ETCDCTL_CACERT": "/e/ca.crt", "ETCDCTL_CERT": "/e/c.crt", "ETCDCTL_KEY": "/e/c.key"},
			want:   Endpoint{Endpoints: []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379"}, CACert: "/e/ca.crt", Cert: "/e/c.crt", Key: "/e/c.key", Prefix: "/registry"},
			source: "ETCDCTL_*",
		},
		{
			name:   "flags override ETCDCTL variables",
			o:      ConnOptions{Endpoints: []string{"https://127.0.0.1:5379"}, CACert: "/f/ca.crt", Cert: "/f/c.crt", Key: "/f/c.key", Home: home},
			env:    map[string]string{"ETCDCTL_ENDPOINTS": "https://10.0.0.1:2379", "ETCDCTL_CACERT": "/e/ca.crt"},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:5379"}, CACert: "/f/ca.crt", Cert: "/f/c.crt", Key: "/f/c.key", Prefix: "/registry"},
			source: "flags",
		},
		{
			name:   "prefix flag wins over the manifest",
			o:      ConnOptions{Home: home, Cluster: "other", ClusterSet: true, Prefix: "/custom"},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:22379"}, CACert: "/host/pki/etcd/ca.crt", Cert: otherCert, Key: otherKey, Prefix: "/custom"},
			source: `devk cluster "other"`,
		},
		{
			name:    "bad endpoint",
			o:       ConnOptions{Endpoints: []string{"ftp://x"}},
			wantErr: "use a client URL",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DEVK_HOME", tc.home)
			tc.o.Getenv = func(k string) string { return tc.env[k] }
			got, err := tc.o.Resolve()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if errors.Is(err, layout.ErrNoCluster) != tc.noCluster {
					t.Fatalf("errors.Is(%v, layout.ErrNoCluster) = %v, want %v", err, !tc.noCluster, tc.noCluster)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got.Source, tc.source) {
				t.Errorf("source = %q, want it to start with %q", got.Source, tc.source)
			}
			got.Source = ""
			if strings.Join(got.Endpoints, ",") != strings.Join(tc.want.Endpoints, ",") || got.CACert != tc.want.CACert ||
				got.Cert != tc.want.Cert || got.Key != tc.want.Key || got.Prefix != tc.want.Prefix {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
