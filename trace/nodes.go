package trace

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"github.com/devk/devk/internal/cri"
)

// Node is one node trace reads: its network namespace (for
// iptables-save) and its CRI runtime.
type Node struct {
	Name string
	// NetNS is the path of its network namespace ("" for this process's).
	NetNS string
	// CRISocket is its runtime's endpoint ("" reads no containers).
	CRISocket string
	// IP is its address: requests from it are not the command's.
	IP string
}

// nodeState is what a node runs at one moment.
type nodeState struct {
	rules Rules
	// rulesSum tells a changed ruleset without diffing it.
	rulesSum [sha256.Size]byte
	// pods are the sandboxes and containers by ID.
	pods map[string]podThing
}

// podThing is a sandbox or a container as the runtime lists it.
type podThing struct {
	Kind      string // "sandbox" or "container"
	Pod       string // namespace/name
	Container string
	State     string
}

// snapshot reads a node's rules and, through rt (nil: none), its
// runtime's sandboxes and containers.
func snapshot(ctx context.Context, n Node, rt *cri.Client) (nodeState, error) {
	out, err := SaveRules(ctx, n.NetNS)
	if err != nil {
		return nodeState{}, fmt.Errorf("node %s: read its iptables rules: %w", n.Name, err)
	}
	s := nodeState{rules: ParseSave(out), pods: map[string]podThing{}}
	s.rulesSum = sha256.Sum256(rulesText(s.rules))
	if rt == nil {
		return s, nil
	}
	sbs, err := rt.Sandboxes(ctx, "")
	if err != nil {
		return s, fmt.Errorf("node %s: %w", n.Name, err)
	}
	for _, sb := range sbs {
		state := "notready"
		if sb.Ready {
			state = "ready"
		}
		s.pods[sb.ID] = podThing{Kind: "sandbox", Pod: sb.PodNamespace + "/" + sb.PodName, State: state}
	}
	cts, err := rt.Containers(ctx, cri.Filter{})
	if err != nil {
		return s, fmt.Errorf("node %s: %w", n.Name, err)
	}
	for _, c := range cts {
		s.pods[c.ID] = podThing{Kind: "container", Pod: c.PodNamespace + "/" + c.PodName, Container: c.Name, State: c.StateName()}
	}
	return s, nil
}

// rulesText is rules in a canonical order, for a checksum.
func rulesText(r Rules) []byte {
	var b strings.Builder
	for _, t := range Tables {
		chains := make([]string, 0, len(r[t]))
		for c := range r[t] {
			chains = append(chains, c)
		}
		slices.Sort(chains)
		for _, c := range chains {
			lines := slices.Clone(r[t][c])
			slices.Sort(lines)
			fmt.Fprintf(&b, "%s %s\n%s\n", t, c, strings.Join(lines, "\n"))
		}
	}
	return []byte(b.String())
}

// PodChange is a sandbox or container that appeared, changed state or
// went between two snapshots of a node's runtime.
type PodChange struct {
	// Kind is sandbox or container.
	Kind string `json:"kind"`
	// ID is the runtime's ID, shortened (cri.ShortID).
	ID        string `json:"id"`
	Pod       string `json:"pod"`
	Container string `json:"container,omitempty"`
	// From and To are the states before and after ("" when absent):
	// a sandbox's ready or notready, a container's created, running,
	// exited or unknown.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// Change says in a word what happened: started, stopped, removed,
// created.
func (c PodChange) Change() string {
	switch {
	case c.To == "":
		return "removed"
	case c.To == "running" || c.To == "ready":
		return "started"
	case c.To == "exited" || c.To == "notready":
		return "stopped"
	}
	return c.To
}

// diffPods lists what changed in a runtime between two snapshots, by
// kind, pod and container.
func diffPods(before, after map[string]podThing) []PodChange {
	out := []PodChange{}
	for id, a := range after {
		if b, ok := before[id]; !ok || b.State != a.State {
			out = append(out, PodChange{Kind: a.Kind, ID: cri.ShortID(id), Pod: a.Pod, Container: a.Container, From: b.State, To: a.State})
		}
	}
	for id, b := range before {
		if _, ok := after[id]; !ok {
			out = append(out, PodChange{Kind: b.Kind, ID: cri.ShortID(id), Pod: b.Pod, Container: b.Container, From: b.State})
		}
	}
	slices.SortFunc(out, func(x, y PodChange) int {
		return strings.Compare(x.Kind+" "+x.Pod+" "+x.Container+" "+x.ID, y.Kind+" "+y.Pod+" "+y.Container+" "+y.ID)
	})
	return out
}

// NodeTrace is what changed on one node in the window.
type NodeTrace struct {
	Node string `json:"node"`
	// IPTables are the rule lines added and removed (filter, nat,
	// mangle), read inside the node's network namespace.
	IPTables RulesDiff `json:"iptables"`
	// Containers are the pod sandboxes and containers started, stopped
	// or removed, from the node's CRI runtime.
	Containers []PodChange `json:"containers"`
	// Error says what could not be read of the node.
	Error string `json:"error,omitempty"`
}
