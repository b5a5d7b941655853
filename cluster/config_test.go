package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

func TestBridgeNamesDoNotCollide(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"devk", "dev2", "team-alpha-1", "team-alpha-2", "team-alpha", "a", "abcdefghij", "abcdefghijk", "abcdefghijl"} {
		b := layout.BridgeName(name)
		if len(b) > 15 {
			t.Errorf("%s: bridge %q is longer than 15 bytes", name, b)
		}
		if other, ok := seen[b]; ok {
			t.Errorf("clusters %s and %s share bridge %s", name, other, b)
		}
		seen[b] = name
	}
}

// TestTamperedConfigIsRefused: every field down acts on is checked when
// cluster.json is read, before any phase runs.
func TestTamperedConfigIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(*layout.Config)
		want   string
	}{
		{"no cgroupRoot", func(c *layout.Config) { c.CgroupRoot = "" }, "cgroupRoot"},
		{"cgroupRoot of the host's pods", func(c *layout.Config) { c.CgroupRoot = "/kubepods" }, "cgroupRoot"},
		{"cgroupRoot escaping", func(c *layout.Config) { c.CgroupRoot = "/devk-devk/../../" }, "cgroupRoot"},
		{"cgroupRoot of another cluster", func(c *layout.Config) { c.CgroupRoot = "/devk-other" }, "cgroupRoot"},
		{"host bridge", func(c *layout.Config) { c.Bridge = "eth0" }, "bridge"},
		{"another cluster's bridge", func(c *layout.Config) { c.Bridge = "devk-other" }, "bridge"},
		{"other name", func(c *layout.Config) { c.Name = "other" }, "name"},
		{"name with a path", func(c *layout.Config) { c.Name = "../devk" }, "cluster name"},
		{"node name", func(c *layout.Config) { c.Network.Nodes[0].Name = "a/../b" }, "network.nodes[0].name"},
		{"node address", func(c *layout.Config) { c.Network.Nodes[0].IP = "localhost; rm -rf /" }, "network.nodes[0].ip"},
		{"service CIDR", func(c *layout.Config) { c.ServiceCIDR = "10.96.0.0" }, "serviceCIDR"},
		{"pod CIDR", func(c *layout.Config) { c.PodCIDR = "fd00::/64" }, "podCIDR"},
		{"DNS domain", func(c *layout.Config) { c.DNSDomain = "../x" }, "dnsDomain"},
		{"port", func(c *layout.Config) { c.Ports.APIServer = 70000 }, "ports.apiserver"},
		{"registry", func(c *layout.Config) { c.Registry = "/tmp/x" }, "registry"},
		{"CRI socket relative", func(c *layout.Config) { c.CRISocket = "run/containerd.sock" }, "criSocket"},
		{"CRI socket unclean", func(c *layout.Config) { c.CRISocket = "/run/../etc/x.sock" }, "criSocket"},
		{"image by tag", func(c *layout.Config) { c.Images["apiserver"] = "127.0.0.1:5000/kube-apiserver:latest" }, "images.apiserver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			cfg, _ := testCluster()
			tc.tamper(&cfg)
			dir := filepath.Join(home, "clusters", layout.DefaultName)
			os.MkdirAll(dir, 0o755)
			data, _ := layout.EncodeConfig(cfg)
			os.WriteFile(filepath.Join(dir, "cluster.json"), data, 0o644)
			_, err := Open(Options{Home: home})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want an error about %s", err, tc.want)
			}
		})
	}
	// The untampered config opens.
	home := t.TempDir()
	cfg, _ := testCluster()
	cfg.CRISocket = "/run/containerd/containerd.sock"
	cfg.Images["apiserver"] = "127.0.0.1:5000/kube-apiserver@sha256:" + strings.Repeat("ab", 32)
	dir := filepath.Join(home, "clusters", layout.DefaultName)
	os.MkdirAll(dir, 0o755)
	data, _ := layout.EncodeConfig(cfg)
	os.WriteFile(filepath.Join(dir, "cluster.json"), data, 0o644)
	if _, err := Open(Options{Home: home}); err != nil {
		t.Fatalf("a good config: %v", err)
	}
}

// TestSymlinkedHomeResolves: mount points are matched against real paths.
func TestSymlinkedHomeResolves(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "home")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Home: link})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(real)
	if c.Home != want || !strings.HasPrefix(c.Files.Dir, want+"/") {
		t.Fatalf("home %s, dir %s; want them under %s", c.Home, c.Files.Dir, want)
	}
}

// TestKeepTaintRemembered: --keep-taint is remembered in cluster.json; a
// later up without the flag keeps the choice, an explicit flag changes it.
func TestKeepTaintRemembered(t *testing.T) {
	home := t.TempDir()
	open := func(keep *bool) *Cluster {
		t.Helper()
		c, err := Open(Options{Home: home, KeepTaint: keep})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	yes, no := true, false
	if c := open(nil); c.Config.KeepTaint {
		t.Error("a new cluster keeps the taint without --keep-taint")
	}
	c := open(&yes)
	if !c.Config.KeepTaint {
		t.Fatal("--keep-taint not taken")
	}
	if err := c.SaveConfig(); err != nil {
		t.Fatal(err)
	}
	if c := open(nil); !c.Config.KeepTaint {
		t.Error("a later up without the flag forgot --keep-taint")
	}
	if c := open(&no); c.Config.KeepTaint {
		t.Error("--keep-taint=false did not override the remembered choice")
	}
}
