package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

// TestWriteRuntimeFiles: a node's containerd config names the sandbox
// image; each loopback registry gets a hosts.toml under each of its
// names pointing at its mirror; node 0 gets its CNI network before its
// Node has a pod subnet, a joining node not; a second write changes
// nothing.
func TestWriteRuntimeFiles(t *testing.T) {
	cfg := layout.NewConfig("devk")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.AddNode("devk-worker", layout.RoleWorker, nil); err != nil {
		t.Fatal(err)
	}
	files := layout.HomeFiles(t.TempDir()).Cluster("devk")
	r := Runtime{SandboxImage: "127.0.0.1:5000/pause@sha256:0123", Mirrors: []Mirror{{Registry: "127.0.0.1:5000", URL: "10.250.0.1:5000"}}}
	for i, name := range []string{"devk-control-plane", "devk-worker"} {
		net, _, err := cfg.FindNode(name)
		if err != nil {
			t.Fatal(err)
		}
		nf, err := files.Node(cfg, name)
		if err != nil {
			t.Fatal(err)
		}
		n := Node{Net: net, Files: nf, Config: &cfg}
		changed, err := n.writeRuntimeFiles(r)
		if err != nil || !changed {
			t.Fatalf("%s: first write changed %v, %v", name, changed, err)
		}
		config, err := os.ReadFile(nf.ContainerdConfig())
		if err != nil || !strings.Contains(string(config), r.SandboxImage) {
			t.Errorf("%s: config.toml lacks the sandbox image (%v):\n%s", name, err, config)
		}
		for _, alias := range []string{"127.0.0.1:5000", "localhost:5000"} {
			hosts, err := os.ReadFile(filepath.Join(nf.Containerd(), "certs.d", alias, "hosts.toml"))
			if err != nil || !strings.Contains(string(hosts), "http://10.250.0.1:5000") {
				t.Errorf("%s: hosts.toml for %s does not name the mirror (%v):\n%s", name, alias, err, hosts)
			}
		}
		conf, err := os.ReadFile(n.ConflistPath())
		if first := i == 0; first != (err == nil) {
			t.Errorf("%s: conflist written %v, want %v", name, err == nil, first)
		} else if first && !strings.Contains(string(conf), "10.244.0.0/24") {
			t.Errorf("node 0's conflist lacks the first pod subnet:\n%s", conf)
		}
		if changed, err := n.writeRuntimeFiles(r); err != nil || changed {
			t.Errorf("%s: second write changed %v, %v", name, changed, err)
		}
	}
}
