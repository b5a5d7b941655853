package node

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
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/supervise"
)

// nodeSysctls are set inside each node's namespace (they are per
// namespace, so the host's stay as they are): the node forwards between
// its pods' bridge and its veth, and bridged pod traffic passes the
// node's iptables, where kube-proxy's rules are.
var nodeSysctls = []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"}

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

// HostNetworks are the IPv4 networks the host uses (see
// parseHostNetworks).
func HostNetworks(ctx context.Context, ownBridge string) ([]*net.IPNet, error) {
	out, err := execx.Output(ctx, execx.Cmd{Name: "ip", Args: []string{"-j", "-4", "route", "show", "table", "all"}})
	if err != nil {
		return nil, err
	}
	return parseHostNetworks(out, ownBridge)
}

// LinkExists says whether the host has a network link called name.
func LinkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// CheckHostRoutes refuses a cluster network nw that a host route
// overlaps (cluster names the cluster in the remedy).
func CheckHostRoutes(ctx context.Context, nw layout.Network, cluster string) error {
	_, subnet, err := net.ParseCIDR(nw.Subnet)
	if err != nil {
		return err
	}
	taken, err := HostNetworks(ctx, nw.HostBridge)
	if err != nil {
		return err
	}
	for _, n := range taken {
		if layout.Overlaps(subnet, n) {
			return fmt.Errorf("the host routes %s, which overlaps the cluster's node subnet %s: remove that route, or `devk down --name %s` and up again (a new cluster gets a free subnet)", n, nw.Subnet, cluster)
		}
	}
	return nil
}

// WireBridge makes devk's bridge on the host, with the host's address on
// it; it reports whether it made either.
func WireBridge(ctx context.Context, nw layout.Network) (bool, error) {
	_, subnet, err := net.ParseCIDR(nw.Subnet)
	if err != nil {
		return false, err
	}
	ones, _ := subnet.Mask.Size()
	changed := false
	if !LinkExists(nw.HostBridge) {
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

// DeleteBridge deletes devk's bridge br on the host, if it is there.
func DeleteBridge(ctx context.Context, br string) (bool, error) {
	if !LinkExists(br) {
		return false, nil
	}
	if err := ipCmd(ctx, "link", "del", br); err != nil {
		return false, fmt.Errorf("%w (delete it with `ip link del %s`)", err, br)
	}
	return true, nil
}

// Wire makes node n's network namespace, its veth to devk's bridge,
// its address and default route (the host's end of the bridge), and its
// sysctls; it reports whether it made the namespace or the veth.
func (nd Node) Wire(ctx context.Context) (bool, error) {
	n, nw := nd.Net, nd.Config.Network
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
	if fresh && LinkExists(n.HostVeth) {
		// Its peer was in a namespace that is gone.
		if err := do("link", "del", n.HostVeth); err != nil {
			return changed, err
		}
	}
	if !LinkExists(n.HostVeth) {
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

// DeleteNetwork kills whatever still runs in node n's namespace (a
// process there keeps it, and its veth, alive) and deletes the namespace
// (its veth goes with it); it says what it deleted.
func DeleteNetwork(ctx context.Context, n layout.NodeNet) ([]string, error) {
	var did []string
	killed := 0
	for _, pid := range mountns.ProcessesIn(n.NetNSPath(), "net") {
		if err := supervise.KillWait(ctx, pid, LeftoverGrace); err != nil {
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
	if LinkExists(n.HostVeth) {
		if err := ipCmd(ctx, "link", "del", n.HostVeth); err != nil && LinkExists(n.HostVeth) {
			return did, err
		}
	}
	return did, nil
}
