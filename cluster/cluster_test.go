package cluster

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
)

type phaseT = phase.Phase[*Cluster]

// testCluster is a new cluster placed with no other and no host route:
// its node is 10.250.0.2, the host's bridge 10.250.0.1.
func testCluster() (layout.Config, layout.ClusterFiles) {
	cfg := layout.NewConfig("devk")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		panic(err)
	}
	return cfg, layout.HomeFiles("/home/u/.devk").Cluster("devk")
}

func TestPodSubnet(t *testing.T) {
	if sn, err := podSubnet("10.244.0.0/16"); err != nil || sn != "10.244.0.0/24" {
		t.Errorf("podSubnet = %q, %v", sn, err)
	}
	if _, err := podSubnet("fd00::/64"); err == nil {
		t.Error("IPv6 pod CIDR accepted")
	}
}

// TestKubeletArgv: node 0's kubelet runs in the node's network and
// mount namespaces, with the node's address, name and root dir.
func TestKubeletArgv(t *testing.T) {
	cfg, p := testCluster()
	c := &Cluster{Files: p, Config: cfg}
	argv := c.kubeletArgv(c.FirstNode())
	if want := []string{"nsenter", "--net=/run/netns/devk-devk-control-plane", "--mount=/home/u/.devk/clusters/devk/mntns/mnt", "--", p.FirstNode().KubeletBinary()}; !slices.Equal(argv[:5], want) {
		t.Errorf("the kubelet does not run in the node's network and mount namespaces: %v", argv)
	}
	for _, f := range []string{"--node-ip=10.250.0.2", "--hostname-override=devk-control-plane", "--root-dir=/home/u/.devk/clusters/devk/kubelet"} {
		if !slices.Contains(argv, f) {
			t.Errorf("kubelet argv lacks %s: %v", f, argv)
		}
	}
}

func TestConfigAddresses(t *testing.T) {
	cfg := layout.NewConfig("dev2")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	ip, err := cfg.ServiceIP()
	if err != nil || ip.String() != "10.96.0.1" {
		t.Errorf("ServiceIP = %v, %v", ip, err)
	}
	if cfg.DNSIP() != "10.96.0.10" || cfg.APIServerURL() != "https://10.250.0.2:6443" || cfg.FirstNode().Name != "dev2-control-plane" {
		t.Errorf("config %+v", cfg)
	}
	if b := layout.BridgeName("a-very-long-cluster-name"); len(b) > 15 {
		t.Errorf("bridge name %q is longer than an interface name may be", b)
	}
	for _, bad := range []string{"", "Dev", "-x", "x/y", "a..b", strings.Repeat("a", 40)} {
		if layout.ValidateName(bad) == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	for _, good := range []string{"devk", "dev2", "my-cluster"} {
		if err := layout.ValidateName(good); err != nil {
			t.Errorf("name %q refused: %v", good, err)
		}
	}
}

func TestCgroupSupport(t *testing.T) {
	tests := []struct {
		name    string
		cgroup  int
		version string
		ok      bool
	}{
		{"v1 machine, 1.34", 1, "v1.34.4", true},
		{"v1 machine, 1.35 with failCgroupV1 false", 1, "v1.35.4", true},
		{"v2 machine, 1.34", 2, "v1.34.4", true},
		{"v2 machine, 1.24 refused", 2, "v1.24.17", false},
		{"v1 machine, ancient refused", 1, "v1.18.0", false},
		{"unknown version let through", 1, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CgroupSupport(tt.cgroup, tt.version)
			if (err == nil) != tt.ok {
				t.Errorf("CgroupSupport(%d, %q) = %v, want ok=%v", tt.cgroup, tt.version, err, tt.ok)
			}
		})
	}
}

