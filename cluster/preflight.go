package cluster

import (
	"context"
	"os/exec"

	"github.com/devk/devk/cluster/internal/cgroups"
	"github.com/devk/devk/cluster/internal/containerd"
	"github.com/devk/devk/cluster/internal/hostforward"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/cluster/internal/nodetree"
	"github.com/devk/devk/cluster/internal/preflight"
	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/registry"
	"github.com/devk/devk/source"
)

// Problem is one failed preflight check with its fix.
type Problem = preflight.Problem

// PreflightError lists every problem preflight found.
type PreflightError = preflight.Error

func (c *Cluster) runPreflight(ctx context.Context) (phase.Outcome, error) {
	var probs []Problem
	var notes []string
	add := func(p *Problem) {
		if p != nil {
			probs = append(probs, *p)
		}
	}
	add(preflight.Root())
	probs = append(probs, preflight.Binaries(exec.LookPath, containerd.CNIBinDir())...)
	add(node.MemoryProblem(c.newNodeRoles(), node.MemAvailable()))
	if c.Config.HA() {
		add(preflight.HAProxy(loadbalancer.DefaultBinary))
	}
	if c.ImagesFrom == "" {
		add(preflight.Go(exec.LookPath))
	}
	add(preflight.SocketPath(c.FirstNode().Files.ContainerdSocket()))
	cg := cgroups.Version()
	version := c.Config.KubeVersion
	if c.ImagesFrom == "" {
		t, err := source.Open(c.TreeDir)
		if err != nil {
			probs = append(probs, Problem{Check: "tree", What: err.Error()}) // the error says what to do
		} else if v, err := t.Version(ctx); err == nil {
			add(preflight.TreeNotOlder(c.Config.Name, c.Config.KubeVersion, v.GitVersion))
			version = v.GitVersion
		}
	}
	add(preflight.EmulatedVersion(c.Config.Spec.EmulatedVersion, version))
	for name, tree := range c.fileTrees {
		if err := nodetree.Check(ctx, tree, name, version); err != nil {
			probs = append(probs, Problem{Check: "node-tree", What: err.Error()}) // the error says what to do
		}
	}
	if err := preflight.CgroupSupport(cg, version); err != nil {
		probs = append(probs, Problem{Check: "cgroups", What: err.Error()}) // the error says what to do
	}
	if kubeadmConfig, err := c.kubeadmPreflight(version); err != nil {
		probs = append(probs, Problem{Check: "kubeadm-config", What: err.Error()})
	} else if kubeadmConfig != nil && len(probs) == 0 && c.ImagesFrom == "" {
		if err := c.kubeadmValidate(ctx, kubeadmConfig); err != nil {
			probs = append(probs, Problem{Check: "kubeadm", What: err.Error()})
		}
	}
	if note := preflight.SwapNote(); note != "" {
		notes = append(notes, note)
	}
	// The cluster's own ports are in its node's network namespace: only
	// the registry's is on the host.
	if _, ours := c.registryPaths().Procs().Running(registry.ProcessName); !ours && c.Registry == "" && c.Config.OwnRegistry {
		add(preflight.RegistryPort(ctx, c.Config.Registry))
	}
	if !c.Exists() {
		probs = append(probs, preflight.NamesTaken(c.Config.Name, c.Config.Network, node.LinkExists)...)
	}
	p, note := hostforward.Preflight(ctx, c.forwardRule(), c.AllowBridgeForward || c.Config.Network.ForwardRule, len(c.Config.Network.Nodes)+len(c.newNodeRoles()))
	add(p)
	if note != "" {
		notes = append(notes, note)
	}
	restrict := !preflight.CanLowerOOMScoreAdj(ctx)
	if restrict {
		notes = append(notes, "no CAP_SYS_RESOURCE: containerd gets restrict_oom_score_adj = true")
	}
	c.Config.RestrictOOMScoreAdj = restrict
	if len(probs) > 0 {
		return phase.Done, &PreflightError{Problems: probs}
	}
	if c.Config.Created.IsZero() {
		c.Config.Created = timeNow()
	}
	if err := c.SaveConfig(); err != nil {
		return phase.Done, err
	}
	for _, n := range notes {
		c.Reporter.Infof("  note: %s", n)
	}
	return phase.Unchanged("cgroup v%d, %s", cg, orUnknown(version)), nil
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}

// forwardRule is the cluster's FORWARD rule (hostforward.Rule).
func (c *Cluster) forwardRule() hostforward.Rule {
	return hostforward.Rule{Bridge: c.Config.Network.HostBridge, Cluster: c.Config.Name, IPTables: hostforward.HostIPTables}
}

// AllowBridgeForwardFlag is up's flag that adds the cluster's FORWARD rule.
const AllowBridgeForwardFlag = hostforward.AllowFlag
