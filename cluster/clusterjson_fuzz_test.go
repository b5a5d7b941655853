package cluster

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

// FuzzClusterJSON: cluster.json is read by every command and names what
// down kills and deletes (cgroupRoot, bridge, the nodes' namespaces).
// Whatever the bytes, of whatever version, parsing never panics, and a
// config it accepts belongs to its directory's cluster, is written as
// the current version, and survives that write and a read unchanged.
func FuzzClusterJSON(f *testing.F) {
	good, _ := testCluster()
	good.CRISocket = "/run/containerd/containerd.sock"
	good.Images["apiserver"] = "127.0.0.1:5000/kube-apiserver@sha256:" + strings.Repeat("ab", 32)
	data, _ := layout.EncodeConfig(good)
	f.Add(data, layout.DefaultName)
	unversioned, _ := json.Marshal(good)
	f.Add(unversioned, layout.DefaultName)
	other := layout.NewConfig("team-alpha-1")
	if err := other.PlaceAmong(nil, nil); err != nil {
		f.Fatal(err)
	}
	data2, _ := layout.EncodeConfig(other)
	f.Add(data2, "team-alpha-1")
	f.Add(data2, "team-alpha-2")
	// Every earlier shape devk wrote (internal/layout's migration tests).
	earlier, _ := filepath.Glob("../internal/layout/testdata/clusterjson/*.json")
	if len(earlier) == 0 {
		f.Fatal("no earlier cluster.json in ../internal/layout/testdata/clusterjson")
	}
	for _, file := range earlier {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		var c struct{ Name string }
		json.Unmarshal(data, &c)
		f.Add(data, c.Name)
	}
	f.Add([]byte(`{"apiVersion":"devk.dev/v1beta1","kind":"ClusterState","name":"devk"}`), layout.DefaultName)
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
		if len(cfg.Network.Nodes) == 0 || cfg.Network.HostBridge != layout.HostBridgeName(dir) {
			t.Fatalf("accepted a cluster without its node network: %+v", cfg.Network)
		}
		again, err := layout.EncodeConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var head struct{ APIVersion, Kind string }
		if json.Unmarshal(again, &head); head.APIVersion != layout.ConfigAPIVersion || head.Kind != layout.ConfigKind {
			t.Fatalf("written as %+v, not the current version", head)
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
