package preflight

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"
)

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
	probs := Binaries(missing, t.TempDir())
	if len(probs) != 11 {
		t.Errorf("%d problems, want 11 (3 runtime programs, 4 CNI plugins, ip, nsenter, sysctl, iptables): %v", len(probs), probs)
	}
	for _, p := range probs {
		if !strings.Contains(p.Fix, "apt-get install -y containerd runc containernetworking-plugins") && !strings.Contains(p.What, "network namespace") {
			t.Errorf("fix %q does not give the apt-get line", p.Fix)
		}
	}
	e := &Error{Problems: []Problem{portProblem(Listener{Port: 6443, PID: 42, Command: "kube-apiserver --x", Cluster: "devk"}, "kube-apiserver")}}
	if msg := e.Error(); !strings.Contains(msg, "port 6443") || !strings.Contains(msg, "pid 42 (kube-apiserver --x)") || !strings.Contains(msg, "devk down --name devk") {
		t.Errorf("port problem %q does not name the port and the process", msg)
	}
}

// TestJoin: a joining node's checks name a missing kubelet, the memory
// problem of a new node (not of one resumed) and a socket path too long.
func TestJoin(t *testing.T) {
	dir := t.TempDir()
	long := dir + "/" + strings.Repeat("n", maxSocketPath) + "/containerd.sock"
	in := JoinInput{Kubelet: dir + "/no-kubelet", New: true, Memory: &Problem{Check: "memory", What: "too little"}, Socket: long}
	checks := func(in JoinInput) []string {
		var out []string
		for _, p := range Join(in, func(string) (string, error) { return "/bin/true", nil }, dir) {
			out = append(out, p.Check)
		}
		return out
	}
	got := checks(in)
	for _, want := range []string{"kubelet", "memory", "paths"} {
		if !slices.Contains(got, want) {
			t.Errorf("Join = %v; want a %s problem", got, want)
		}
	}
	in.New = false
	if got := checks(in); slices.Contains(got, "memory") {
		t.Errorf("Join of a node resumed = %v; want no memory problem", got)
	}
	in.Kubelet, in.Socket = "/bin/true", dir+"/containerd.sock"
	if got := checks(in); slices.Contains(got, "kubelet") || slices.Contains(got, "paths") {
		t.Errorf("Join with a kubelet and a short socket = %v", got)
	}
}

func TestTreeNotOlder(t *testing.T) {
	for _, tc := range []struct {
		recorded, tree string
		refused        bool
	}{
		{"", "v1.34.4", false},
		{"v1.34.4", "v1.34.4-dirty", false},
		{"v1.34.4", "v1.35.4", false},
		{"v1.35.4", "v1.35.0-alpha.1", false},
		{"v1.35.4", "v1.34.4", true},
		{"v2.0.0", "v1.40.0", true},
	} {
		p := TreeNotOlder("devk", tc.recorded, tc.tree)
		if (p != nil) != tc.refused {
			t.Errorf("TreeNotOlder(%q, %q) = %v, want refused %v", tc.recorded, tc.tree, p, tc.refused)
		}
		if p != nil && !strings.Contains(p.String(), "devk upgrade --rollback") {
			t.Errorf("the refusal %q says no way out", p)
		}
	}
}

func TestEmulatedVersion(t *testing.T) {
	if p := EmulatedVersion("1.33", "v1.34.4"); p != nil {
		t.Errorf("1.33 on v1.34.4: %v", p)
	}
	if p := EmulatedVersion("", "v1.34.4"); p != nil {
		t.Errorf("none: %v", p)
	}
	if p := EmulatedVersion("1.30", "v1.34.4"); p == nil || p.Check != "emulated-version" || !strings.Contains(p.What, "emulate 1.31 to 1.34") {
		t.Errorf("1.30 on v1.34.4: %v", p)
	}
}
