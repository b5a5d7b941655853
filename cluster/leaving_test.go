package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/internal/nodelock"
)

// TestLeavingNodeIsLeftAlone: a node a killed `node remove` marked
// leaving is not joined or started again by up, gets no routes and no
// kubelet swap, and up's note says what finishes it.
func TestLeavingNodeIsLeftAlone(t *testing.T) {
	c := twoWorkers(t)
	c.Config.SetLeaving("devk-worker")
	var joins []string
	for _, n := range c.nodesToJoin() {
		joins = append(joins, n.Name)
	}
	if !slices.Equal(joins, []string{"devk-worker2"}) {
		t.Errorf("up joins %v, want only devk-worker2", joins)
	}
	for _, r := range node.PodRoutes(c.Config.ActiveNodes()) {
		if r.In.Name == "devk-worker" || r.Via == c.Config.Network.Nodes[1].IP {
			t.Errorf("a route in or through the leaving node: %+v", r)
		}
	}
	ks, err := c.Kubelets()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k.Node == "devk-worker" {
			t.Error("swap kubelet would restart the leaving node's kubelet")
		}
	}
	if _, ok := c.OtherRuntimes()["devk-worker"]; ok {
		t.Error("an addon swap would ask the leaving node's runtime")
	}
	if note := c.leavingNote(); !strings.Contains(note, "node devk-worker was being removed: run `devk node remove devk-worker` to finish") {
		t.Errorf("note %q", note)
	}
	if got := c.Config.LeavingNodes(); !slices.Equal(got, []string{"devk-worker"}) {
		t.Errorf("LeavingNodes %v", got)
	}
}

// TestClusterJobLocksEveryNode: up's, down's and node add/remove's lock is
// the cluster's and every node's: a swap on any node, or another cluster
// job, is refused naming it, until it lets go.
func TestClusterJobLocksEveryNode(t *testing.T) {
	c := twoWorkers(t)
	c.Files.Dir = t.TempDir() // the lock keys are paths: the test's own
	unlock, err := c.lock()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.NodeManifests() {
		if _, err := nodelock.Acquire(m, "devk swap"); !errors.Is(err, nodelock.ErrBusy) {
			t.Errorf("a swap on %s while a cluster job holds it: %v", m, err)
		}
	}
	if _, err := nodelock.AcquireCluster(c.Files.Dir, nil, "devk node add"); !errors.Is(err, nodelock.ErrBusy) {
		t.Errorf("a second cluster job: %v", err)
	}
	unlock()
	for _, m := range c.NodeManifests() {
		l, err := nodelock.Acquire(m, "devk swap")
		if err != nil {
			t.Errorf("after the cluster job: %v", err)
			continue
		}
		l.Release()
	}
}
