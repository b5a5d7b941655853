package kubeadmconfig

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/internal/layout"
)

const (
	testToken = "abcdef.0123456789abcdef"
	testKey   = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testHash  = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// testInput is a one-control-plane cluster's input, with a spec that
// sets gates, runtime config and each component's extraArgs.
func testInput() Input {
	return Input{
		ClusterName:          "dev",
		KubernetesVersion:    "v1.35.0-alpha.1.123+0123456789abcd",
		ImageRepository:      "127.0.0.1:5000/devk",
		ControlPlaneEndpoint: "10.250.0.2:6443",
		PodSubnet:            "10.244.0.0/16",
		ServiceSubnet:        "10.96.0.0/16",
		DNSDomain:            "cluster.local",
		Token:                testToken,
		CertificateKey:       testKey,
		CACertHashes:         []string{testHash},
		// devk's own defaults: the spec's extraArgs win over them.
		Defaults: map[string]map[string]string{
			config.ControllerManager: {"leader-elect": "false", "controllers": "*,bootstrapsigner"},
			config.Scheduler:         {"leader-elect": "false"},
		},
		Spec: layout.Spec{
			Bootstrapper:      layout.BootstrapperKubeadm,
			FeatureGates:      map[string]bool{"ComponentFlagz": true},
			RuntimeConfig:     map[string]string{"api/alpha": "false"},
			EmulatedVersion:   "1.33",
			APIServer:         layout.Component{ExtraArgs: map[string]string{"v": "4"}, FeatureGates: map[string]bool{"ComponentStatusz": true}},
			ControllerManager: layout.Component{ExtraArgs: map[string]string{"controllers": "*"}},
			Kubelet:           layout.Component{ExtraArgs: map[string]string{"max-pods": "50"}, FeatureGates: map[string]bool{"KubeletTracing": false}},
		},
	}
}

var (
	cp0    = Node{Name: "dev-control-plane", IP: "10.250.0.2", ControlPlane: true, CRISocket: "/home/u/.devk/clusters/dev/run/containerd.sock", CgroupRoot: "/devk-dev"}
	cp1    = Node{Name: "dev-control-plane2", IP: "10.250.0.4", ControlPlane: true, CRISocket: "/home/u/.devk/clusters/dev/nodes/dev-control-plane2/run/containerd.sock"}
	worker = Node{Name: "dev-worker", IP: "10.250.0.3", CRISocket: "/home/u/.devk/clusters/dev/nodes/dev-worker/run/containerd.sock", CgroupRoot: "/devk-dev_dev-worker"}
)

// parse reads a config back: its documents, each required to have an
// apiVersion and kind.
func parse(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	for _, part := range strings.Split(string(data), "\n"+documentSeparator) {
		var m map[string]any
		if err := yaml.UnmarshalStrict([]byte(part), &m); err != nil {
			t.Fatalf("a document is not YAML: %v\n%s", err, part)
		}
		if m["apiVersion"] == nil || m["kind"] == nil {
			t.Fatalf("a document has no apiVersion or kind:\n%s", part)
		}
		docs = append(docs, m)
	}
	return docs
}

// kindOf is the document of kind in docs.
func kindOf(t *testing.T, docs []map[string]any, kind string) map[string]any {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == kind {
			return d
		}
	}
	t.Fatalf("no %s among the documents", kind)
	return nil
}

