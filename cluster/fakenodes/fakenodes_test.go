package fakenodes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/internal/testutil"
)

// TestPrecheck: what `devk up` checks before it changes anything, for a
// cluster it would make: the count against the pod subnet, the stage
// files; nothing is written.
func TestPrecheck(t *testing.T) {
	home := t.TempDir()
	dir := t.TempDir()
	n := func(i int) *int { return &i }
	stage := filepath.Join(dir, "stages.yaml")
	if err := os.WriteFile(stage, []byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: s\nspec:\n  resourceRef:\n    kind: Pod\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	config := func(name, body string) string {
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte("apiVersion: devk.dev/v1alpha1\nkind: Cluster\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		o    Options
		err  string
	}{
		{"fits", Options{Options: cluster.Options{Home: home, Name: "pc", FakeNodes: n(255)}}, ""},
		{"one too many", Options{Options: cluster.Options{Home: home, Name: "pc", FakeNodes: n(256)}},
			"256 fake and 1 real nodes do not fit the cluster's pod subnet 10.244.0.0/16: it has room for 256 nodes (a /24 each, the controller-manager's --node-cidr-mask-size); ask for at most 255 fake nodes, or make a cluster whose config file sets networking.podSubnet to a /15 or wider (512 nodes)"},
		{"negative", Options{Options: cluster.Options{Home: home, Name: "pc", FakeNodes: n(-1)}}, "--fake-nodes -1: want 0 or more"},
		{"a wider subnet", Options{Options: cluster.Options{Home: home, Name: "pc", FakeNodes: n(1000), UserConfigFile: config("wide", "networking:\n  podSubnet: 10.244.0.0/14\n")}}, ""},
		{"own stages", Options{Options: cluster.Options{Home: home, Name: "pc", UserConfigFile: config("own", "fakeNodes:\n  count: 3\n  stages: ["+stage+"]\n")}}, ""},
		{"a missing stage file", Options{Options: cluster.Options{Home: home, Name: "pc", UserConfigFile: config("missing", "fakeNodes:\n  count: 3\n  stages: [nope.yaml]\n")}},
			"fakeNodes.stages: stage file: open " + filepath.Join(dir, "nope.yaml")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.WantErr(t, Precheck(tc.o), tc.err)
		})
	}
	if ents, _ := os.ReadDir(home); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("Precheck wrote %s in the home", strings.Join(names, ", "))
	}
}
