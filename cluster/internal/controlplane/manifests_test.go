package controlplane

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/internal/layout"
)

const digestRef = "127.0.0.1:5000/kube-apiserver@sha256:2734382421542239a49db6b5d3400207e3fbb3e06603b64e2b4ae21185a234c7"

// testCluster is a new cluster placed with no other and no host route:
// its node is 10.250.0.2, the host's bridge 10.250.0.1.
func testCluster() (layout.Config, layout.NodeFiles) {
	cfg := layout.NewConfig("devk")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		panic(err)
	}
	return cfg, layout.HomeFiles("/home/u/.devk").Cluster("devk").FirstNode()
}

func parseManifest(t *testing.T, data []byte) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("manifest does not parse as a Pod: %v\n%s", err, data)
	}
	return pod
}

func TestManifests(t *testing.T) {
	cfg, p := testCluster()
	tests := []struct {
		name      string
		wantFlags []string
		wantMount []string
	}{
		{"etcd", []string{
			"--listen-client-urls=https://10.250.0.2:2379", "--listen-peer-urls=https://10.250.0.2:2380",
			"--data-dir=/home/u/.devk/clusters/devk/etcd", "--client-cert-auth=true",
			"--initial-cluster=devk-control-plane=https://10.250.0.2:2380", "--listen-metrics-urls=http://127.0.0.1:2381",
		}, []string{"/home/u/.devk/clusters/devk/etcd", "/home/u/.devk/clusters/devk/pki/etcd"}},
		{"kube-apiserver", []string{
			"--bind-address=10.250.0.2", "--advertise-address=10.250.0.2", "--secure-port=6443",
			"--etcd-servers=https://10.250.0.2:2379", "--authorization-mode=Node,RBAC", "--service-cluster-ip-range=10.96.0.0/16",
			"--service-account-key-file=/home/u/.devk/clusters/devk/pki/sa.pub", "--enable-bootstrap-token-auth=true",
			"--client-ca-file=/home/u/.devk/clusters/devk/pki/ca.crt",
		}, []string{"/home/u/.devk/clusters/devk/pki"}},
		{"kube-controller-manager", []string{
			"--kubeconfig=/home/u/.devk/clusters/devk/controller-manager.conf", "--bind-address=10.250.0.2",
			"--controllers=*,bootstrapsigner,tokencleaner", "--cluster-signing-key-file=/home/u/.devk/clusters/devk/pki/ca.key",
			"--use-service-account-credentials=true",
			"--tls-cert-file=/home/u/.devk/clusters/devk/pki/controller-manager-server.crt",
			"--tls-private-key-file=/home/u/.devk/clusters/devk/pki/controller-manager-server.key",
		}, []string{"/home/u/.devk/clusters/devk/pki", "/home/u/.devk/clusters/devk/controller-manager.conf"}},
		{"kube-scheduler", []string{
			"--kubeconfig=/home/u/.devk/clusters/devk/scheduler.conf", "--bind-address=10.250.0.2", "--secure-port=10259",
			"--tls-cert-file=/home/u/.devk/clusters/devk/pki/scheduler-server.crt",
			"--tls-private-key-file=/home/u/.devk/clusters/devk/pki/scheduler-server.key",
		}, []string{"/home/u/.devk/clusters/devk/scheduler.conf",
			"/home/u/.devk/clusters/devk/pki/scheduler-server.crt", "/home/u/.devk/clusters/devk/pki/scheduler-server.key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := Manifest(tt.name, ManifestInput{Config: cfg, Node: cfg.FirstNode(), Files: p, Image: digestRef})
			if err != nil {
				t.Fatal(err)
			}
			pod := parseManifest(t, data)
			if pod.Name != tt.name || pod.Namespace != "kube-system" || !pod.Spec.HostNetwork {
				t.Errorf("pod %s/%s hostNetwork=%v", pod.Namespace, pod.Name, pod.Spec.HostNetwork)
			}
			if pod.Spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priority class %q", pod.Spec.PriorityClassName)
			}
			ct := pod.Spec.Containers[0]
			if ct.Image != digestRef {
				t.Errorf("image %q, want the digest ref", ct.Image)
			}
			if ct.Command[0] != "/usr/local/bin/"+tt.name {
				t.Errorf("command %q", ct.Command[0])
			}
			for _, f := range tt.wantFlags {
				if !slices.Contains(ct.Command, f) {
					t.Errorf("missing flag %s in %v", f, ct.Command)
				}
			}
			for _, a := range ct.Command[1:] {
				if strings.Contains(a, "0.0.0.0") {
					t.Errorf("flag %s listens beyond loopback", a)
				}
			}
			var mounts []string
			for _, m := range ct.VolumeMounts {
				mounts = append(mounts, m.MountPath)
			}
			for _, v := range pod.Spec.Volumes {
				if v.HostPath == nil {
					t.Errorf("volume %s is not a hostPath", v.Name)
				}
			}
			for _, m := range tt.wantMount {
				if !slices.Contains(mounts, m) {
					t.Errorf("missing mount %s in %v", m, mounts)
				}
			}
			// etcd's health is on the node's loopback (plain HTTP, as
			// kubeadm's), the others' on the node address.
			wantHost := "10.250.0.2"
			if tt.name == "etcd" {
				wantHost = "127.0.0.1"
			}
			if ct.LivenessProbe == nil || ct.LivenessProbe.HTTPGet.Host != wantHost {
				t.Errorf("liveness probe %+v, want one on %s", ct.LivenessProbe, wantHost)
			}
			again, _ := Manifest(tt.name, ManifestInput{Config: cfg, Node: cfg.FirstNode(), Files: p, Image: digestRef})
			if string(again) != string(data) {
				t.Error("the same input gave different manifests (flags must be sorted)")
			}
		})
	}
	t.Run("tag refused", func(t *testing.T) {
		if _, err := Manifest("kube-apiserver", ManifestInput{Config: cfg, Node: cfg.FirstNode(), Files: p, Image: "127.0.0.1:5000/kube-apiserver:v1.34.4"}); err == nil {
			t.Error("a manifest with a tag, not a digest, was written")
		}
	})
	t.Run("unknown component", func(t *testing.T) {
		if _, err := Manifest("kube-proxy", ManifestInput{Config: cfg, Node: cfg.FirstNode(), Files: p, Image: digestRef}); err == nil {
			t.Error("kube-proxy is not a static pod of the control plane")
		}
	})
}

