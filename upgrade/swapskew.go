package upgrade

import (
	"context"
	"fmt"
	"slices"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cluster"
	"github.com/devk/devk/internal/skew"
	"github.com/devk/devk/source"
	"github.com/devk/devk/swap"
)

// skewNames are the swappable components the skew policy names, by
// build's name.
var skewNames = map[string]string{
	"apiserver": skew.APIServer, "controller-manager": skew.ControllerManager, "scheduler": skew.Scheduler,
	"kubelet": skew.Kubelet, "kube-proxy": skew.KubeProxy, "kubectl": skew.Kubectl,
}

// SwapSkew checks a swap of components from a tree of another minor
// version than the cluster's against the version skew policy: the
// cluster after the swap (the components named, on the nodes the swap
// reaches) must be within it. A swap of the tree the cluster runs, or of
// no component by name (what was pushed, the inner loop's), is not read
// at all. force reports the refusal instead (the error is then nil and
// the string says what was overridden).
func SwapSkew(ctx context.Context, c *cluster.Cluster, o swap.Options, force bool) (string, error) {
	if len(o.Components) == 0 || o.Rollback || o.Debug != nil {
		return "", nil
	}
	t, err := source.Open(o.TreeDir)
	if err != nil {
		return "", nil // the swap says why it has no tree
	}
	st, err := build.LoadState(t.Root)
	if err != nil {
		return "", nil
	}
	clusterMinor, err := skew.Minor(c.Config.KubeVersion)
	if err != nil {
		return "", nil // a cluster.json without its version: nothing to compare
	}
	to := map[string]string{}
	for _, name := range o.Components {
		comp, err := build.Lookup(name)
		if err != nil {
			continue
		}
		s, ok := skewNames[comp.Name]
		cs := st.Component(comp.Name)
		if !ok || cs == nil || cs.Binary == nil {
			continue
		}
		if m, err := skew.Minor(cs.Binary.Version); err == nil && m != clusterMinor {
			to[s] = cs.Binary.Version
		}
	}
	if len(to) == 0 {
		return "", nil
	}
	j := &Job{Options: Options{Swap: o}, c: c}
	running, err := j.running(ctx)
	if err != nil {
		return "", fmt.Errorf("the versions the skew policy needs: %w", err)
	}
	var nodes []string
	for _, k := range o.Kubelets {
		nodes = append(nodes, k.Node)
	}
	err = skew.Check("the cluster after this swap", afterSwap(running, to, nodes))
	if err != nil && force {
		return err.Error(), nil
	}
	if err != nil {
		return "", fmt.Errorf("%w\n(--force-skew swaps all the same, for testing exactly that skew; devk upgrade moves a whole cluster in the policy's order)", err)
	}
	return "", nil
}

// afterSwap is running with the components of to at their new versions:
// kubelets on the nodes named (none: every node), the rest wherever they
// run.
func afterSwap(running []skew.Running, to map[string]string, kubeletNodes []string) []skew.Running {
	out := slices.Clone(running)
	for i, r := range out {
		v, ok := to[r.Component]
		if !ok {
			continue
		}
		if r.Component == skew.Kubelet && len(kubeletNodes) > 0 && !slices.Contains(kubeletNodes, r.Node) {
			continue
		}
		out[i].Version = v
	}
	return out
}
