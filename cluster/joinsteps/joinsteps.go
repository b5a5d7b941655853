// Package joinsteps says which steps of a node's join or removal
// (cluster.JoinPhases, noderemove.Phases) run for which node and
// cluster: what the tests that kill a join at every step need to know.
package joinsteps

import (
	"strings"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/noderemove"
	"github.com/devk/devk/internal/layout"
)

// ControlPlaneOnly says whether step (a path of JoinPhases or
// noderemove.Phases, as phase.Flatten gives it) runs, on a cluster devk's own
// phases bootstrap, only when a control-plane node joins or leaves: a
// worker's join or removal skips it.
func ControlPlaneOnly(step string) bool {
	return RunsFor(step, false, true) && !RunsFor(step, false, false)
}

// RunsFor says whether the top phase of step (a path of JoinPhases or
// noderemove.Phases) runs for a node's join or removal on a cluster with a
// load balancer, kubeadm's or devk's, the node a control plane or not.
func RunsFor(step string, kubeadm, controlPlane bool) bool {
	top, _, _ := strings.Cut(step, "/")
	ha := layout.Config{ControlPlaneEndpoint: "a load balancer"}
	j := &cluster.NodeJob{Cluster: &cluster.Cluster{Config: ha}, Node: cluster.Node{Net: layout.NodeNet{Role: layout.RoleWorker}}}
	if kubeadm {
		j.Cluster.Config.Spec.Bootstrapper = layout.BootstrapperKubeadm
	}
	if controlPlane {
		j.Node.Net.Role = layout.RoleControlPlane
	}
	for _, p := range append(cluster.JoinPhases(), noderemove.Phases()...) {
		if p.Name == top {
			if p.If == nil {
				return true
			}
			ok, _ := p.If(j)
			return ok
		}
	}
	return false
}
