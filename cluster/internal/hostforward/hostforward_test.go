package hostforward

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/testutil"
)

// TestForwardDrops: what the host's sysctl and FORWARD chain say about
// traffic between two ports of devk's bridge, as read.
func TestForwardDrops(t *testing.T) {
	const br = "dkb-devk"
	docker := `-P FORWARD DROP
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -o docker0 -j DOCKER
-A FORWARD -i docker0 ! -o docker0 -j ACCEPT
-A FORWARD -i docker0 -o docker0 -j ACCEPT
`
	devkRule := `-A FORWARD -i dkb-devk -o dkb-devk -m comment --comment "devk: cluster devk's nodes" -j ACCEPT`
	for _, tc := range []struct {
		name, nfCall, rules string
		drops               bool
		why                 string
	}{
		{"no br_netfilter", "", docker, false, ""},
		{"br_netfilter off", "0\n", docker, false, ""},
		{"docker's host", "1\n", docker, true, "FORWARD policy is DROP"},
		{"devk's rule first", "1\n", "-P FORWARD DROP\n" + devkRule + "\n" + docker[len("-P FORWARD DROP\n"):], false, ""},
		{"a rule for the bridge in one direction", "1\n", "-P FORWARD DROP\n-A FORWARD -i dkb-devk -j ACCEPT\n", false, ""},
		{"another cluster's rule", "1\n", "-P FORWARD DROP\n" + strings.ReplaceAll(devkRule, "dkb-devk", "dkb-other") + "\n", true, "policy is DROP"},
		{"accept everything", "1\n", "-P FORWARD DROP\n-A FORWARD -j ACCEPT\n", false, ""},
		{"accept policy", "1\n", "-P FORWARD ACCEPT\n", false, ""},
		{"accept policy, drop at the end", "1\n", "-P FORWARD ACCEPT\n-A FORWARD -j DOCKER-USER\n-A FORWARD -j REJECT --reject-with icmp-port-unreachable\n", true, "ends in `-A FORWARD -j REJECT"},
		{"drop the bridge", "1\n", "-P FORWARD ACCEPT\n-A FORWARD -i dkb-devk -j DROP\n", true, "has `-A FORWARD -i dkb-devk -j DROP`"},
		{"accept with conditions only", "1\n", "-P FORWARD DROP\n-A FORWARD -i dkb-devk -o dkb-devk -p tcp --dport 6443 -j ACCEPT\n", true, "policy is DROP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Drops(tc.nfCall, tc.rules, br)
			if v.Drops != tc.drops || !strings.Contains(v.Why, tc.why) {
				t.Errorf("Drops = %+v; want drops=%v, why with %q", v, tc.drops, tc.why)
			}
		})
	}
}

// TestForwardRuleInNetNS runs the real thing in network namespaces of
// the test's own (a namespace has its own iptables and bridge sysctls;
// the host's are not touched): a "host" namespace with a bridge, FORWARD
// policy DROP and br_netfilter on, and two "nodes" on the bridge. Their
// traffic is dropped and Drops says so; the rule lets it through
// and Drops agrees; removing it restores the chain as it was.
func TestForwardRuleInNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces need root: run the tests as root, as CI does")
	}
	ctx := context.Background()
	id := os.Getpid() % 100000
	host, a, b := fmt.Sprintf("devk-fwh-%d", id), fmt.Sprintf("devk-fwa-%d", id), fmt.Sprintf("devk-fwb-%d", id)
	const bridge = "dkb-fwtest"
	sh := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, ns := range []string{host, a, b} {
		sh("ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		sh("ip", "-n", ns, "link", "set", "lo", "up")
	}
	sh("ip", "-n", host, "link", "add", bridge, "type", "bridge")
	sh("ip", "-n", host, "link", "set", bridge, "up")
	for i, ns := range []string{a, b} {
		port := fmt.Sprintf("dkvfw%d", i)
		sh("ip", "-n", host, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		sh("ip", "-n", host, "link", "set", port, "master", bridge, "up")
		sh("ip", "-n", ns, "addr", "add", fmt.Sprintf("10.99.1.%d/24", i+2), "dev", "eth0")
		sh("ip", "-n", ns, "link", "set", "eth0", "up")
	}
	inHost := []string{"nsenter", "--net=" + filepath.Join("/run/netns", host)}
	sh(append(inHost, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")...)
	sh(append(inHost, "iptables", "-w", "-P", "FORWARD", "DROP")...)
	before := sh(append(inHost, "iptables", "-S", "FORWARD")...)

	l := listenInNetNS(t, filepath.Join("/run/netns", b), "10.99.1.3:0")
	testutil.CloseEach(l)
	reach := func() error {
		return testutil.DialIn(filepath.Join("/run/netns", a), l.Addr().String(), forwardDialTimeout)
	}
	verdict := func() Verdict {
		nf := sh(append(inHost, "cat", NFCallIPTables)...)
		return Drops(nf, sh(append(inHost, "iptables", "-S", "FORWARD")...), bridge)
	}

	if err := reach(); err == nil {
		t.Fatal("node a reached node b across a bridge whose FORWARD policy is DROP: the test does not test anything")
	}
	if v := verdict(); !v.Drops {
		t.Errorf("Drops = %+v on a chain that drops the traffic", v)
	}
	rule := Rule{Bridge: bridge, Cluster: "fwtest", IPTables: append(inHost, "iptables", "-w")}
	for i, want := range []bool{true, false} { // the second add finds it there
		if added, err := rule.Add(ctx); err != nil || added != want {
			t.Fatalf("add #%d = %v, %v; want %v", i+1, added, err, want)
		}
	}
	if err := reach(); err != nil {
		t.Errorf("with the rule, node a cannot reach node b: %v", err)
	}
	if v := verdict(); v.Drops {
		t.Errorf("Drops = %+v with the rule in place", v)
	}
	if rules := sh(append(inHost, "iptables", "-S", "FORWARD")...); strings.Count(rules, "-A FORWARD") != 1 {
		t.Errorf("the chain holds more than the one rule:\n%s", rules)
	}
	if removed, err := rule.Remove(ctx); err != nil || !removed {
		t.Fatalf("remove = %v, %v; want it removed", removed, err)
	}
	if after := sh(append(inHost, "iptables", "-S", "FORWARD")...); after != before {
		t.Errorf("the chain after remove:\n%s\nbefore add:\n%s", after, before)
	}
	if err := reach(); err == nil {
		t.Error("without the rule, node a still reaches node b")
	}
	if removed, err := rule.Remove(ctx); err != nil || removed {
		t.Errorf("a second remove = %v, %v; want nothing to remove", removed, err)
	}
}

func listenInNetNS(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	if err := kube.InNetNS(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// forwardDialTimeout bounds a dial the FORWARD chain may drop.
const forwardDialTimeout = time.Second
