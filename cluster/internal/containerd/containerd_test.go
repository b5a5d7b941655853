package containerd

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestConfigTOML(t *testing.T) {
	for _, restrict := range []bool{true, false} {
		cc := Config{Root: "/c/root", State: "/c/state", Socket: "/c/run/containerd.sock", OptDir: "/c/opt",
			SandboxImage: "127.0.0.1:5000/pause:devk", RestrictOOMScoreAdj: restrict, CNIBinDir: "/usr/lib/cni", CNIConfDir: "/c/net.d", CertsDir: "/c/certs.d", RuncRoot: "/c/state/runc"}
		data, err := ConfigTOML(cc)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if _, err := toml.Decode(string(data), &doc); err != nil {
			t.Fatalf("not TOML: %v\n%s", err, data)
		}
		get := func(path ...string) any {
			var cur any = doc
			for _, k := range path {
				m, ok := cur.(map[string]any)
				if !ok {
					return nil
				}
				cur = m[k]
			}
			return cur
		}
		cri := []string{"plugins", "io.containerd.grpc.v1.cri"}
		checks := []struct {
			path []string
			want any
		}{
			{[]string{"version"}, int64(2)},
			{[]string{"root"}, "/c/root"},
			{[]string{"state"}, "/c/state"},
			{[]string{"grpc", "address"}, "/c/run/containerd.sock"},
			{[]string{"plugins", "io.containerd.internal.v1.opt", "path"}, "/c/opt"},
			{append(cri, "sandbox_image"), "127.0.0.1:5000/pause:devk"},
			{append(cri, "restrict_oom_score_adj"), restrict},
			{append(cri, "stream_server_address"), "127.0.0.1"},
			{append(cri, "containerd", "runtimes", "runc", "options", "SystemdCgroup"), false},
			// Nothing of runc's or the pods' network namespaces on the host's /run.
			{append(cri, "containerd", "runtimes", "runc", "options", "Root"), "/c/state/runc"},
			{append(cri, "netns_mounts_under_state_dir"), true},
			{append(cri, "cni", "conf_dir"), "/c/net.d"},
			{append(cri, "cni", "bin_dir"), "/usr/lib/cni"},
			{append(cri, "registry", "config_path"), "/c/certs.d"},
		}
		for _, c := range checks {
			if got := get(c.path...); got != c.want {
				t.Errorf("restrict=%v: %s = %#v, want %#v", restrict, strings.Join(c.path, "."), got, c.want)
			}
		}
	}
}

// TestConfigTOMLQuoting: paths TOML must escape (a quote, a
// backslash, a tab, a control character, non-ASCII) come back from the
// written file exactly as they went in.
func TestConfigTOMLQuoting(t *testing.T) {
	odd := "/home/o'neil/\"devk\"\\dir\twith\x01 é"
	cc := Config{Root: odd + "/root", State: odd + "/state", Socket: odd + "/run/containerd.sock", OptDir: odd + "/opt",
		SandboxImage: "127.0.0.1:5000/pause@sha256:" + strings.Repeat("a", 64), CNIBinDir: `C:\cni`, CNIConfDir: odd + "/net.d", CertsDir: odd + "/certs.d"}
	data, err := ConfigTOML(cc)
	if err != nil {
		t.Fatal(err)
	}
	var got configFile
	if _, err := toml.Decode(string(data), &got); err != nil {
		t.Fatalf("not TOML: %v\n%s", err, data)
	}
	if want := configFileOf(cc); !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v\nfile:\n%s", got, want, data)
	}
}

func TestHostsTOMLAndAliases(t *testing.T) {
	data, err := HostsTOML("10.250.1.1:5000")
	if err != nil {
		t.Fatal(err)
	}
	var doc hostsFile
	if _, err := toml.Decode(string(data), &doc); err != nil {
		t.Fatal(err)
	}
	want := hostsFile{Server: "http://10.250.1.1:5000", Host: map[string]hostEntry{"http://10.250.1.1:5000": {Capabilities: []string{"pull", "resolve"}}}}
	if !reflect.DeepEqual(doc, want) {
		t.Errorf("hosts.toml = %+v, want %+v\n%s", doc, want, data)
	}
	if got := RegistryAliases("127.0.0.1:5000"); !slices.Equal(got, []string{"127.0.0.1:5000", "localhost:5000"}) {
		t.Errorf("aliases = %v", got)
	}
}

func TestCNIConflist(t *testing.T) {
	data, err := CNIConflist("devk-devk", "devk0", "10.244.0.0/24", "/c/cni/networks", "10.250.0.0/24", "10.96.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	br := conf.Plugins[0]
	// No masquerading by the plugin: the node's own rule masquerades what
	// leaves the pod network only (pods on other nodes see pod addresses).
	if br["type"] != "bridge" || br["bridge"] != "devk0" || br["ipMasq"] != false {
		t.Errorf("bridge plugin %v", br)
	}
	if len(conf.Plugins) != 3 || conf.Plugins[1]["type"] != "portmap" {
		t.Errorf("want bridge, portmap (hostPort) and loopback: %v", conf.Plugins)
	}
	// The bridge plugin refuses hairpin and promiscuous mode together.
	if br["hairpinMode"] == true && br["promiscMode"] == true {
		t.Error("hairpinMode and promiscMode both set")
	}
	ipam := br["ipam"].(map[string]any)
	if ipam["dataDir"] != "/c/cni/networks" {
		t.Errorf("host-local keeps its state outside the cluster dir: %v", ipam)
	}
	// Pods reach the node (the API server) and Services through the
	// bridge, and have no default route.
	routes, _ := json.Marshal(ipam["routes"])
	if string(routes) != `[{"dst":"10.250.0.0/24"},{"dst":"10.96.0.0/16"}]` || br["isDefaultGateway"] == true {
		t.Errorf("pod routes %s, default gateway %v", routes, br["isDefaultGateway"])
	}
}

func TestConflistRoutesThePodNetwork(t *testing.T) {
	data, err := CNIConflist("devk-devk", "devk0", "10.244.1.0/24", "/c/cni/networks", "10.250.0.0/24", "10.96.0.0/16", "10.244.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			IPMasq bool `json:"ipMasq"`
			IPAM   struct {
				Ranges [][]map[string]string `json:"ranges"`
				Routes []map[string]string   `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	br := conf.Plugins[0]
	if br.IPMasq {
		t.Error("the bridge plugin masquerades pod-to-pod traffic between nodes")
	}
	if br.IPAM.Ranges[0][0]["subnet"] != "10.244.1.0/24" || len(br.IPAM.Routes) != 3 || br.IPAM.Routes[2]["dst"] != "10.244.0.0/16" {
		t.Errorf("ipam %+v", br.IPAM)
	}
}