// TestTuning: the controller-manager's and scheduler's client rate
// limits grow by their base per scaleStep nodes, real and fake; with
// fake nodes the controller-manager's grace period covers kwok's leases.
func TestTuning(t *testing.T) {
	for _, tc := range []struct {
		fake            int
		cmQPS, schedQPS string
		grace           string
	}{
		{0, "200", "", ""},
		{200, "200", "", "1m0s"},
		{1000, "1000", "250", "4m10s"},
	} {
		cfg := layout.NewConfig("devk")
		cfg.Network.Nodes = []layout.NodeNet{{}} // the real node
		cfg.Spec.FakeNodes.Count = tc.fake
		got := Tuning(cfg)
		cm, sched := got[config.ControllerManager], got[config.Scheduler]
		if cm["kube-api-qps"] != tc.cmQPS || sched["kube-api-qps"] != tc.schedQPS || cm["node-monitor-grace-period"] != tc.grace {
			t.Errorf("%d fake nodes: controller-manager %v, scheduler %v; want qps %s and %s, grace %q", tc.fake, cm, sched, tc.cmQPS, tc.schedQPS, tc.grace)
		}
		if cm["leader-elect"] != "false" || sched["leader-elect"] != "false" {
			t.Errorf("%d fake nodes: one control plane elects a leader: %v %v", tc.fake, cm, sched)
		}
	}
}
