package clustercmd

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/certs"
	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/cmd/devk/internal/clitest"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/pki"
)

// TestPickControlPlanes: which nodes of a devk cluster the certs
// commands read: every control-plane node that has joined, in the
// cluster's order, or those --node names; a worker, a node still
// joining and a node the cluster lacks are errors that say what to do.
func TestPickControlPlanes(t *testing.T) {
	cfg := layout.NewConfig("ha")
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
		printExpiration(&cli.Options{Stdout: &out}, r)
		return out.String()
	}
	named := &certs.Report{
		Nodes: []certs.NodeFiles{{Name: "cp1"}, {Name: "cp2"}},
		Certs: []certs.Cert{{Entry: certs.Entry{Node: "cp1", Name: "apiserver", NotAfter: at, Residual: certs.Duration(48 * time.Hour)}, CA: "ca", Renewable: true, UsedBy: []string{"kube-apiserver"}},
			{Entry: certs.Entry{Node: "cp2", Name: "apiserver", NotAfter: at, Residual: certs.Duration(48 * time.Hour)}, CA: "ca", Renewable: true, UsedBy: []string{"kube-apiserver"}}},
		CAs: []certs.CA{{Entry: certs.Entry{Node: "cp1", Name: "ca", NotAfter: at, Residual: certs.Duration(9 * 365 * 24 * time.Hour)}}, {Entry: certs.Entry{Node: "cp2", Name: "ca", NotAfter: at, Residual: certs.Duration(9 * 365 * 24 * time.Hour)}}},
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
	unnamed := &certs.Report{Nodes: []certs.NodeFiles{{}}, Certs: named.Certs[:1], CAs: named.CAs[:1]}
	unnamed.Certs[0].Node, unnamed.CAs[0].Node = "", ""
	if got := text(unnamed); !strings.HasPrefix(got, "CERTIFICATE   EXPIRES") || strings.Contains(got, "NODE") {
		t.Errorf("one unnamed node's table has a NODE column:\n%s", got)
	}
}

// TestCertsReadEveryNode: check-expiration on a devk cluster of three
// control-plane nodes (cluster.json as up and node add write it, each
// node's PKI where the cluster layout puts it, the joined nodes' made
// from node 0's CAs) reads each node's own files, node 0 first, each row
// naming its node; --node picks one.
func TestCertsReadEveryNode(t *testing.T) {
	home := t.TempDir()
	t.Setenv("DEVK_HOME", home)
	cfg := layout.NewConfig("ha")
	_, subnet, _ := net.ParseCIDR("10.250.77.0/24")
	if err := cfg.PlaceAt(subnet, nil, nil); err != nil {
		t.Fatal(err)
	}
	names := []string{"ha-control-plane", "ha-control-plane2", "ha-control-plane3"}
	for _, n := range names[1:] {
		if _, err := cfg.AddNode(n, layout.RoleControlPlane, nil); err != nil {
			t.Fatal(err)
		}
	}
	p := layout.HomeFiles(home).Cluster("ha")
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := layout.EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.ConfigFile(), data, 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, n := range names {
		np, err := p.Node(cfg, n)
		if err != nil {
			t.Fatal(err)
		}
		nn, _, _ := cfg.FindNode(n)
		pc := pki.Config{NodeName: n, ServiceIP: net.ParseIP("10.96.0.1"), AdvertiseIP: net.ParseIP(nn.IP), DNSDomain: "cluster.local"}
		for _, s := range pki.Specs(pc) {
			if s.IsCA() && i > 0 {
				// A joined node has node 0's CAs (download-certs).
				for _, f := range []func(string, string) string{pki.CertPath, pki.KeyPath} {
					b, err := os.ReadFile(f(p.FirstNode().PKI(), s.Name))
					if err != nil {
						t.Fatal(err)
					}
					os.MkdirAll(filepath.Dir(f(np.PKI(), s.Name)), 0o700)
					if err := os.WriteFile(f(np.PKI(), s.Name), b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			if _, err := pki.Ensure(np.PKI(), s, now, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	stdout, stderr, err := clitest.Run(t, NewCertsCmd, "certs", "check-expiration", "--name", "ha", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var r certs.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range r.Nodes {
		nodes = append(nodes, n.Name)
	}
	if !slices.Equal(nodes, names) {
		t.Errorf("nodes %v, want %v", nodes, names)
	}
	for _, c := range r.Certs {
		np, err := p.Node(cfg, c.Node)
		if err != nil {
			t.Fatalf("row %s of node %q: %v", c.Name, c.Node, err)
		}
		if filepath.Dir(c.Path) != np.Dir && !strings.HasPrefix(c.Path, np.PKI()+"/") {
			t.Errorf("%s of %s is %s, not under %s", c.Name, c.Node, c.Path, np.Dir)
		}
	}
	if got := strings.Count(stdout, `"name":"apiserver"`); got != 3 {
		t.Errorf("%d apiserver rows, want one per node", got)
	}
	stdout, _, err = clitest.Run(t, NewCertsCmd, "certs", "check-expiration", "--name", "ha", "--node", "ha-control-plane2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout, "NODE ") || !strings.Contains(stdout, "ha-control-plane2 ") || strings.Contains(stdout, "ha-control-plane3") || strings.Contains(stdout, "ha-control-plane ") {
		t.Errorf("--node ha-control-plane2's table:\n%s", stdout)
	}
}
