package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/certs"
	"github.com/devk/devk/internal/layout"
)

// TestPickControlPlanes: which nodes of a devk cluster the certs
// commands read: every control-plane node that has joined, in the
// cluster's order, or those --node names; a worker, a node still
// joining and a node the cluster lacks are errors that say what to do.
func TestPickControlPlanes(t *testing.T) {
	cfg := layout.NewConfig("ha")
	cfg.Network.Subnet = "10.250.0.0/24"
	cfg.Network.Nodes = []layout.NodeNet{
		{Name: "ha-control-plane", Role: layout.RoleControlPlane},
		{Name: "ha-worker", Role: layout.RoleWorker},
		{Name: "ha-control-plane2", Role: layout.RoleControlPlane},
		{Name: "ha-control-plane3", Role: layout.RoleControlPlane},
		{Name: "ha-control-plane4", Role: layout.RoleControlPlane, Joining: true},
	}
	for _, tc := range []struct {
		named []string
		want  []string
		err   string
	}{
		{nil, []string{"ha-control-plane", "ha-control-plane2", "ha-control-plane3"}, ""},
		{[]string{"ha-control-plane3", "ha-control-plane"}, []string{"ha-control-plane", "ha-control-plane3"}, ""},
		{[]string{"ha-control-plane2"}, []string{"ha-control-plane2"}, ""},
		{[]string{"nosuch"}, nil, `--node: cluster ha has no node "nosuch"; its nodes: ha-control-plane, ha-worker, ha-control-plane2, ha-control-plane3, ha-control-plane4`},
		{[]string{"ha-worker"}, nil, "--node ha-worker: a worker, whose kubelet renews its own client certificate; the control-plane nodes are ha-control-plane, ha-control-plane2, ha-control-plane3"},
		{[]string{"ha-control-plane4"}, nil, "--node ha-control-plane4: still joining; finish it with `devk node add ha-control-plane4`"},
	} {
		got, err := pickControlPlanes(cfg, tc.named)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("--node %v: %v, want %q", tc.named, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("--node %v: %v, %v; want %v", tc.named, got, err, tc.want)
		}
	}
}

// TestPrintExpirationNodes: check-expiration's table leads each row with
// its node on a devk cluster's nodes, and is kubeadm's table, without a
// NODE column, on one unnamed node (a kubeadm node given by --pki-dir).
func TestPrintExpirationNodes(t *testing.T) {
	at := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	text := func(r *certs.Report) string {
		var out bytes.Buffer
		printExpiration(&globalOptions{stdout: &out}, r)
		return out.String()
	}
	named := &certs.Report{
		Nodes: []certs.Node{{Name: "cp1"}, {Name: "cp2"}},
		Certs: []certs.Cert{{Node: "cp1", Name: "apiserver", NotAfter: at, Residual: certs.Duration(48 * time.Hour), CA: "ca", Renewable: true, UsedBy: []string{"kube-apiserver"}},
			{Node: "cp2", Name: "apiserver", NotAfter: at, Residual: certs.Duration(48 * time.Hour), CA: "ca", Renewable: true, UsedBy: []string{"kube-apiserver"}}},
		CAs: []certs.CA{{Node: "cp1", Name: "ca", NotAfter: at, Residual: certs.Duration(9 * 365 * 24 * time.Hour)}, {Node: "cp2", Name: "ca", NotAfter: at, Residual: certs.Duration(9 * 365 * 24 * time.Hour)}},
	}
	want := strings.Join([]string{
		"NODE   CERTIFICATE   EXPIRES                  RESIDUAL TIME   CERTIFICATE AUTHORITY   RENEWABLE   USED BY",
		"cp1    apiserver     Jan 01, 2027 00:00 UTC   2d              ca                      yes         kube-apiserver",
		"cp2    apiserver     Jan 01, 2027 00:00 UTC   2d              ca                      yes         kube-apiserver",
		"",
		"NODE   CERTIFICATE AUTHORITY   EXPIRES                  RESIDUAL TIME   EXTERNALLY MANAGED",
		"cp1    ca                      Jan 01, 2027 00:00 UTC   9y              no",
		"cp2    ca                      Jan 01, 2027 00:00 UTC   9y              no",
		"",
	}, "\n")
	if got := text(named); got != want {
		t.Errorf("two nodes' table:\n%s\nwant:\n%s", got, want)
	}
	unnamed := &certs.Report{Nodes: []certs.Node{{}}, Certs: named.Certs[:1], CAs: named.CAs[:1]}
	unnamed.Certs[0].Node, unnamed.CAs[0].Node = "", ""
	if got := text(unnamed); !strings.HasPrefix(got, "CERTIFICATE   EXPIRES") || strings.Contains(got, "NODE") {
		t.Errorf("one unnamed node's table has a NODE column:\n%s", got)
	}
}
