package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"
)

// nodeSysctls are set inside each node's namespace (they are per
// namespace, so the host's stay as they are): the node forwards between
// its pods' bridge and its veth, and bridged pod traffic passes the
// node's iptables, where kube-proxy's rules are.
var nodeSysctls = []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"}

// daemonEnv is what the daemons devk runs for the cluster's nodes
// (containerd, the kubelet) get on top of devk's own environment: when
// a proxy is set (`sudo -E` keeps HTTPS_PROXY), NO_PROXY with the
// cluster's networks and names, so that their traffic to the cluster
// goes direct (kube.NoProxyEnv).
func (c *Cluster) daemonEnv() []string {
	env := kube.NoProxyEnv(os.Environ(), c.Config.NoProxy())
	if env != nil {
		c.Reporter.Debugf("a proxy is set: the nodes' daemons get %s; devk's own clients reach this machine's networks directly", env[0])
	}
	return env
}

func ipCmd(ctx context.Context, args ...string) error {
	return execx.Run(ctx, execx.Cmd{Name: "ip", Args: args})
}

// hostRoute is one route of `ip -j route show table all`.
type hostRoute struct {
	Dst     string `json:"dst"`
	Dev     string `json:"dev"`
	Gateway string `json:"gateway"`
	// Nexthops are a multipath route's gateways.
	Nexthops []struct {
		Gateway string `json:"gateway"`
	} `json:"nexthops"`
}

// defaultRouteBits: a route to a network wider than this is a default
// route, or one split in halves (a VPN's 0.0.0.0/1 and 128.0.0.0/1): no
// private network is that wide, and a node subnet inside it takes the
// more specific route, as it does over the default route. Its gateway
// is what must stay reachable.
const defaultRouteBits = 8

// parseHostNetworks turns `ip -j -4 route show table all` into the IPv4
// networks the host routes or owns (local addresses are routes of the
// local table) and the gateways it routes through (each a /32: a node
// subnet holding one would take the traffic meant for it). Default
// routes (see defaultRouteBits) count by their gateway alone, and routes
// through ownBridge (the cluster's own, on a re-run) not at all.
func parseHostNetworks(data []byte, ownBridge string) ([]*net.IPNet, error) {
	var routes []hostRoute
	if err := json.Unmarshal(data, &routes); err != nil {
		return nil, fmt.Errorf("read the host's routes: %w", err)
	}
	var out []*net.IPNet
	add := func(dst string) {
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, n, err := net.ParseCIDR(dst); err == nil && n.IP.To4() != nil {
			out = append(out, n)
		}
	}
	for _, r := range routes {
		if ownBridge != "" && r.Dev == ownBridge {
			continue
		}
		if r.Gateway != "" {
			add(r.Gateway)
		}
		for _, h := range r.Nexthops {
			if h.Gateway != "" {
				add(h.Gateway)
			}
		}
		if r.Dst == "" || r.Dst == "default" {
			continue
		}
		if _, n, err := net.ParseCIDR(r.Dst); err == nil {
			if ones, _ := n.Mask.Size(); ones < defaultRouteBits {
				continue
			}
		}
		add(r.Dst)
	}
	return out, nil
}

// hostNetworks are the IPv4 networks the host uses (see
// parseHostNetworks).
func hostNetworks(ctx context.Context, ownBridge string) ([]*net.IPNet, error) {
	out, err := execx.Output(ctx, execx.Cmd{Name: "ip", Args: []string{"-j", "-4", "route", "show", "table", "all"}})
	if err != nil {
		return nil, err
	}
	return parseHostNetworks(out, ownBridge)
}

func linkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// runNetwork makes the host's bridge, each node's namespace and the veth
// between them, addresses and default routes, and the node's sysctls.
// Every step is skipped when already done.
func (c *Cluster) runNetwork(ctx context.Context) (phase.Outcome, error) {
	changed, err := c.wireBridge(ctx)
	if err != nil {
		return phase.Done, err
	}
	for _, n := range c.Config.ActiveNodes() { // a leaving node's namespace may be gone already
		ch, err := c.wireNode(ctx, n)
		if err != nil {
			return phase.Done, err
		}
		changed = changed || ch
	}
	cp := c.Config.FirstNode()
	nw := c.Config.Network
	if len(nw.Nodes) > 1 {
		return phase.ChangedIf(changed, "%d nodes at %s…; host %s on %s", len(nw.Nodes), cp.IP, nw.HostIP, nw.HostBridge), nil
	}
	return phase.ChangedIf(changed, "node %s at %s in netns %s; host %s on %s", cp.Name, cp.IP, cp.NetNS, nw.HostIP, nw.HostBridge), nil
}

