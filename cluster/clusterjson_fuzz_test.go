package cluster

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

// FuzzClusterJSON: cluster.json is read by every command and names what
// down kills and deletes (cgroupRoot, bridge). Whatever the bytes, parsing
// never panics, and a config it accepts belongs to its directory's
// cluster and survives a write and a read unchanged.
func FuzzClusterJSON(f *testing.F) {
	good := layout.NewConfig(layout.DefaultName)
	good.CRISocket = "/run/containerd/containerd.sock"
	good.Images["apiserver"] = "127.0.0.1:5000/kube-apiserver@sha256:" + strings.Repeat("ab", 32)
	data, _ := json.Marshal(good)
	f.Add(data, layout.DefaultName)
	other := layout.NewConfig("team-alpha-1")
	data2, _ := json.Marshal(other)
	f.Add(data2, "team-alpha-1")
	f.Add(data2, "team-alpha-2")
	f.Add([]byte(`{"name":"devk","cgroupRoot":"/kubepods","bridge":"eth0"}`), layout.DefaultName)
	f.Add([]byte(`{"name":"devk","cgroupRoot":"","bridge":"devk0","images":{"x":"a:b"}}`), layout.DefaultName)
	f.Add([]byte(`null`), layout.DefaultName)
	f.Fuzz(func(t *testing.T, data []byte, dir string) {
		cfg, err := layout.ParseConfig(data, dir)
		if err != nil {
			return
		}
		if cfg.Name != dir || layout.ValidateName(dir) != nil {
			t.Fatalf("accepted a config of %q in directory %q", cfg.Name, dir)
		}
		if cfg.CgroupRoot != "/devk-"+dir || cfg.Bridge != layout.BridgeName(dir) || len(cfg.Bridge) > 15 {
			t.Fatalf("accepted cgroupRoot %q, bridge %q for cluster %q", cfg.CgroupRoot, cfg.Bridge, dir)
		}
		again, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		back, err := layout.ParseConfig(again, dir)
		if err != nil {
			t.Fatalf("an accepted config does not read back: %v", err)
		}
		if !reflect.DeepEqual(back, cfg) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", cfg, back)
		}
	})
}