func TestParseProcNetTCP(t *testing.T) {
	const data = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:192B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41235 1 0000000000000000 100 0 0 10 0
   2: 0100007F:192B 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 41236 1 0000000000000000 100 0 0 10 0
`
	if got := parseProcNetTCP(data, 5000, nil); !slices.Equal(got, []string{"41234"}) {
		t.Errorf("port 5000: %v", got)
	}
	if got := parseProcNetTCP(data, 6443, net.ParseIP("127.0.0.1")); !slices.Equal(got, []string{"41235"}) {
		t.Errorf("port 6443 (an established connection is not a listener): %v", got)
	}
	if got := parseProcNetTCP(data, 6443, net.ParseIP("127.0.0.2")); len(got) != 0 {
		t.Errorf("a listener on 127.0.0.1 collides with one on 127.0.0.2: %v", got)
	}
	if got := parseProcNetTCP(data, 2379, nil); len(got) != 0 {
		t.Errorf("port 2379: %v", got)
	}
	const wild = `  sl  local_address rem_address   st
   0: 00000000:192B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1
`
	if got := parseProcNetTCP(wild, 6443, net.ParseIP("127.0.0.2")); !slices.Equal(got, []string{"5"}) {
		t.Errorf("a wildcard listener must collide with every address: %v", got)
	}
	if ip := procNetIP("0100007F"); !ip.Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("procNetIP = %v", ip)
	}
	if ip := procNetIP("00000000000000000000000001000000"); !ip.Equal(net.IPv6loopback) {
		t.Errorf("procNetIP v6 = %v", ip)
	}
}

func TestPreflightPieces(t *testing.T) {
	if SwapOn("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n") {
		t.Error("no swap reported as on")
	}
	if !SwapOn("Filename\tType\tSize\tUsed\tPriority\n/swapfile file 1024 0 -2\n") {
		t.Error("swap reported as off")
	}
	missing := func(string) (string, error) { return "", os.ErrNotExist }
	probs := binaryProblems(missing, t.TempDir())
	if len(probs) != 11 {
		t.Errorf("%d problems, want 11 (3 runtime programs, 4 CNI plugins, ip, nsenter, sysctl, iptables): %v", len(probs), probs)
	}
	for _, p := range probs {
		if !strings.Contains(p.Fix, "apt-get install -y containerd runc containernetworking-plugins") && !strings.Contains(p.What, "network namespace") {
			t.Errorf("fix %q does not give the apt-get line", p.Fix)
		}
	}
	e := &PreflightError{Problems: []Problem{portProblem(Listener{Port: 6443, PID: 42, Command: "kube-apiserver --x", Cluster: "devk"}, "kube-apiserver")}}
	if msg := e.Error(); !strings.Contains(msg, "port 6443") || !strings.Contains(msg, "pid 42 (kube-apiserver --x)") || !strings.Contains(msg, "devk down --name devk") {
		t.Errorf("port problem %q does not name the port and the process", msg)
	}
}

func TestIsShimOf(t *testing.T) {
	sock := "/root/.devk/clusters/devk/run/containerd.sock"
	if !isShimOf([]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", sock}, sock) {
		t.Error("our shim not recognised")
	}
	if isShimOf([]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", "/run/containerd/containerd.sock"}, sock) {
		t.Error("the system containerd's shim taken for ours")
	}
	if isShimOf([]string{"/bin/sleep", "-address", sock}, sock) {
		t.Error("a non-shim taken for a shim")
	}
}

func TestPhaseTree(t *testing.T) {
	var paths []string
	var walk func(prefix string, ps []*phaseT)
	walk = func(prefix string, ps []*phaseT) {
		for _, p := range ps {
			path := p.Name
			if prefix != "" {
				path = prefix + "/" + p.Name
			}
			paths = append(paths, path)
			walk(path, p.Children)
		}
	}
	walk("", UpPhases())
	for _, want := range []string{"preflight", "runtime", "registry", "images", "certs/ca", "certs/apiserver",
		"certs/apiserver-kubelet-client", "certs/front-proxy-ca", "certs/front-proxy-client", "certs/etcd/ca",
		"certs/etcd/server", "certs/etcd/peer", "certs/etcd/healthcheck-client", "certs/apiserver-etcd-client",
		"certs/controller-manager-server", "certs/scheduler-server", "certs/sa",
		"kubeconfig/admin", "kubeconfig/super-admin", "kubeconfig/controller-manager", "kubeconfig/scheduler", "kubeconfig/kubelet",
		"etcd", "control-plane/apiserver", "control-plane/controller-manager", "control-plane/scheduler",
		"kubelet-start", "wait-control-plane", "upload-config", "mark-control-plane", "bootstrap-token", "kubelet-finalize", "kubeconfig-merge"} {
		if !slices.Contains(paths, want) {
			t.Errorf("up has no phase %s (it has %v)", want, paths)
		}
	}
}

// TestLoopbackRegistriesFollowTheFlag: on a new cluster the runtime
// phase (containerd's mirrors) runs before the registry phase records
// --registry in the config, so the flag must win already then.
func TestLoopbackRegistriesFollowTheFlag(t *testing.T) {
	c := &Cluster{Options: Options{Registry: "127.0.0.1:5055"}}
	c.Config.Registry = layout.DefaultRegistry
	if got := c.loopbackRegistries(); !slices.Equal(got, []string{"127.0.0.1:5055"}) {
		t.Fatalf("loopback registries %v with --registry 127.0.0.1:5055, want it alone", got)
	}
	c.Registry = ""
	if got := c.loopbackRegistries(); !slices.Equal(got, []string{layout.DefaultRegistry}) {
		t.Fatalf("loopback registries %v without --registry, want the config's", got)
	}
}
