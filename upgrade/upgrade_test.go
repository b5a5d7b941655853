package upgrade

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/skew"
)

// apiserverHelp is the shape of kube-apiserver's --help (v1.34).
const apiserverHelp = `Generic flags:

      --advertise-address ip                         The IP address on which to advertise the apiserver.
      --feature-gates colonSeparatedMultimapStringString   Comma-separated list of component:key=value pairs. Options are:
                                                           kube:APIResponseCompression=true|false (BETA - default=true)
                                                           kube:AllAlpha=true|false (ALPHA - default=false)
                                                           OldGate=true|false (ALPHA - default=false)
  -h, --help                                       help for kube-apiserver
      --v Level                                    number for the log level verbosity
`

// etcdHelp is the shape of etcd's --help.
const etcdHelp = `Member:
  --name 'default'
    Human-readable name for this member.
  --data-dir '${name}.etcd'
    Path to the data directory.
`

func TestParseHelp(t *testing.T) {
	h := ParseHelp(apiserverHelp)
	for _, f := range []string{"advertise-address", "feature-gates", "help", "v"} {
		if !h.Flags[f] {
			t.Errorf("flag %s not found in %v", f, h.Flags)
		}
	}
	if len(h.Flags) != 4 {
		t.Errorf("flags %v, want 4", h.Flags)
	}
	if want := map[string]bool{"APIResponseCompression": true, "AllAlpha": true, "OldGate": true}; !reflect.DeepEqual(h.Gates, want) {
		t.Errorf("gates %v, want %v", h.Gates, want)
	}
	e := ParseHelp(etcdHelp)
	if !e.Flags["name"] || !e.Flags["data-dir"] || len(e.Flags) != 2 {
		t.Errorf("etcd flags %v, want name and data-dir", e.Flags)
	}
}

func TestUnknown(t *testing.T) {
	h := ParseHelp(apiserverHelp)
	flags := map[string]string{"advertise-address": "10.0.0.1", "v": "2", "insecure-port": "0", "feature-gates": "AllAlpha=false,kube:Gone=true"}
	got := h.Unknown("kube-apiserver", "manifests/kube-apiserver.yaml", flags, gatesOf(flags["feature-gates"]))
	if len(got) != 2 {
		t.Fatalf("Unknown = %q, want the flag and the gate", got)
	}
	if !strings.Contains(got[0], "flag --insecure-port (in manifests/kube-apiserver.yaml)") || !strings.Contains(got[1], "feature gate Gone") {
		t.Errorf("Unknown = %q", got)
	}
	if got := h.Unknown("kube-apiserver", "x", map[string]string{"v": "1"}, []string{"OldGate"}); len(got) != 0 {
		t.Errorf("Unknown of known ones = %q", got)
	}
}

func TestJournal(t *testing.T) {
	dir := t.TempDir()
	if jr, err := readJournal(dir); err != nil || jr != nil {
		t.Fatalf("readJournal of none = %v, %v", jr, err)
	}
	want := &Journal{Tree: "/src/k", To: "v1.35.4", From: []skew.Running{{Component: skew.APIServer, Node: "devk", Version: "v1.34.4"}},
		FromImages: map[string]string{"devk/etcd": "127.0.0.1:5000/etcd@sha256:00"}, Started: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Cordoned: "devk-worker"}
	if err := want.write(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(journalFile(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("journal file: %v, mode %v, want 0600", err, fi.Mode())
	}
	got, err := readJournal(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("readJournal = %+v, %v; want %+v", got, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "upgrade.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readJournal(dir); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Fatalf("readJournal of a bad file: %v", err)
	}
}

func TestRollbackOrder(t *testing.T) {
	var names []string
	for _, p := range rollbackPhases() {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, RollbackOrder) {
		t.Fatalf("rollback phases %v, want %v", names, RollbackOrder)
	}
}

func TestAfterSwap(t *testing.T) {
	running := []skew.Running{
		{Component: skew.APIServer, Node: "cp", Version: "v1.34.4"},
		{Component: skew.Kubelet, Node: "cp", Version: "v1.34.4"},
		{Component: skew.Kubelet, Node: "w1", Version: "v1.34.4"},
		{Component: skew.Kubectl, Version: "v1.34.4"},
	}
	got := afterSwap(running, map[string]string{skew.Kubelet: "v1.35.4"}, []string{"w1"})
	if got[1].Version != "v1.34.4" || got[2].Version != "v1.35.4" || running[2].Version != "v1.34.4" {
		t.Fatalf("afterSwap of w1's kubelet = %+v (running %+v)", got, running)
	}
	if err := skew.Check("after", got); err == nil || !strings.Contains(err.Error(), "kubelet v1.35.4 on w1: newer than kube-apiserver") {
		t.Fatalf("Check after a newer kubelet: %v", err)
	}
	got = afterSwap(running, map[string]string{skew.Kubelet: "v1.33.9", skew.Kubectl: "v1.35.0"}, nil)
	if got[1].Version != "v1.33.9" || got[2].Version != "v1.33.9" || got[3].Version != "v1.35.0" {
		t.Fatalf("afterSwap of every kubelet and kubectl = %+v", got)
	}
	if err := skew.Check("after", got); err != nil {
		t.Fatalf("an older kubelet and a kubectl one minor newer: %v", err)
	}
}

// TestKubeadmPhases: on a cluster the tree's kubeadm bootstrapped, its
// kubeadm-apply and kubeadm-node phases run in place of the swaps of
// etcd, the control plane and the addons; on devk's own, the other way
// round. The other phases run on both.
func TestKubeadmPhases(t *testing.T) {
	kubeadmOwns := map[string]bool{"kubeadm-apply": true, "kubeadm-node": true}
	devkOwns := map[string]bool{"etcd": true, "control-plane": true, "addons": true}
	for _, bootstrapper := range []string{layout.BootstrapperDevk, layout.BootstrapperKubeadm} {
		c := &cluster.Cluster{}
		c.Config.Spec.Bootstrapper = bootstrapper
		j := &Job{c: c}
		kubeadm := bootstrapper == layout.BootstrapperKubeadm
		checked := 0
		for _, p := range Phases() {
			runs := true
			if p.If != nil {
				runs, _ = p.If(j)
			}
			want := !(kubeadmOwns[p.Name] && !kubeadm) && !(devkOwns[p.Name] && kubeadm)
			if runs != want {
				t.Errorf("bootstrapper %s: phase %s runs %v, want %v", bootstrapper, p.Name, runs, want)
			}
			checked++
		}
		if checked != 12 {
			t.Errorf("bootstrapper %s: %d phases, want 12", bootstrapper, checked)
		}
	}
}

// TestPinned: a worker with a tree of its own stops an upgrade before
// anything changes, saying how to go on; one being removed does not.
func TestPinned(t *testing.T) {
	cfg := layout.NewConfig("up")
	if err := pinned(cfg, ""); err != nil {
		t.Fatalf("a cluster without trees of nodes' own: %v", err)
	}
	cfg.Network.Nodes = append(cfg.Network.Nodes, layout.NodeNet{Name: "up-worker"}, layout.NodeNet{Name: "old", Tree: "/src/v1.34.4"})
	err := pinned(cfg, " --name up")
	for _, want := range []string{"node old", "/src/v1.34.4", "nodes[].tree", "devk node remove --name up old", "devk up --name up --config FILE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a worker of its own tree: %v, want %q in it", err, want)
		}
	}
	cfg.Network.Nodes[len(cfg.Network.Nodes)-1].Leaving = true
	if err := pinned(cfg, ""); err != nil {
		t.Errorf("a worker being removed: %v", err)
	}
}
