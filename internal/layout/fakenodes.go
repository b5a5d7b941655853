package layout

import "fmt"

// FakeNodes are a cluster's kwok nodes: Node objects no machine stands
// behind, kept Ready, and their pods made Running, by kwok's stages.
// Real and fake nodes live side by side; only pods that tolerate
// FakeNodeTaint land on a fake one.
type FakeNodes struct {
	// Count is how many, when Groups is empty (`devk up --fake-nodes N`).
	Count int `json:"count,omitempty"`
	// Groups describe a topology: each its own size, capacity, labels,
	// taints and zones. The nodes are numbered across the groups in
	// order, so `devk node add --fake` grows the last group and
	// `devk node remove --fake` shrinks from the end.
	Groups []FakeNodeGroup `json:"groups,omitempty"`
	// Stages are files of kwok Stage documents (kwok.x-k8s.io/v1alpha1)
	// used instead of kwok's defaults (its fast node and pod stages and
	// the node heartbeat with leases), as absolute paths on this machine.
	Stages []string `json:"stages,omitempty"`
}

// FakeNodeGroup is one kind of fake node.
type FakeNodeGroup struct {
	// Count is how many nodes the group has.
	Count int `json:"count"`
	// CPU, Memory and Pods are each node's capacity (and allocatable),
	// as resource quantities; empty: FakeNodeCPU, FakeNodeMemory,
	// FakeNodePods.
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	Pods   string `json:"pods,omitempty"`
	// Labels are added to each node's.
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are added to FakeNodeTaint, in kubectl's form
	// KEY[=VALUE]:EFFECT.
	Taints []string `json:"taints,omitempty"`
	// Zones, when set, spread the group's nodes across these zones in
	// turn (label topology.kubernetes.io/zone).
	Zones []string `json:"zones,omitempty"`
}

// The defaults of a fake node and the marks that set it apart.
const (
	// FakeNodeCPU, FakeNodeMemory and FakeNodePods are a fake node's
	// capacity when its group does not say: a large machine's.
	FakeNodeCPU    = "32"
	FakeNodeMemory = "256Gi"
	FakeNodePods   = "110"
	// FakeNodeKey is kwok's: the annotation kwok manages a node by, the
	// label and the taint's key.
	FakeNodeKey = "kwok.x-k8s.io/node"
	// FakeNodeValue is their value.
	FakeNodeValue = "fake"
)

// FakeNodeTaint is every fake node's taint, kubectl's form.
const FakeNodeTaint = FakeNodeKey + "=" + FakeNodeValue + ":NoSchedule"

// Total is how many fake nodes there are.
func (f FakeNodes) Total() int {
	if len(f.Groups) == 0 {
		return f.Count
	}
	n := 0
	for _, g := range f.Groups {
		n += g.Count
	}
	return n
}

// WithTotal is f with n nodes: Count, or the groups grown or shrunk
// at the end (the last group grows; groups left empty are dropped,
// the first is kept).
func (f FakeNodes) WithTotal(n int) FakeNodes {
	if len(f.Groups) == 0 {
		f.Count = n
		return f
	}
	groups := append([]FakeNodeGroup(nil), f.Groups...)
	diff := n - f.Total()
	for i := len(groups) - 1; i >= 0 && diff != 0; i-- {
		switch {
		case diff > 0:
			groups[i].Count += diff
			diff = 0
		case groups[i].Count+diff >= 0:
			groups[i].Count += diff
			diff = 0
		default:
			diff += groups[i].Count
			groups[i].Count = 0
		}
	}
	for len(groups) > 1 && groups[len(groups)-1].Count == 0 {
		groups = groups[:len(groups)-1]
	}
	f.Groups = groups
	return f
}

// FakeNode is one fake node as its group makes it.
type FakeNode struct {
	Name  string
	Group FakeNodeGroup
	// Zone is its zone, "" when its group has none.
	Zone string
}

// List is every fake node, in order: <cluster>-fake-1, -2, …
func (f FakeNodes) List(cluster string) []FakeNode {
	groups := f.Groups
	if len(groups) == 0 {
		groups = []FakeNodeGroup{{Count: f.Count}}
	}
	var out []FakeNode
	for _, g := range groups {
		for i := range g.Count {
			n := FakeNode{Name: FakeNodeName(cluster, len(out)+1), Group: g}
			if len(g.Zones) > 0 {
				n.Zone = g.Zones[i%len(g.Zones)]
			}
			out = append(out, n)
		}
	}
	return out
}

// FakeNodeName is the i'th fake node's name (from 1).
func FakeNodeName(cluster string, i int) string { return fmt.Sprintf("%s-fake-%d", cluster, i) }