// wireBridge makes devk's bridge on the host, with the host's address on
// it, after checking that no host route overlaps the cluster's subnet.
func (c *Cluster) wireBridge(ctx context.Context) (bool, error) {
	nw := c.Config.Network
	_, subnet, err := net.ParseCIDR(nw.Subnet)
	if err != nil {
		return false, err
	}
	taken, err := hostNetworks(ctx, nw.HostBridge)
	if err != nil {
		return false, err
	}
	for _, n := range taken {
		if layout.Overlaps(subnet, n) {
			return false, fmt.Errorf("the host routes %s, which overlaps the cluster's node subnet %s: remove that route, or `devk down --name %s` and up again (a new cluster gets a free subnet)", n, nw.Subnet, c.Config.Name)
		}
	}
	ones, _ := subnet.Mask.Size()
	changed, err := c.allowBridgeForward(ctx)
	if err != nil {
		return changed, err
	}
	if !linkExists(nw.HostBridge) {
		changed = true
		if err := ipCmd(ctx, "link", "add", nw.HostBridge, "type", "bridge"); err != nil {
			return changed, err
		}
	}
	if has, err := hasAddress(ctx, "", nw.HostBridge, nw.HostIP); err != nil {
		return changed, err
	} else if !has {
		changed = true
		if err := ipCmd(ctx, "addr", "add", nw.HostIP+"/"+strconv.Itoa(ones), "dev", nw.HostBridge); err != nil {
			return changed, err
		}
	}
	return changed, ipCmd(ctx, "link", "set", nw.HostBridge, "up")
}

// wireNode makes node n's network namespace, its veth to devk's bridge,
// its address and default route (the host's end of the bridge), and its
// sysctls; it reports whether it made the namespace or the veth.
func (c *Cluster) wireNode(ctx context.Context, n layout.NodeNet) (bool, error) {
	nw := c.Config.Network
	_, subnet, err := net.ParseCIDR(nw.Subnet)
	if err != nil {
		return false, err
	}
	ones, _ := subnet.Mask.Size()
	changed := false
	do := func(args ...string) error {
		changed = true
		return ipCmd(ctx, args...)
	}
	fresh := false
	if _, err := os.Stat(n.NetNSPath()); errors.Is(err, fs.ErrNotExist) {
		if err := do("netns", "add", n.NetNS); err != nil {
			return changed, err
		}
		fresh = true
	}
	if fresh && linkExists(n.HostVeth) {
		// Its peer was in a namespace that is gone.
		if err := do("link", "del", n.HostVeth); err != nil {
			return changed, err
		}
	}
	if !linkExists(n.HostVeth) {
		if err := do("link", "add", n.HostVeth, "type", "veth", "peer", "name", layout.NodeInterface, "netns", n.NetNS); err != nil {
			return changed, err
		}
	}
	for _, args := range [][]string{
		{"link", "set", n.HostVeth, "master", nw.HostBridge},
		{"link", "set", n.HostVeth, "up"},
		{"-n", n.NetNS, "link", "set", "lo", "up"},
		{"-n", n.NetNS, "addr", "replace", n.IP + "/" + strconv.Itoa(ones), "dev", layout.NodeInterface},
		{"-n", n.NetNS, "link", "set", layout.NodeInterface, "up"},
		{"-n", n.NetNS, "route", "replace", "default", "via", nw.HostIP},
	} {
		if err := ipCmd(ctx, args...); err != nil {
			return changed, err
		}
	}
	return changed, execx.Run(ctx, execx.Cmd{Name: "nsenter", Args: append([]string{"--net=" + n.NetNSPath(), "--", "sysctl", "-q", "-w"}, nodeSysctls...)})
}

// ipAddrInfo is one interface of `ip -j addr show`.
type ipAddrInfo struct {
	AddrInfo []struct {
		Local string `json:"local"`
	} `json:"addr_info"`
}

