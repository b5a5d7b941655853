package config

import (
	"strconv"

	"github.com/devk/devk/cluster/internal/kwok"
)

// validateFakeNodes checks fakeNodes: a count or groups, each group's
// capacity, labels, taints and zones, and that every node, real and
// fake, fits the pod subnet. The stage files are read and checked when
// up begins, as the audit policy file is (fakenodes.Precheck).
func (c *Cluster) validateFakeNodes(p *problems) {
	f := c.FakeNodes
	at := []string{"fakeNodes"}
	switch {
	case f.Count < 0:
		p.add(append(at, "count"), "is %d: want 0 or more", f.Count)
	case f.Count > 0 && len(f.Groups) > 0:
		p.add(append(at, "count"), "give count or groups (each with its count), not both")
	}
	for i, g := range f.Groups {
		for _, err := range kwok.CheckGroup(g) {
			p.add(append(at, "groups", strconv.Itoa(i)), "%v", err)
		}
	}
	for i, s := range f.Stages {
		if s == "" {
			p.add(append(at, "stages", strconv.Itoa(i)), "is empty: give a file of kwok Stage documents")
		}
	}
	real := max(len(c.Nodes), 1)
	if room := kwok.PodSubnetNodes(c.PodSubnet(), NodeCIDRMaskSize); f.Total() > 0 && f.Total()+real > room {
		p.add(at, "%d fake and %d real nodes do not fit podSubnet %s: it has room for %d nodes (a /%d each); set networking.podSubnet to a /%d or wider",
			f.Total(), real, c.PodSubnet(), room, NodeCIDRMaskSize, kwok.WiderMask(f.Total()+real, NodeCIDRMaskSize))
	}
}
