package joinsteps

import (
	"slices"
	"testing"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/noderemove"
	"github.com/devk/devk/phase"
)

func TestControlPlaneOnlySteps(t *testing.T) {
	var cp []string
	for _, st := range phase.Flatten(cluster.JoinPhases()) {
		if ControlPlaneOnly(st.Path) {
			cp = append(cp, st.Path)
		}
	}
	want := []string{"control-plane-prepare", "control-plane-prepare/download-certs", "control-plane-prepare/certs", "control-plane-prepare/kubeconfig",
		"etcd", "control-plane", "load-balancer", "mark-control-plane"}
	if !slices.Equal(cp, want) {
		t.Errorf("control-plane-only join steps %v, want %v", cp, want)
	}
	var kubeadm []string
	for _, st := range phase.Flatten(cluster.JoinPhases()) {
		if RunsFor(st.Path, true, false) != RunsFor(st.Path, false, false) {
			kubeadm = append(kubeadm, st.Path)
		}
	}
	if want := []string{"discovery", "kubeadm-join", "kubelet-start"}; !slices.Equal(kubeadm, want) {
		t.Errorf("a worker's join steps that differ on a kubeadm cluster: %v, want %v", kubeadm, want)
	}
	var reset []string
	for _, st := range phase.Flatten(noderemove.Phases()) {
		if RunsFor(st.Path, true, false) && !RunsFor(st.Path, false, false) {
			reset = append(reset, st.Path)
		}
	}
	if want := []string{"kubeadm-reset"}; !slices.Equal(reset, want) {
		t.Errorf("a worker's removal steps only a kubeadm cluster runs: %v, want %v", reset, want)
	}
}
