package conformance

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/devk/devk/source"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       Options
		wantErr string
	}{
		{name: "defaults", o: Options{Parallel: 1}},
		{name: "focus and skip", o: Options{Parallel: 4, Focus: `\[sig-node\] Pods`, Skip: "Serial|Slow"}},
		{name: "no processes", o: Options{Parallel: 0}, wantErr: "--parallel 0: give 1"},
		{name: "too many processes", o: Options{Parallel: MaxParallel + 1}, wantErr: "ginkgo processes"},
		{name: "bad focus", o: Options{Parallel: 1, Focus: "Pods ("}, wantErr: `--focus "Pods (" is not a regular expression`},
		{name: "bad skip", o: Options{Parallel: 1, Skip: "[sig-node"}, wantErr: `--skip "[sig-node" is not a regular expression`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestSuiteFits(t *testing.T) {
	if err := suiteFits("v1.34.4", "v1.34.4", false); err != nil {
		t.Fatal(err)
	}
	// A build of the tree with changes is its commit's version.
	if err := suiteFits("v1.34.4", "v1.34.4-dirty", false); err != nil {
		t.Fatal(err)
	}
	if err := suiteFits("v1.35.0-alpha.1.3+0123456789abcd-dirty", "v1.35.0-alpha.1.3+0123456789abcd", false); err != nil {
		t.Fatal(err)
	}
	if err := suiteFits("v1.34.4-dirty", "v1.34.5-dirty", false); err == nil {
		t.Fatal("v1.34.4-dirty and v1.34.5-dirty: no error")
	}
	err := suiteFits("v1.34.3", "v1.34.4", false)
	if err == nil || !strings.Contains(err.Error(), "e2e.test is v1.34.3 and the cluster's API server is v1.34.4") || !strings.Contains(err.Error(), "devk build e2e") {
		t.Fatalf("sameVersion = %v", err)
	}
}

func TestRepoList(t *testing.T) {
	data, err := RepoList("127.0.0.1:5000")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := yaml.UnmarshalStrict(data, &got); err != nil {
		t.Fatal(err)
	}
	// Every key of the framework's RegistryList, each under the cluster's
	// registry and apart from the others (except the two the framework
	// itself gives the same default, gcRegistry and gcEtcdRegistry).
	if len(got) != len(Registries) {
		t.Fatalf("%d keys, want %d: %s", len(got), len(Registries), data)
	}
	seen := map[string]string{}
	for k, v := range got {
		if !strings.HasPrefix(v, "127.0.0.1:5000/") {
			t.Errorf("%s: %s is not in the cluster's registry", k, v)
		}
		if other, ok := seen[v]; ok && Registries[k] != Registries[other] {
			t.Errorf("%s and %s share %s", k, other, v)
		}
		seen[v] = k
	}
	if got["promoterE2eRegistry"] != "127.0.0.1:5000/registry.k8s.io/e2e-test-images" || got["invalidRegistry"] != "127.0.0.1:5000/invalid.registry.k8s.io/invalid" {
		t.Errorf("repo list:\n%s", data)
	}
	for _, bad := range []string{"", "http://127.0.0.1:5000"} {
		if _, err := RepoList(bad); err == nil {
			t.Errorf("RepoList(%q) took it", bad)
		}
	}
}

// TestNodeNeeds checks that a spec needing more nodes than the cluster
// has is left out of the run with a --skip that matches exactly it, and
// counted with its reason.
func TestNodeNeeds(t *testing.T) {
	j := &Job{Options: Options{Skip: "Serial"}}
	j.Result.Nodes, j.Result.Selected = 1, 3
	name := NodeNeeds[0].Spec + " [Conformance]"
	why := j.tooFewNodes(name)
	if !strings.Contains(why, "needs 2 nodes, the cluster has 1") {
		t.Fatalf("tooFewNodes = %q", why)
	}
	if j.tooFewNodes("[sig-node] Pods should get a host IP [Conformance]") != "" {
		t.Fatal("a one-node spec was left out")
	}
	j.exclude(name, why)
	if j.Result.ToRun() != 2 || len(j.Result.Excluded) != 1 || j.Result.Excluded[0].Specs[0] != name {
		t.Fatalf("excluded %+v, to run %d", j.Result.Excluded, j.Result.ToRun())
	}
	flags := j.ginkgoFilters("--ginkgo.")
	var skips []string
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--ginkgo.skip="); ok {
			skips = append(skips, v)
		}
	}
	if len(skips) != 2 || !slices.Contains(skips, "Serial") {
		t.Fatalf("filters %q: want the user's --skip and one for the excluded spec", flags)
	}
	for _, re := range skips {
		if re != "Serial" && !regexp.MustCompile(re).MatchString(name) {
			t.Fatalf("skip %q does not match %q", re, name)
		}
	}
	j.Result.Nodes = 2
	if j.tooFewNodes(name) != "" {
		t.Fatal("left out on a cluster with the nodes it needs")
	}
}

// TestBuiltSuite: KeepSuite takes e2e.test and ginkgo where devk build
// puts them, and only when both are there.
func TestBuiltSuite(t *testing.T) {
	root := t.TempDir()
	j := &Job{tree: &source.Tree{Root: root}}
	if j.builtSuite() {
		t.Fatal("an empty tree has a built suite")
	}
	bin := filepath.Join(root, "_output", "devk", "bin", runtime.GOOS+"_"+runtime.GOARCH)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, f := range []string{"e2e.test", "ginkgo"} {
		if j.builtSuite() {
			t.Fatalf("built with %d of the two binaries", i)
		}
		if err := os.WriteFile(filepath.Join(bin, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if !j.builtSuite() || j.e2eTest != filepath.Join(bin, "e2e.test") || j.ginkgo != filepath.Join(bin, "ginkgo") {
		t.Fatalf("suite %q and %q, want both in %s", j.e2eTest, j.ginkgo, bin)
	}
}