// hasAddress says whether dev (in netns, or the host's when empty) has ip.
func hasAddress(ctx context.Context, netns, dev, ip string) (bool, error) {
	args := []string{"-j", "addr", "show", "dev", dev}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	out, err := execx.Output(ctx, execx.Cmd{Name: "ip", Args: args})
	if err != nil {
		return false, err
	}
	var infos []ipAddrInfo
	if err := json.Unmarshal(out, &infos); err != nil {
		return false, fmt.Errorf("ip addr show dev %s: %w", dev, err)
	}
	for _, in := range infos {
		for _, a := range in.AddrInfo {
			if a.Local == ip {
				return true, nil
			}
		}
	}
	return false, nil
}

// allowBridgeForward adds the FORWARD rule that --allow-bridge-forward
// asks for, or that cluster.json records (put back if it went): recorded
// first, so that a down after a kill between the two removes it.
func (c *Cluster) allowBridgeForward(ctx context.Context) (bool, error) {
	if !c.AllowBridgeForward && !c.Config.Network.ForwardRule {
		return false, nil
	}
	if !c.Config.Network.ForwardRule {
		c.Config.Network.ForwardRule = true
		if err := c.SaveConfig(); err != nil {
			return false, err
		}
	}
	return c.forwardRule().Add(ctx)
}

// removeBridgeForward removes the FORWARD rule up added, if cluster.json
// records one, and then the record.
func (c *Cluster) removeBridgeForward(ctx context.Context) (bool, error) {
	if !c.Config.Network.ForwardRule {
		return false, nil
	}
	removed, err := c.forwardRule().Remove(ctx)
	if err != nil {
		return removed, err
	}
	c.Config.Network.ForwardRule = false
	return removed, c.SaveConfig()
}

// downNetwork kills whatever still runs in each node's namespace (a
// process there keeps it, and its veth, alive), deletes the namespace
// (its veth goes with it), removes the FORWARD rule up added, and
// deletes the host's bridge.
func (c *Cluster) downNetwork(ctx context.Context) (phase.Outcome, error) {
	var did []string
	for _, n := range c.Config.Network.Nodes {
		d, err := deleteNodeNetwork(ctx, n)
		if err != nil {
			return phase.Done, err
		}
		did = append(did, d...)
	}
	if removed, err := c.removeBridgeForward(ctx); err != nil {
		return phase.Done, err
	} else if removed {
		did = append(did, "the FORWARD rule for "+c.Config.Network.HostBridge)
	}
	// The pods' bridge is in the node's namespace: it went with it.
	if br := c.Config.Network.HostBridge; linkExists(br) {
		if err := ipCmd(ctx, "link", "del", br); err != nil {
			return phase.Done, fmt.Errorf("%w (delete it with `ip link del %s`)", err, br)
		}
		did = append(did, "bridge "+br)
	}
	if len(did) == 0 {
		return phase.Unchanged("nothing left"), nil
	}
	return phase.Changed("deleted %s", strings.Join(did, ", ")), nil
}

// deleteNodeNetwork kills whatever still runs in node n's namespace (a
// process there keeps it, and its veth, alive) and deletes the namespace
// (its veth goes with it); it says what it deleted.
func deleteNodeNetwork(ctx context.Context, n layout.NodeNet) ([]string, error) {
	var did []string
	killed := 0
	for _, pid := range mountns.ProcessesIn(n.NetNSPath(), "net") {
		if err := supervise.KillWait(ctx, pid, leftoverGrace); err != nil {
			return did, fmt.Errorf("stop process %d in netns %s: %w", pid, n.NetNS, err)
		}
		killed++
	}
	if _, err := os.Stat(n.NetNSPath()); err == nil {
		if err := ipCmd(ctx, "netns", "del", n.NetNS); err != nil {
			return did, fmt.Errorf("%w (delete it with `ip netns del %s`)", err, n.NetNS)
		}
		did = append(did, fmt.Sprintf("netns %s (%d processes stopped)", n.NetNS, killed))
	}
	// The veth goes with the namespace, a moment later; one left
	// over (its peer was moved out) is deleted here.
	if linkExists(n.HostVeth) {
		if err := ipCmd(ctx, "link", "del", n.HostVeth); err != nil && linkExists(n.HostVeth) {
			return did, err
		}
	}
	return did, nil
}
