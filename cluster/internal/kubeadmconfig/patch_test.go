package kubeadmconfig

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/devk/devk/internal/layout"
)

// TestPatches: the config file's patches applied to what Init and Join
// write: each case's merge and JSON 6902 patches, then the values they
// leave or the error.
func TestPatches(t *testing.T) {
	type check struct {
		kind, path string
		want       any
	}
	type argsCheck struct {
		kind, path string
		want       []string
	}
	for _, tc := range []struct {
		name   string
		merge  []string
		json   []layout.PatchJSON6902
		join   bool
		want   []check
		args   []argsCheck
		errors []string // the error says each
	}{
		{
			name:  "a merge patch adds a nested field and keeps its siblings",
			merge: []string{"kind: ClusterConfiguration\netcd:\n  local:\n    serverCertSANs: [etcd.local]\n"},
			want: []check{{ClusterConfigurationKind, "etcd.local.serverCertSANs", []any{"etcd.local"}},
				{ClusterConfigurationKind, "etcd.local.dataDir", "/var/lib/etcd"}},
		},
		{
			name:  "a merge patch overrides a value",
			merge: []string{"apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  dnsDomain: example.local\n"},
			want: []check{{ClusterConfigurationKind, "networking.dnsDomain", "example.local"},
				{ClusterConfigurationKind, "networking.podSubnet", "10.244.0.0/16"}},
		},
		{
			name:  "extraArgs merge by name: replaced in place, added at the end, removed by null",
			merge: []string{"kind: ClusterConfiguration\napiServer:\n  extraArgs:\n  - {name: v, value: \"6\"}\n  - {name: profiling, value: \"false\"}\n  - {name: runtime-config, value: null}\n"},
			args: []argsCheck{{ClusterConfigurationKind, "apiServer.extraArgs",
				[]string{"emulated-version=1.33", "feature-gates=ComponentFlagz=true,ComponentStatusz=true", "v=6", "profiling=false"}}},
		},
		{
			name:  "extraArgs as a mapping of flag: value",
			merge: []string{"kind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n    v: \"3\"\n    controllers: null\nscheduler:\n  extraArgs:\n    v: \"2\"\n"},
			args: []argsCheck{{ClusterConfigurationKind, "controllerManager.extraArgs", []string{"emulated-version=1.33", "feature-gates=ComponentFlagz=true", "leader-elect=false", "v=3"}},
				{ClusterConfigurationKind, "scheduler.extraArgs", []string{"emulated-version=1.33", "feature-gates=ComponentFlagz=true", "leader-elect=false", "v=2"}}},
		},
		{
			name:  "null removes a whole list",
			merge: []string{"kind: ClusterConfiguration\napiServer:\n  extraArgs: null\n  certSANs: null\n"},
			want:  []check{{ClusterConfigurationKind, "apiServer", map[string]any{}}},
		},
		{
			name:  "kubeletExtraArgs merge by name",
			merge: []string{"kind: InitConfiguration\nnodeRegistration:\n  kubeletExtraArgs:\n  - {name: max-pods, value: \"90\"}\n"},
			args:  []argsCheck{{InitConfigurationKind, "nodeRegistration.kubeletExtraArgs", []string{"cgroup-root=/devk-dev", "max-pods=90", "node-ip=10.250.0.2"}}},
		},
		{
			name:  "a patch of a join",
			merge: []string{"kind: JoinConfiguration\nnodeRegistration:\n  kubeletExtraArgs:\n  - {name: v, value: \"5\"}\n"}, join: true,
			args: []argsCheck{{JoinConfigurationKind, "nodeRegistration.kubeletExtraArgs", []string{"cgroup-root=/devk-dev_dev-worker", "max-pods=50", "node-ip=10.250.0.3", "v=5"}}},
		},
		{
			name:  "init leaves a join's patch out, and a join the cluster's",
			merge: []string{"kind: JoinConfiguration\nnodeRegistration:\n  name: other\n", "kind: ClusterConfiguration\nclusterName: other\n"},
			want:  []check{{InitConfigurationKind, "nodeRegistration.name", cp0.Name}, {ClusterConfigurationKind, "clusterName", "other"}},
		},
		{
			name:  "certSANs add to devk's",
			merge: []string{"kind: ClusterConfiguration\napiServer:\n  certSANs: [127.0.0.1, api.example]\n"},
			want:  []check{{ClusterConfigurationKind, "apiServer.certSANs", []any{"10.250.0.2", "127.0.0.1", "api.example"}}},
		},
		{
			name:  "a group alone selects any of its versions",
			merge: []string{"apiVersion: kubeadm.k8s.io\nkind: InitConfiguration\nskipPhases: [addon/kube-proxy]\n"},
			want:  []check{{InitConfigurationKind, "skipPhases", []any{"addon/kube-proxy"}}, {InitConfigurationKind, "apiVersion", APIVersion}},
		},
		{
			name: "the kubelet's and kube-proxy's documents",
			merge: []string{"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 30\nevictionHard:\n  memory.available: 1Gi\n",
				"kind: KubeProxyConfiguration\nlogging:\n  verbosity: 4\n"},
			want: []check{{"KubeletConfiguration", "maxPods", float64(30)}, {"KubeletConfiguration", "evictionHard",
				map[string]any{"memory.available": "1Gi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%"}},
				{"KubeProxyConfiguration", "logging.verbosity", float64(4)}},
		},
		{
			name:  "JSON 6902 add, replace, remove, after the merge patches",
			merge: []string{"kind: ClusterConfiguration\nnetworking:\n  dnsDomain: merged.local\n"},
			json: []layout.PatchJSON6902{
				{Group: Group, Version: Version, Kind: ClusterConfigurationKind, Patch: "- {op: add, path: /apiServer/extraArgs/-, value: {name: profiling, value: \"false\"}}\n- {op: replace, path: /networking/dnsDomain, value: example.local}\n- {op: remove, path: /apiServer/certSANs}\n"},
				{Kind: "KubeletConfiguration", Patch: `[{"op": "replace", "path": "/failSwapOn", "value": true}]`},
			},
			want: []check{{ClusterConfigurationKind, "networking.dnsDomain", "example.local"}, {ClusterConfigurationKind, "apiServer.certSANs", nil},
				{"KubeletConfiguration", "failSwapOn", true}},
			args: []argsCheck{{ClusterConfigurationKind, "apiServer.extraArgs",
				[]string{"emulated-version=1.33", "feature-gates=ComponentFlagz=true,ComponentStatusz=true", "runtime-config=api/alpha=false", "v=4", "profiling=false"}}},
		},
		{
			name:   "a merge patch of no kind devk writes",
			merge:  []string{"kind: ClusterConfiguration\nclusterName: x\n", "kind: ResetConfiguration\ncleanupTmpDir: true\n"},
			errors: []string{"kubeadmConfigPatches[1]: matches no document: it selects kind ResetConfiguration, and devk writes kubeadm.k8s.io/v1beta4 InitConfiguration, kubeadm.k8s.io/v1beta4 ClusterConfiguration, kubeadm.k8s.io/v1beta4 JoinConfiguration, kubelet.config.k8s.io/v1beta1 KubeletConfiguration, kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration: fix or remove it in the config file"},
		},
		{
			name:   "a merge patch of another apiVersion",
			merge:  []string{"apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nclusterName: x\n"},
			errors: []string{"kubeadmConfigPatches[0]: matches no document: it selects group \"kubeadm.k8s.io\", version \"v1beta3\", kind ClusterConfiguration"},
		},
		{
			name:  "a join checks the patches of init's documents too",
			merge: []string{"kind: InitConfigurations\n"}, join: true,
			errors: []string{"kubeadmConfigPatches[0]: matches no document"},
		},
		{
			name:   "a JSON 6902 patch of another version",
			json:   []layout.PatchJSON6902{{Group: Group, Version: "v1beta3", Kind: ClusterConfigurationKind, Patch: "[]"}},
			errors: []string{"kubeadmConfigPatchesJSON6902[0]: matches no document: it selects group \"kubeadm.k8s.io\", version \"v1beta3\""},
		},
		{
			name:   "a JSON 6902 op that is none",
			json:   []layout.PatchJSON6902{{Kind: ClusterConfigurationKind, Patch: "- {op: frobnicate, path: /x}\n"}},
			errors: []string{"kubeadmConfigPatchesJSON6902[0]: operation 0: op is frobnicate: want one of add, remove, replace, move, copy, test"},
		},
		{
			name:   "a JSON 6902 remove of what is not there",
			json:   []layout.PatchJSON6902{{Kind: ClusterConfigurationKind, Patch: "- {op: remove, path: /apiServer/timeoutForControlPlane}\n"}},
			errors: []string{"kubeadmConfigPatchesJSON6902[0]: does not apply to ClusterConfiguration: ", "fix or remove it in the config file"},
		},
		{
			name:   "a JSON 6902 test that fails",
			json:   []layout.PatchJSON6902{{Kind: ClusterConfigurationKind, Patch: "- {op: test, path: /clusterName, value: prod}\n"}},
			errors: []string{"kubeadmConfigPatchesJSON6902[0]: does not apply to ClusterConfiguration: "},
		},
		{
			name:   "a JSON 6902 patch that changes the kind",
			json:   []layout.PatchJSON6902{{Kind: InitConfigurationKind, Patch: "- {op: replace, path: /kind, value: JoinConfiguration}\n"}},
			errors: []string{"kubeadmConfigPatchesJSON6902[0]: does not apply to InitConfiguration: it changes the document's apiVersion or kind to \"kubeadm.k8s.io/v1beta4\", \"JoinConfiguration\""},
		},
		{
			name:   "a flag's value that is not a string",
			merge:  []string{"kind: ClusterConfiguration\napiServer:\n  extraArgs:\n  - {name: v, value: 4}\n"},
			errors: []string{"kubeadmConfigPatches[0]: does not apply to ClusterConfiguration: apiServer.extraArgs: v's value is 4: a flag's value is a string (quote it)"},
		},
		{
			name:   "an extraArgs item without a name",
			merge:  []string{"kind: ClusterConfiguration\nscheduler:\n  extraArgs:\n  - v=4\n"},
			errors: []string{"kubeadmConfigPatches[0]: does not apply to ClusterConfiguration: scheduler.extraArgs: item v=4 has no name: want a list of {name, value}"},
		},
		{
			name:   "a merge patch that is not a mapping",
			merge:  []string{"- kind: ClusterConfiguration\n"},
			errors: []string{"kubeadmConfigPatches[0]: is a list, not a mapping"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput()
			in.Spec.KubeadmConfigPatches = tc.merge
			in.Spec.KubeadmConfigPatchesJSON6902 = tc.json
			out, err := Init(in, cp0)
			if tc.join {
				out, err = Join(in, worker)
			}
			if len(tc.errors) > 0 {
				var pe *PatchError
				if err == nil || !errors.As(err, &pe) {
					t.Fatalf("error %v, want a PatchError", err)
				}
				for _, w := range tc.errors {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not say %q:\n%v", w, err)
					}
				}
				if strings.Contains(tc.errors[0], "matches no document") != errors.Is(err, ErrNoMatch) {
					t.Errorf("errors.Is(%v, ErrNoMatch) = %v", err, errors.Is(err, ErrNoMatch))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			docs := parse(t, out)
			for _, c := range tc.want {
				if got := at(kindOf(t, docs, c.kind), c.path); !reflect.DeepEqual(got, c.want) {
					t.Errorf("%s %s = %#v, want %#v", c.kind, c.path, got, c.want)
				}
			}
			for _, c := range tc.args {
				if got := argList(t, at(kindOf(t, docs, c.kind), c.path)); !reflect.DeepEqual(got, c.want) {
					t.Errorf("%s %s = %v, want %v", c.kind, c.path, got, c.want)
				}
			}
		})
	}
}
