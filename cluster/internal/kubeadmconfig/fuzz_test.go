package kubeadmconfig

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
)

// FuzzPatches: whatever a merge patch and a JSON 6902 patch hold,
// applying them never panics, and either fails or leaves valid YAML:
// the documents Init and Join write, each still what it was (its
// apiVersion and kind), in order.
func FuzzPatches(f *testing.F) {
	f.Add("kind: ClusterConfiguration\napiServer:\n  extraArgs:\n  - {name: v, value: \"4\"}\n", ClusterConfigurationKind, "- {op: add, path: /apiServer/certSANs/-, value: x}\n")
	f.Add("kind: InitConfiguration\nnodeRegistration:\n  kubeletExtraArgs: {v: null}\n", InitConfigurationKind, "[{\"op\": \"remove\", \"path\": \"/nodeRegistration\"}]")
	f.Add("kind: JoinConfiguration\ndiscovery: null\n", JoinConfigurationKind, "- {op: move, from: /discovery, path: /x}\n")
	f.Add("kind: KubeletConfiguration\nevictionHard: {memory.available: null}\n", "KubeletConfiguration", "- {op: copy, from: /kind, path: /apiVersion}\n")
	f.Add("kind: ClusterConfiguration\napiServer: {certSANs: [1]}\n", "KubeProxyConfiguration", "- {op: replace, path: /conntrack/min, value: null}\n")
	f.Add("kind: ClusterConfiguration\napiServer: {extraArgs: [{name: a, value: b}, {name: a, value: null}]}\n", ClusterConfigurationKind, "- {op: add, path: /apiServer/extraArgs/0, value: {}}\n")
	f.Add("apiVersion: kubeadm.k8s.io\nkind: ClusterConfiguration\netcd: {local: {extraArgs: 1}}\n", ClusterConfigurationKind, "- {op: test, path: '', value: {}}\n")
	f.Add("kind: ClusterConfiguration\n", ClusterConfigurationKind, "[{\"op\":\"test\",\"path\":\"\"}]") // the patch library panicked on a test without a value
	f.Fuzz(func(t *testing.T, merge, kind, ops string) {
		in := testInput()
		in.Spec.KubeadmConfigPatches = []string{merge}
		in.Spec.KubeadmConfigPatchesJSON6902 = []layout.PatchJSON6902{{Kind: kind, Patch: ops}}
		for _, r := range []struct {
			render func(Input, Node) ([]byte, error)
			node   Node
			kinds  []string
		}{
			{Init, cp0, []string{InitConfigurationKind, ClusterConfigurationKind, "KubeletConfiguration", "KubeProxyConfiguration"}},
			{Join, cp1, []string{JoinConfigurationKind}},
		} {
			out, err := r.render(in, r.node)
			if err != nil {
				continue
			}
			parts := strings.Split(string(out), "\n"+documentSeparator)
			if len(parts) != len(r.kinds) {
				t.Fatalf("%d documents, want %d:\n%s", len(parts), len(r.kinds), out)
			}
			for i, part := range parts {
				var tm struct{ APIVersion, Kind string }
				if err := yaml.Unmarshal([]byte(part), &tm); err != nil {
					t.Fatalf("document %d is not YAML: %v\n%s", i, err, part)
				}
				gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
				if tm.Kind != r.kinds[i] || !slices.Contains(Kinds, gvk) {
					t.Fatalf("document %d is %s, want %s:\n%s", i, gvk, r.kinds[i], part)
				}
			}
		}
	})
}