// at is the value at a dotted path of doc.
func at(doc map[string]any, path string) any {
	var v any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// argList is a v1beta4 extraArgs list as name=value strings, in order.
func argList(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	if v != nil && !ok {
		t.Fatalf("extraArgs are %T, not v1beta4's list: %v", v, v)
	}
	var out []string
	for _, item := range list {
		m := item.(map[string]any)
		out = append(out, m["name"].(string)+"="+m["value"].(string))
	}
	return out
}

func TestInitAndJoin(t *testing.T) {
	ha := testInput()
	ha.ControlPlaneEndpoint = "10.250.0.1:6443"
	ha.CertSANs = []string{"10.250.0.1", "10.250.0.4"}
	noTaint := testInput()
	noTaint.RemoveControlPlaneTaint = true
	off := testInput()
	off.Token, off.CertificateKey = "", ""
	off.APIServerPort = 7443
	off.Spec.Addons = layout.Addons{KubeProxy: new(bool), CoreDNS: new(bool)}
	off.Spec.CertValidity = &metav1.Duration{Duration: time.Hour}
	off.IgnorePreflightErrors = []string{"Swap", "SystemVerification"}
	// A hand-edited cluster.json's flag devk owns is dropped.
	off.Spec.APIServer.ExtraArgs = map[string]string{"etcd-servers": "https://x:2379"}

	for _, tc := range []struct {
		name  string
		in    Input
		node  Node
		join  bool
		kinds []string
		want  map[string]map[string]any // kind → dotted path → value
		args  map[string]map[string][]string
	}{
		{
			name: "init on one control plane", in: testInput(), node: cp0,
			kinds: []string{InitConfigurationKind, ClusterConfigurationKind, "KubeletConfiguration", "KubeProxyConfiguration"},
			want: map[string]map[string]any{
				InitConfigurationKind: {
					"apiVersion": APIVersion, "nodeRegistration.name": cp0.Name, "nodeRegistration.criSocket": "unix://" + cp0.CRISocket,
					"localAPIEndpoint.advertiseAddress": cp0.IP, "localAPIEndpoint.bindPort": float64(6443),
					"certificateKey": testKey, "nodeRegistration.taints": nil, "nodeRegistration.imagePullSerial": false,
					"bootstrapTokens": []any{map[string]any{"token": testToken, "ttl": "24h0m0s"}},
				},
				ClusterConfigurationKind: {
					"apiVersion": APIVersion, "clusterName": "dev", "kubernetesVersion": "v1.35.0-alpha.1.123+0123456789abcd",
					"imageRepository": "127.0.0.1:5000/devk", "controlPlaneEndpoint": "10.250.0.2:6443",
					"networking.podSubnet": "10.244.0.0/16", "networking.serviceSubnet": "10.96.0.0/16", "networking.dnsDomain": "cluster.local",
					"apiServer.certSANs": []any{"10.250.0.2", "127.0.0.1"}, "etcd.local.dataDir": "/var/lib/etcd",
					"dns": nil, "proxy": nil, "featureGates": nil, "certificateValidityPeriod": nil, "encryptionAlgorithm": "ECDSA-P256",
				},
				"KubeletConfiguration": {
					"apiVersion": "kubelet.config.k8s.io/v1beta1", "cgroupDriver": "cgroupfs", "failSwapOn": false, "failCgroupV1": false,
					"featureGates":  map[string]any{"ComponentFlagz": true, "KubeletTracing": false},
					"staticPodPath": nil, "cgroupRoot": nil, "address": nil,
				},
				"KubeProxyConfiguration": {
					"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "clusterCIDR": "10.244.0.0/16", "mode": "iptables",
					"conntrack.maxPerCore": float64(0), "conntrack.min": float64(0), "conntrack.tcpEstablishedTimeout": "0s",
					"featureGates": map[string]any{"ComponentFlagz": true}, "bindAddress": nil, "clientConnection": nil,
				},
			},
			args: map[string]map[string][]string{
				InitConfigurationKind: {"nodeRegistration.kubeletExtraArgs": {"cgroup-root=/devk-dev", "max-pods=50", "node-ip=10.250.0.2"}},
				ClusterConfigurationKind: {
					"apiServer.extraArgs":         {"emulated-version=1.33", "feature-gates=ComponentFlagz=true,ComponentStatusz=true", "runtime-config=api/alpha=false", "v=4"},
					"controllerManager.extraArgs": {"controllers=*", "emulated-version=1.33", "feature-gates=ComponentFlagz=true", "leader-elect=false"},
					"scheduler.extraArgs":         {"emulated-version=1.33", "feature-gates=ComponentFlagz=true", "leader-elect=false"},
				},
			},
		},
		{
			name: "init behind HAProxy", in: ha, node: cp0,
			kinds: []string{InitConfigurationKind, ClusterConfigurationKind, "KubeletConfiguration", "KubeProxyConfiguration"},
			want: map[string]map[string]any{
				InitConfigurationKind:    {"localAPIEndpoint.advertiseAddress": cp0.IP},
				ClusterConfigurationKind: {"controlPlaneEndpoint": "10.250.0.1:6443", "apiServer.certSANs": []any{"10.250.0.1", "10.250.0.2", "10.250.0.4", "127.0.0.1"}},
			},
		},
		{
			name: "a control plane joins behind HAProxy", in: ha, node: cp1, join: true, kinds: []string{JoinConfigurationKind},
			want: map[string]map[string]any{JoinConfigurationKind: {
				"apiVersion": APIVersion, "nodeRegistration.name": cp1.Name, "nodeRegistration.criSocket": "unix://" + cp1.CRISocket,
				"discovery.bootstrapToken.apiServerEndpoint": "10.250.0.1:6443", "discovery.bootstrapToken.token": testToken,
				"discovery.bootstrapToken.caCertHashes":          []any{testHash},
				"controlPlane.localAPIEndpoint.advertiseAddress": cp1.IP, "controlPlane.localAPIEndpoint.bindPort": float64(6443),
				"controlPlane.certificateKey": testKey,
			}},
			args: map[string]map[string][]string{JoinConfigurationKind: {"nodeRegistration.kubeletExtraArgs": {"max-pods=50", "node-ip=10.250.0.4"}}},
		},
		{
			name: "a worker joins", in: testInput(), node: worker, join: true, kinds: []string{JoinConfigurationKind},
			want: map[string]map[string]any{JoinConfigurationKind: {
				"controlPlane": nil, "nodeRegistration.taints": nil, "discovery.bootstrapToken.apiServerEndpoint": "10.250.0.2:6443",
			}},
			args: map[string]map[string][]string{JoinConfigurationKind: {"nodeRegistration.kubeletExtraArgs": {"cgroup-root=/devk-dev_dev-worker", "max-pods=50", "node-ip=10.250.0.3"}}},
		},
		{
			name: "no control-plane taint", in: noTaint, node: cp0,
			kinds: []string{InitConfigurationKind, ClusterConfigurationKind, "KubeletConfiguration", "KubeProxyConfiguration"},
			want:  map[string]map[string]any{InitConfigurationKind: {"nodeRegistration.taints": []any{}}},
		},
		{
			name: "a control plane joins untainted", in: noTaint, node: cp1, join: true, kinds: []string{JoinConfigurationKind},
			want: map[string]map[string]any{JoinConfigurationKind: {"nodeRegistration.taints": []any{}}},
		},
		{
			name: "a worker has no taint to remove", in: noTaint, node: worker, join: true, kinds: []string{JoinConfigurationKind},
			want: map[string]map[string]any{JoinConfigurationKind: {"nodeRegistration.taints": nil}},
		},
		{
			name: "addons off, no token, another port, short certificates", in: off, node: cp0,
			kinds: []string{InitConfigurationKind, ClusterConfigurationKind, "KubeletConfiguration", "KubeProxyConfiguration"},
			want: map[string]map[string]any{
				InitConfigurationKind: {"bootstrapTokens": nil, "certificateKey": nil, "localAPIEndpoint.bindPort": float64(7443),
					"nodeRegistration.ignorePreflightErrors": []any{"Swap", "SystemVerification"}},
				ClusterConfigurationKind: {"dns.disabled": true, "proxy.disabled": true, "certificateValidityPeriod": "1h0m0s"},
			},
			args: map[string]map[string][]string{ClusterConfigurationKind: {
				"apiServer.extraArgs": {"emulated-version=1.33", "feature-gates=ComponentFlagz=true,ComponentStatusz=true", "runtime-config=api/alpha=false"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			render := Init
			if tc.join {
				render = Join
			}
			out, err := render(tc.in, tc.node)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := render(tc.in, tc.node)
			if string(again) != string(out) {
				t.Errorf("two renders differ:\n%s\n%s", out, again)
			}
			docs := parse(t, out)
			var kinds []string
			for _, d := range docs {
				kinds = append(kinds, d["kind"].(string))
			}
			if !reflect.DeepEqual(kinds, tc.kinds) {
				t.Fatalf("documents %v, want %v", kinds, tc.kinds)
			}
			for kind, fields := range tc.want {
				doc := kindOf(t, docs, kind)
				for path, want := range fields {
					if got := at(doc, path); !reflect.DeepEqual(got, want) {
						t.Errorf("%s %s = %#v, want %#v", kind, path, got, want)
					}
				}
			}
			for kind, lists := range tc.args {
				doc := kindOf(t, docs, kind)
				for path, want := range lists {
					if got := argList(t, at(doc, path)); !reflect.DeepEqual(got, want) {
						t.Errorf("%s %s = %v, want %v", kind, path, got, want)
					}
				}
			}
		})
	}
}

// TestBadInput: input kubeadm would refuse, or that names no cluster or
// node, is refused with what to give.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Input, *Node)
		join   bool
		want   string
	}{
		{"a worker inits", func(_ *Input, n *Node) { *n = worker }, false, "kubeadm init makes a control-plane node, and node dev-worker is a worker"},
		{"no endpoint", func(in *Input, _ *Node) { in.ControlPlaneEndpoint = "10.250.0.2" }, false, `the control-plane endpoint "10.250.0.2" is not host:port`},
		{"an endpoint's port", func(in *Input, _ *Node) { in.ControlPlaneEndpoint = "10.250.0.2:0" }, true, "is not host:port"},
		{"a node's address", func(_ *Input, n *Node) { n.IP = "fd00::2" }, false, `node dev-control-plane's address "fd00::2" is not an IPv4 address`},
		{"a node's name", func(_ *Input, n *Node) { n.Name = "Dev_1" }, false, "the node's name"},
		{"a relative socket", func(_ *Input, n *Node) { n.CRISocket = "run/containerd.sock" }, false, "is not an absolute path"},
		{"a bad token", func(in *Input, _ *Node) { in.Token = "abc.def" }, false, `the bootstrap token "abc.def" is not one`},
		{"a join without a token", func(in *Input, _ *Node) { in.Token = "" }, true, `the bootstrap token "" is not one`},
		{"a join without a CA hash", func(in *Input, _ *Node) { in.CACertHashes = nil }, true, "a join needs the cluster CA's hash"},
		{"a bad CA hash", func(in *Input, _ *Node) { in.CACertHashes = []string{"sha256:abc"} }, true, `the CA hash "sha256:abc" is not sha256:<64 hex digits>`},
		{"a bad certificate key", func(in *Input, _ *Node) { in.CertificateKey = "secret" }, false, "the certificate key is not 64 hex digits"},
		{"a version", func(in *Input, _ *Node) { in.KubernetesVersion = "1.34" }, false, `the Kubernetes version "1.34" is not one kubeadm takes`},
		{"a pod subnet", func(in *Input, _ *Node) { in.PodSubnet = "" }, false, `the pod subnet "" is not a CIDR`},
		{"a port", func(in *Input, _ *Node) { in.APIServerPort = 70000 }, false, "the API server's port 70000 is not a port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, n := testInput(), cp0
			tc.change(&in, &n)
			render := Init
			if tc.join {
				render = Join
			}
			_, err := render(in, n)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestForClusterStableAsNodesJoin: node 0's config does not change as
// control-plane nodes join (it was used at init; up again must find it
// unchanged): the certificates' extra names are HAProxy's address alone.
func TestForClusterStableAsNodesJoin(t *testing.T) {
	cfg := layout.NewConfig("kha")
	cfg.Network.HostIP = "10.250.0.1"
	cfg.ControlPlaneEndpoint = "10.250.0.1:6443"
	cfg.Network.Nodes = []layout.NodeNet{{Name: "kha-control-plane", IP: "10.250.0.2", Role: layout.RoleControlPlane}}
	first := ForCluster(cfg)
	cfg.Network.Nodes = append(cfg.Network.Nodes, layout.NodeNet{Name: "kha-control-plane2", IP: "10.250.0.3", Role: layout.RoleControlPlane})
	if later := ForCluster(cfg); !reflect.DeepEqual(first, later) {
		t.Errorf("node 0's kubeadm input changed when a control plane joined:\n%+v\n%+v", first, later)
	}
	if !reflect.DeepEqual(first.CertSANs, []string{"10.250.0.1"}) {
		t.Errorf("CertSANs = %v, want HAProxy's address", first.CertSANs)
	}
	// devk's own control plane's tuning: several control planes elect
	// a leader, one does not.
	if got := first.Defaults[config.ControllerManager]["leader-elect"]; got != "true" {
		t.Errorf("leader-elect behind HAProxy = %q, want true", got)
	}
	cfg.ControlPlaneEndpoint = ""
	if got := ForCluster(cfg).Defaults[config.Scheduler]["leader-elect"]; got != "false" {
		t.Errorf("leader-elect with one control plane = %q, want false", got)
	}
}
