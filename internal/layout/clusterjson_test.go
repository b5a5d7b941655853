package layout

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The files in testdata/clusterjson are cluster.json as earlier devks
// wrote them:
//
//   - unversioned-before-roles.json: `devk up` of the conformance bench
//     at commit b31c417 (before nodes had roles and cgroup roots);
//   - unversioned-before-netns.json: cluster.SaveConfig of commit
//     5a47f87^ (before nodes had network namespaces), of a cluster
//     whose up recorded its runtime, images, version and times;
//   - unversioned-ha.json: cluster.SaveConfig of the last devk before
//     cluster.json had a version, of a cluster of two control-plane
//     nodes and a worker being removed, with a spec and the FORWARD rule;
//   - v1alpha1-ha.json: the same cluster as devk.dev/v1alpha1 wrote it
//     (nodeName and advertiseIP beside network.nodes[0]).
func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/clusterjson/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"apiVersion"`) {
		t.Fatalf("%s has an apiVersion: it is not a file from before cluster.json had one", name)
	}
	return data
}

// TestMigrateEarlierShapes: each earlier cluster.json reads as today's
// Config, with what the file lacked filled in; written again it is the
// current version, and reads back the same.
func TestMigrateEarlierShapes(t *testing.T) {
	for _, tc := range []struct {
		file, dir string
		check     func(t *testing.T, c Config)
	}{
		{"unversioned-before-roles.json", "devk", func(t *testing.T, c Config) {
			want := NodeNet{Name: "devk-control-plane", NetNS: "devk-devk-control-plane", IP: "10.250.0.2", HostVeth: "dkve965cd7748",
				Role: RoleControlPlane, CgroupRoot: "/devk-devk"}
			if len(c.Network.Nodes) != 1 || c.Network.Nodes[0] != want {
				t.Errorf("nodes = %+v, want [%+v]", c.Network.Nodes, want)
			}
			if len(c.LastRun) != 39 || c.KubeVersion != "v1.34.4" || len(c.Images) != 7 {
				t.Errorf("lost what the file holds: %d phase times, version %q, %d images", len(c.LastRun), c.KubeVersion, len(c.Images))
			}
		}},
		{"unversioned-ha.json", "ha", func(t *testing.T, c Config) {
			if got := c.NodeNames(); !reflect.DeepEqual(got, []string{"ha-control-plane", "ha-control-plane2", "ha-worker"}) {
				t.Errorf("nodes = %v", got)
			}
			if got := c.ControlPlaneNames(); !reflect.DeepEqual(got, []string{"ha-control-plane", "ha-control-plane2"}) {
				t.Errorf("control planes = %v", got)
			}
			if !c.HA() || c.APIServerURL() != "https://10.250.1.1:6443" || !c.Network.ForwardRule || !c.KeepTaint {
				t.Errorf("endpoint %s, forward rule %v, keep taint %v", c.APIServerURL(), c.Network.ForwardRule, c.KeepTaint)
			}
			if got := c.LeavingNodes(); !reflect.DeepEqual(got, []string{"ha-worker"}) || c.Network.Nodes[1].PodCIDR != "10.244.1.0/24" {
				t.Errorf("leaving %v, node 1's pods %s", got, c.Network.Nodes[1].PodCIDR)
			}
			if c.Spec.LeafValidity() != 48*time.Hour || !c.Spec.FeatureGates["InPlacePodVerticalScaling"] || c.Spec.APIServer.ExtraArgs["v"] != "4" {
				t.Errorf("spec = %+v", c.Spec)
			}
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := ParseConfig(readFixture(t, tc.file), tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
			out, err := EncodeConfig(c)
			if err != nil {
				t.Fatal(err)
			}
			var h configHeader
			if err := json.Unmarshal(out, &h); err != nil || h != (configHeader{ConfigAPIVersion, ConfigKind}) {
				t.Fatalf("written as %+v, %v; want apiVersion %s, kind %s", h, err, ConfigAPIVersion, ConfigKind)
			}
			back, err := ParseConfig(out, tc.dir)
			if err != nil || !reflect.DeepEqual(back, c) {
				t.Fatalf("the written file reads back as %+v, %v; want %+v", back, err, c)
			}
			if again, _ := EncodeConfig(back); string(again) != string(out) {
				t.Errorf("written twice it differs:\n%s\n%s", out, again)
			}
		})
	}
}

// TestMigrateRefusesHostNetworkCluster: a cluster made before nodes had
// network namespaces is refused by every command, saying what it is and
// how to take it down.
func TestMigrateRefusesHostNetworkCluster(t *testing.T) {
	_, err := ParseConfig(readFixture(t, "unversioned-before-netns.json"), "devk")
	if err == nil {
		t.Fatal("a cluster whose node shares the host's network was read")
	}
	for _, want := range []string{"before nodes had their own network namespace", "127.0.0.1", "the devk that made it", "ip link del"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestReadV1alpha1: a v1alpha1 cluster.json reads as today's Config,
// node 0 from its network, and is written as the current version
// without the fields v1alpha2 dropped.
func TestReadV1alpha1(t *testing.T) {
	data, err := os.ReadFile("testdata/clusterjson/v1alpha1-ha.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(data, "ha")
	if err != nil {
		t.Fatal(err)
	}
	if n0 := c.FirstNode(); n0.Name != "ha-control-plane" || n0.IP != "10.250.1.2" || len(c.Network.Nodes) != 3 {
		t.Errorf("node 0 = %+v of %d", n0, len(c.Network.Nodes))
	}
	out, err := EncodeConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.Contains(s, `"apiVersion": "`+ConfigAPIVersion+`"`) || strings.Contains(s, "nodeName") || strings.Contains(s, "advertiseIP") {
		t.Errorf("written again:\n%s", s)
	}
}

// TestMigrateOnlyUnversioned: what the migration fills in (node 0's role
// and cgroup root) is filled only in a file from before cluster.json had
// a version, and only for node 0; a versioned file must say it.
func TestMigrateOnlyUnversioned(t *testing.T) {
	c := placed(t, "devk")
	addNode(t, &c, "devk-worker", RoleWorker)
	c.Network.Nodes[1].Role = ""
	unversioned, _ := json.Marshal(c)
	if _, err := ParseConfig(unversioned, "devk"); err == nil || !strings.Contains(err.Error(), "network.nodes[1].role") {
		t.Errorf("an unversioned file's worker without a role: %v", err)
	}
	c.Network.Nodes[1].Role = RoleWorker
	c.Network.Nodes[0].Role, c.Network.Nodes[0].CgroupRoot = "", ""
	unversioned, _ = json.Marshal(c)
	if got, err := ParseConfig(unversioned, "devk"); err != nil || !got.Network.Nodes[0].IsControlPlane() || got.Network.Nodes[0].CgroupRoot != c.CgroupRoot {
		t.Errorf("an unversioned file's node 0 without role and cgroup root: %+v, %v", got.Network.Nodes, err)
	}
	versioned, _ := EncodeConfig(c)
	if _, err := ParseConfig(versioned, "devk"); err == nil || !strings.Contains(err.Error(), "network.nodes[0].role") {
		t.Errorf("a versioned file's node 0 without a role: %v", err)
	}
}

// TestDecodeVersions: a version or kind this devk does not know is
// refused, saying what wrote it and what to do; nothing is guessed.
func TestDecodeVersions(t *testing.T) {
	c := placed(t, "devk")
	current, _ := EncodeConfig(c)
	with := func(apiVersion, kind string) []byte {
		var m map[string]any
		if err := json.Unmarshal(current, &m); err != nil {
			t.Fatal(err)
		}
		m["apiVersion"], m["kind"] = apiVersion, kind
		data, _ := json.Marshal(m)
		return data
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string // "" for accepted
	}{
		{"current", current, ""},
		{"newer", with("devk.dev/v1beta1", ConfigKind), "a newer devk made or changed this cluster, and this devk reads up to " + ConfigAPIVersion},
		{"the config file's kind", with(ConfigAPIVersion, "Cluster"), `kind is "Cluster", want ClusterState`},
		{"no kind", with(ConfigAPIVersion, ""), `kind is "", want ClusterState`},
		{"kind without version", with("", ConfigKind), `apiVersion is "", want ` + ConfigAPIVersion},
		{"another group", with("kind.x-k8s.io/v1alpha4", "Cluster"), "not devk's"},
		{"not an object", []byte(`[1]`), "not a devk cluster config"},
		{"empty", nil, "not a devk cluster config (unexpected end of JSON input)"},
		{"null", []byte(`null`), "name"},
	} {
		_, err := ParseConfig(tc.data, "devk")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
}
