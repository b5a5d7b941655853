package config

import (
	"path/filepath"

	"github.com/devk/devk/internal/layout"
)

// The defaults of what a file leaves out. They are read through these
// methods, not written into the file's values: a problem names the key
// a file gave, and a file round-trips as it was written.

// PodSubnet is networking.podSubnet, else layout.DefaultPodCIDR.
func (c *Cluster) PodSubnet() string { return or(c.Networking.PodSubnet, layout.DefaultPodCIDR) }

// ServiceSubnet is networking.serviceSubnet, else
// layout.DefaultServiceCIDR.
func (c *Cluster) ServiceSubnet() string {
	return or(c.Networking.ServiceSubnet, layout.DefaultServiceCIDR)
}

// KeepTaint says whether the control-plane nodes keep their NoSchedule
// taint (controlPlaneTaint, else DefaultControlPlaneTaint).
func (c *Cluster) KeepTaint() bool {
	return or(c.ControlPlaneTaint, DefaultControlPlaneTaint) == TaintKeep
}

// JoinNodes are the nodes the file lists after the first, which up
// joins: control-plane nodes first (each makes the next a member of a
// larger etcd), then workers, each in the file's order; Name "" for
// those it leaves to the default.
func (c *Cluster) JoinNodes() []Node {
	var cps, workers []Node
	for _, n := range c.Nodes[min(1, len(c.Nodes)):] {
		if n.Role == layout.RoleControlPlane {
			cps = append(cps, n)
		} else {
			workers = append(workers, n)
		}
	}
	return append(cps, workers...)
}

// NodeTrees are the trees the file gives its nodes, by node name; nil
// when it lists no nodes (a later up keeps those recorded).
func (c *Cluster) NodeTrees() map[string]string {
	if len(c.Nodes) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, n := range c.Nodes {
		if n.Tree != "" {
			out[n.Name] = n.Tree
		}
	}
	return out
}

// ControlPlanes is how many control-plane nodes the file lists.
func (c *Cluster) ControlPlanes() int {
	n := 0
	for _, un := range c.Nodes {
		if un.Role == layout.RoleControlPlane {
			n++
		}
	}
	return n
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// normalize drops empty maps, so that a spec compares and stores the
// same however the file spelled "nothing".
func (c *Cluster) normalize() {
	// A policy file relative to the config file: the spec keeps it
	// absolute, for the next up without --config.
	if f := c.Audit.PolicyFile; f != "" && !filepath.IsAbs(f) && c.file != "" {
		c.Audit.PolicyFile = filepath.Join(filepath.Dir(c.file), f)
	}
	for i, n := range c.Nodes {
		if n.Tree != "" && !filepath.IsAbs(n.Tree) && c.file != "" {
			c.Nodes[i].Tree = filepath.Join(filepath.Dir(c.file), n.Tree)
		}
	}
	for i, f := range c.FakeNodes.Stages {
		if !filepath.IsAbs(f) && c.file != "" {
			c.FakeNodes.Stages[i] = filepath.Join(filepath.Dir(c.file), f)
		}
	}
	if len(c.FeatureGates) == 0 {
		c.FeatureGates = nil
	}
	if len(c.RuntimeConfig) == 0 {
		c.RuntimeConfig = nil
	}
	if len(c.KubeadmConfigPatches) == 0 {
		c.KubeadmConfigPatches = nil
	}
	if len(c.KubeadmConfigPatchesJSON6902) == 0 {
		c.KubeadmConfigPatchesJSON6902 = nil
	}
	for _, comp := range SpecComponents(&c.Spec) {
		if len(comp.ExtraArgs) == 0 {
			comp.ExtraArgs = nil
		}
		if len(comp.FeatureGates) == 0 {
			comp.FeatureGates = nil
		}
	}
}
