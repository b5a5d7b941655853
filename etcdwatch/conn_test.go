package etcdwatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// fakeCluster lays out a devk cluster directory as `devk up` does.
func fakeCluster(t *testing.T, home, name string, manifest, clusterJSON string) string {
	dir := filepath.Join(home, "clusters", name)
	writeFile(t, filepath.Join(dir, "pki", "etcd", "ca.crt"), "ca")
	writeFile(t, filepath.Join(dir, "pki", "apiserver-etcd-client.crt"), "crt")
	writeFile(t, filepath.Join(dir, "pki", "apiserver-etcd-client.key"), "key")
	if manifest != "" {
		writeFile(t, filepath.Join(dir, "manifests", "kube-apiserver.yaml"), manifest)
	}
	if clusterJSON != "" {
		writeFile(t, filepath.Join(dir, "cluster.json"), clusterJSON)
	}
	return dir
}

const apiserverManifest = `apiVersion: v1
kind: Pod
spec:
  containers:
  - command:
    - kube-apiserver
    - --advertise-address=127.0.0.1
    - --etcd-cafile=/host/pki/etcd/ca.crt
    - --etcd-servers=https://127.0.0.1:22379
    - --etcd-prefix=/kubernetes.io
`

func TestResolve(t *testing.T) {
	home := t.TempDir()
	devkDir := fakeCluster(t, home, "devk", "", "")
	otherDir := fakeCluster(t, home, "other", apiserverManifest, "")
	jsonDir := fakeCluster(t, home, "ports", "", `{"advertiseIP":"127.0.0.2","ports":{"etcdClient":12379}}`)
	kubeadm := t.TempDir()
	writeFile(t, filepath.Join(kubeadm, "pki", "etcd", "ca.crt"), "ca")
	emptyHome, emptyKubeadm := t.TempDir(), t.TempDir()

	pki := func(dir string) (string, string, string) {
		return filepath.Join(dir, "pki", "etcd", "ca.crt"), filepath.Join(dir, "pki", "apiserver-etcd-client.crt"), filepath.Join(dir, "pki", "apiserver-etcd-client.key")
	}
	devkCA, devkCert, devkKey := pki(devkDir)
	otherCA, otherCert, otherKey := pki(otherDir)
	jsonCA, jsonCert, jsonKey := pki(jsonDir)
	kCA, kCert, kKey := pki(kubeadm)

	tests := []struct {
		name    string
		o       ConnOptions
		env     map[string]string
		want    Endpoint
		source  string
		wantErr string
	}{
		{
			name:   "default devk cluster",
			o:      ConnOptions{Home: home, KubeadmDir: kubeadm},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: devkCA, Cert: devkCert, Key: devkKey, Prefix: "/registry"},
			source: `devk cluster "devk"`,
		},
		{
			name:   "DEVK_HOME from the environment",
			o:      ConnOptions{KubeadmDir: kubeadm},
			env:    map[string]string{"DEVK_HOME": home},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: devkCA, Cert: devkCert, Key: devkKey, Prefix: "/registry"},
			source: `devk cluster "devk"`,
		},
		{
			name:   "named cluster reads the apiserver manifest",
			o:      ConnOptions{Home: home, Cluster: "other", ClusterSet: true},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:22379"}, CACert: otherCA, Cert: otherCert, Key: otherKey, Prefix: "/kubernetes.io"},
			source: `devk cluster "other"`,
		},
		{
			name:   "cluster.json ports",
			o:      ConnOptions{Home: home, Cluster: "ports", ClusterSet: true},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.2:12379"}, CACert: jsonCA, Cert: jsonCert, Key: jsonKey, Prefix: "/registry"},
			source: `devk cluster "ports"`,
		},
		{
			name:    "named cluster missing",
			o:       ConnOptions{Home: home, Cluster: "nope", ClusterSet: true, KubeadmDir: kubeadm},
			wantErr: `no devk cluster "nope"`,
		},
		{
			name:   "kubeadm node when no devk cluster",
			o:      ConnOptions{Home: emptyHome, KubeadmDir: kubeadm},
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:2379"}, CACert: kCA, Cert: kCert, Key: kKey, Prefix: "/registry"},
			source: "kubeadm node",
		},
		{
			name:    "nothing found",
			o:       ConnOptions{Home: emptyHome, KubeadmDir: emptyKubeadm},
			wantErr: "start a cluster with `devk up`, or pass --endpoints",
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
			want:   Endpoint{Endpoints: []string{"https://127.0.0.1:22379"}, CACert: otherCA, Cert: otherCert, Key: otherKey, Prefix: "/custom"},
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
			tc.o.Getenv = func(k string) string { return tc.env[k] }
			got, err := tc.o.Resolve()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
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
