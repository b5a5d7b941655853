package node

import (
	"slices"
	"testing"
)

// TestParseHostNetworks: every route's destination counts, and every
// gateway (multipath ones too) as a /32; a default route, or one split
// in halves, counts by its gateway alone (a node subnet takes the more
// specific route); the cluster's own bridge does not count.
func TestParseHostNetworks(t *testing.T) {
	routes := `[
{"dst":"default","gateway":"192.168.1.1","dev":"eth0","flags":[]},
{"dst":"0.0.0.0/1","gateway":"10.8.0.1","dev":"tun0","flags":[]},
{"dst":"128.0.0.0/1","gateway":"10.8.0.1","dev":"tun0","flags":[]},
{"dst":"192.168.1.0/24","dev":"eth0","protocol":"kernel","scope":"link","prefsrc":"192.168.1.20","flags":[]},
{"dst":"10.8.0.0/24","dev":"tun0","flags":[]},
{"dst":"172.20.0.0/16","nexthops":[{"gateway":"192.168.1.2","dev":"eth0"},{"gateway":"100.64.3.4","dev":"eth1"}],"flags":[]},
{"dst":"10.250.0.0/24","dev":"dkb-devk","protocol":"kernel","scope":"link","prefsrc":"10.250.0.1","flags":[]},
{"type":"local","dst":"10.250.0.1","dev":"dkb-devk","table":"local","flags":[]},
{"type":"local","dst":"127.0.0.0/8","dev":"lo","table":"local","flags":[]},
{"type":"local","dst":"192.168.1.20","dev":"eth0","table":"local","flags":[]},
{"dst":"fe80::/64","dev":"eth0","flags":[]},
{"dst":"default","table":"100","gateway":"172.16.9.1","dev":"eth2","flags":[]}
]`
	got, err := parseHostNetworks([]byte(routes), "dkb-devk")
	if err != nil {
		t.Fatal(err)
	}
	var gotS []string
	for _, n := range got {
		gotS = append(gotS, n.String())
	}
	slices.Sort(gotS)
	gotS = slices.Compact(gotS)
	want := []string{"10.8.0.0/24", "10.8.0.1/32", "100.64.3.4/32", "127.0.0.0/8", "172.16.9.1/32", "172.20.0.0/16",
		"192.168.1.0/24", "192.168.1.1/32", "192.168.1.2/32", "192.168.1.20/32"}
	if !slices.Equal(gotS, want) {
		t.Errorf("parseHostNetworks =\n %v\nwant\n %v", gotS, want)
	}
	if _, err := parseHostNetworks([]byte("not json"), ""); err == nil {
		t.Error("parseHostNetworks took output that is not ip's JSON")
	}
}
