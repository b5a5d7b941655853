package config

import (
	"errors"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	yaml3 "go.yaml.in/yaml/v3"

	"github.com/devk/devk/internal/layout"
)

const header = "apiVersion: " + APIVersion + "\nkind: " + Kind + "\n"

// kubeadmHeader starts a file of a cluster kubeadm bootstraps.
const kubeadmHeader = header + "bootstrapper: kubeadm\n"

// fullConfig sets every key but nodes; package cluster's tests read it too.
var fullConfig = func() string {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		panic(err)
	}
	return string(data)
}()

// TestAuditPolicyFile: a policy file relative to the config file is
// kept as the path beside it.
func TestAuditPolicyFile(t *testing.T) {
	c, err := Decode([]byte(header+"audit:\n  policyFile: policies/audit.yaml\n"), "/home/u/devk/devk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Audit.PolicyFile; got != "/home/u/devk/policies/audit.yaml" || !c.Audit.On() {
		t.Errorf("policyFile %q, on %v", got, c.Audit.On())
	}
}

// TestProblems: every problem names its key and line, and
// says what is wanted.
func TestProblems(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key", header + "networking:\n  podSubnt: 10.0.0.0/16\n",
			[]string{"devk.yaml:4: networking.podSubnt: unknown key (known here: nodeSubnet, podSubnet, serviceSubnet)"}},
		{"unknown top-level key", header + "addon:\n  coreDNS: false\n", []string{"devk.yaml:3: addon: unknown key (known here: addons, apiServer,"}},
		{"an empty key", header + "\"\": 1\n", []string{`devk.yaml:3: [""]: unknown key (known here: addons,`}},
		{"a key's case", header + "FeatureGates: {}\n", []string{"devk.yaml:3: FeatureGates: unknown key (did you mean featureGates?)"}},
		{"a repeated key", header + "addons:\n  coreDNS: false\n  coreDNS: true\n", []string{`line 5: key "coreDNS" already set`}},
		{"a too short certificate life", header + "certValidity: 30s\n", []string{"devk.yaml:3: certValidity: is 30s: give a lifetime from 2m0s to"}},
		{"a certificate life beyond the CAs'", header + "certValidity: 100000h\n", []string{"devk.yaml:3: certValidity: is 100000h0m0s"}},
		{"a policy for no audit log", header + "audit:\n  enabled: false\n  policyFile: /etc/policy.yaml\n",
			[]string{"devk.yaml:5: audit.policyFile: is set, but audit.enabled is false: leave one of them out"}},
		{"an audit key misspelt", header + "audit:\n  policy: p.yaml\n", []string{"devk.yaml:4: audit.policy: unknown key (known here: enabled, policyFile)"}},
		{"a string for a bool", header + "addons:\n  kubeProxy: maybe\n", []string{"devk.yaml:4: addons.kubeProxy: is string, want true or false"}},
		{"a bool for a string", header + "runtimeConfig:\n  api/all: true\n", []string{`devk.yaml:3: runtimeConfig: is bool, want a string (quote it`}},
		{"not YAML", header + "networking: [\n", []string{"devk.yaml: not YAML"}},
		{"no apiVersion", "kind: Cluster\n", []string{"devk.yaml: apiVersion: missing: the file starts with apiVersion: devk.dev/v1alpha1"}},
		{"another kind", "apiVersion: devk.dev/v1alpha1\nkind: Config\n", []string{`devk.yaml:2: kind: is "Config", want Cluster`}},
		{"another apiVersion", "apiVersion: kind.x-k8s.io/v1alpha4\nkind: Cluster\n", []string{`devk.yaml:1: apiVersion: is "kind.x-k8s.io/v1alpha4", want devk.dev/v1alpha1`}},
		{"a bad name", header + "name: Dev_1\n", []string{"devk.yaml:3: name: "}},
		{"not a CIDR", header + "networking:\n  podSubnet: 10.0.0.0/33\n", []string{`devk.yaml:4: networking.podSubnet: "10.0.0.0/33" is not a CIDR`}},
		{"IPv6", header + "networking:\n  serviceSubnet: fd00::/108\n", []string{`devk.yaml:4: networking.serviceSubnet: "fd00::/108" is not IPv4`}},
		{"not a network's address", header + "networking:\n  nodeSubnet: 10.251.3.1/24\n", []string{`devk.yaml:4: networking.nodeSubnet: "10.251.3.1/24" is not a network's address: did you mean 10.251.3.0/24?`}},
		{"pods too small", header + "networking:\n  podSubnet: 10.200.0.0/25\n", []string{"networking.podSubnet: 10.200.0.0/25 is smaller than the /24 the controller-manager gives each node"}},
		{"services too large", header + "networking:\n  serviceSubnet: 10.0.0.0/8\n", []string{"networking.serviceSubnet: 10.0.0.0/8 is larger than the API server takes: want /12 or smaller"}},
		{"services too small", header + "networking:\n  serviceSubnet: 10.96.0.0/29\n", []string{"networking.serviceSubnet: 10.96.0.0/29 has no room for CoreDNS's Service"}},
		{"nodes too small", header + "networking:\n  nodeSubnet: 10.251.0.0/31\n", []string{"networking.nodeSubnet: 10.251.0.0/31 has no room for the host's address and the node's: want /30 or larger"}},
		{"pods overlap nodes", header + "networking:\n  podSubnet: 10.251.0.0/16\n  nodeSubnet: 10.251.3.0/24\n",
			[]string{"devk.yaml:4: networking.podSubnet: networking.podSubnet 10.251.0.0/16 overlaps networking.nodeSubnet 10.251.3.0/24"}},
		{"the default pods overlap nodes", header + "networking:\n  nodeSubnet: 10.244.3.0/24\n",
			[]string{"devk.yaml:4: networking.nodeSubnet: the default podSubnet 10.244.0.0/16 overlaps networking.nodeSubnet 10.244.3.0/24"}},
		{"services overlap nodes", header + "networking:\n  serviceSubnet: 10.251.0.0/16\n  nodeSubnet: 10.251.3.0/24\n",
			[]string{"devk.yaml:4: networking.serviceSubnet: networking.serviceSubnet 10.251.0.0/16 overlaps networking.nodeSubnet"}},
		{"fake nodes: count and groups", header + "fakeNodes:\n  count: 3\n  groups:\n  - count: 2\n", []string{"devk.yaml:4: fakeNodes.count: give count or groups"}},
		{"fake nodes: a bad group", header + "fakeNodes:\n  groups:\n  - count: 2\n    cpu: lots\n    taints: [gpu]\n",
			[]string{`devk.yaml:5: fakeNodes.groups[0]: cpu "lots": want a positive quantity`, `fakeNodes.groups[0]: taint "gpu": want KEY[=VALUE]:EFFECT`}},
		{"fake nodes beyond the pod subnet", header + "fakeNodes:\n  count: 300\n",
			[]string{"devk.yaml:3: fakeNodes: 300 fake and 1 real nodes do not fit podSubnet 10.244.0.0/16: it has room for 256 nodes (a /24 each); set networking.podSubnet to a /15 or wider"}},
		{"services overlap pods", header + "networking:\n  serviceSubnet: 10.244.128.0/20\n",
			[]string{"networking.serviceSubnet: 10.244.128.0/20 overlaps the default podSubnet 10.244.0.0/16"}},
		{"devk's flags", header + "apiServer:\n  extraArgs:\n    etcd-servers: https://10.0.0.1:2379\n    advertise-address: 10.0.0.1\n    secure-port: \"443\"\n",
			[]string{"devk.yaml:5: apiServer.extraArgs.etcd-servers: devk sets --etcd-servers from the cluster's layout, and a config file may not change it",
				"devk.yaml:6: apiServer.extraArgs.advertise-address: devk sets --advertise-address", "devk.yaml:7: apiServer.extraArgs.secure-port: devk sets --secure-port"}},
		{"devk's flags elsewhere", header + "kubelet:\n  extraArgs:\n    node-ip: 10.0.0.1\nkubeProxy:\n  extraArgs:\n    config: /x\nscheduler:\n  extraArgs:\n    bind-address: 0.0.0.0\ncontrollerManager:\n  extraArgs:\n    cluster-cidr: 10.0.0.0/8\n",
			[]string{"kubelet.extraArgs.node-ip: devk sets --node-ip", "kubeProxy.extraArgs.config: devk sets --config", "scheduler.extraArgs.bind-address: devk sets", "controllerManager.extraArgs.cluster-cidr: devk sets"}},
		// issue 33: what the kubelet's config file sets, and what keeps
		// the components closed, is devk's too.
		{"the kubelet's config file", header + "kubelet:\n  extraArgs:\n    container-runtime-endpoint: unix:///run/containerd/containerd.sock\n    pod-manifest-path: /etc/kubernetes/manifests\n    cgroup-root: /\n    address: 0.0.0.0\n    read-only-port: \"10255\"\n    anonymous-auth: \"true\"\n    authorization-mode: AlwaysAllow\n",
			[]string{"devk.yaml:5: kubelet.extraArgs.container-runtime-endpoint: devk sets containerRuntimeEndpoint in the kubelet's config file, and --container-runtime-endpoint would override it: leave it out of extraArgs",
				"devk.yaml:6: kubelet.extraArgs.pod-manifest-path: devk sets staticPodPath in the kubelet's config file",
				"devk.yaml:7: kubelet.extraArgs.cgroup-root: devk sets cgroupRoot in the kubelet's config file",
				"devk.yaml:8: kubelet.extraArgs.address: devk owns --address: it decides where the kubelet listens, which devk keeps to the node's own address",
				"devk.yaml:9: kubelet.extraArgs.read-only-port: devk owns --read-only-port: it opens the kubelet's insecure, unauthenticated port",
				"devk.yaml:10: kubelet.extraArgs.anonymous-auth: devk owns --anonymous-auth: it decides who may use the kubelet's API",
				"devk.yaml:11: kubelet.extraArgs.authorization-mode: devk owns --authorization-mode: it decides who may use the kubelet's API, which devk keeps to the cluster's own certificates and tokens (otherwise every user of this machine could run commands in any of the node's pods): leave it out of extraArgs"}},
		{"the kubelet's defaults devk relies on", header + "kubelet:\n  extraArgs:\n    config-dir: /etc/kubelet.d\n    system-cgroups: /system\n    tls-cert-file: /x.crt\n",
			[]string{"devk.yaml:5: kubelet.extraArgs.config-dir: devk owns --config-dir: its drop-in files would override",
				"devk.yaml:6: kubelet.extraArgs.system-cgroups: devk owns --system-cgroups: it would put the kubelet's state, pods or cgroups outside the node's own",
				"devk.yaml:7: kubelet.extraArgs.tls-cert-file: devk owns --tls-cert-file"}},
		{"the API server's access", header + "apiServer:\n  extraArgs:\n    anonymous-auth: \"true\"\n    authorization-mode: AlwaysAllow\n    bind-address: 0.0.0.0\n    insecure-port: \"8080\"\n    token-auth-file: /tokens.csv\n",
			[]string{"devk.yaml:5: apiServer.extraArgs.anonymous-auth: devk owns --anonymous-auth: it decides who may use the API server's API",
				"devk.yaml:6: apiServer.extraArgs.authorization-mode: devk owns --authorization-mode: it decides who may use the API server's API, which devk keeps to the cluster's own certificates and tokens (otherwise every user of this machine could take over the whole cluster",
				"devk.yaml:7: apiServer.extraArgs.bind-address: devk sets --bind-address from the cluster's layout",
				"devk.yaml:8: apiServer.extraArgs.insecure-port: devk owns --insecure-port: it opens the API server's insecure, unauthenticated port",
				"devk.yaml:9: apiServer.extraArgs.token-auth-file: devk owns --token-auth-file"}},
		{"the controllers' and kube-proxy's access", header + "controllerManager:\n  extraArgs:\n    bind-address: 0.0.0.0\nscheduler:\n  extraArgs:\n    authorization-always-allow-paths: /metrics\nkubeProxy:\n  extraArgs:\n    metrics-bind-address: 0.0.0.0:10249\n    conntrack-max-per-core: \"32768\"\n",
			[]string{"devk.yaml:5: controllerManager.extraArgs.bind-address: devk sets --bind-address",
				"devk.yaml:8: scheduler.extraArgs.authorization-always-allow-paths: devk owns --authorization-always-allow-paths",
				"devk.yaml:11: kubeProxy.extraArgs.metrics-bind-address: devk owns --metrics-bind-address: it decides where the kube-proxy listens",
				"devk.yaml:12: kubeProxy.extraArgs.conntrack-max-per-core: devk sets conntrack.maxPerCore in the kube-proxy's config file"}},
		{"gates as a flag", header + "kubelet:\n  extraArgs:\n    feature-gates: A=true\n",
			[]string{"kubelet.extraArgs.feature-gates: set feature gates with featureGates (every component) or kubelet.featureGates (this one)"}},
		{"runtime config as a flag", header + "apiServer:\n  extraArgs:\n    runtime-config: api/all=true\n", []string{"apiServer.extraArgs.runtime-config: set the API server's runtime config with runtimeConfig"}},
		{"emulated version as a flag", header + "controllerManager:\n  extraArgs:\n    emulated-version: \"1.33\"\n", []string{"devk.yaml:5: controllerManager.extraArgs.emulated-version: set the control plane's emulated version with emulatedVersion"}},
		{"an emulated version with a patch", header + "emulatedVersion: \"1.33.2\"\n", []string{`devk.yaml:3: emulatedVersion: is "1.33.2": give a MAJOR.MINOR version such as "1.33"`}},
		{"an emulated version unquoted", header + "emulatedVersion: 1.33\n", []string{"devk.yaml:3: emulatedVersion: is number, want a string (quote it"}},
		{"a tree for a control-plane node", header + "nodes:\n- role: control-plane\n- role: control-plane\n  name: cp2\n  tree: /k/v1.33\n", []string{"devk.yaml:7: nodes[1].tree: a control-plane node runs the cluster's tree: give tree to a worker"}},
		{"a tree for an unnamed worker", header + "nodes:\n- role: control-plane\n- role: worker\n  tree: /k/v1.33\n", []string{"devk.yaml:6: nodes[1].tree: name the node too"}},
		{"dashes", header + "scheduler:\n  extraArgs:\n    --v: \"4\"\n", []string{"devk.yaml:5: scheduler.extraArgs.--v: write the flag's name without dashes: v"}},
		{"a flag name", header + "scheduler:\n  extraArgs:\n    V Level: \"4\"\n", []string{`scheduler.extraArgs["V Level"]: is not a flag name`}},
		{"a gate name", header + "featureGates:\n  component-flagz: true\n", []string{"devk.yaml:4: featureGates.component-flagz: is not a feature gate name"}},
		{"a runtime config", header + "runtimeConfig:\n  \"api/all,api/beta\": \"true\"\n", []string{`runtimeConfig["api/all,api/beta"]: "api/all,api/beta=true": want an API group/version`}},
		{"the taint", header + "controlPlaneTaint: NoSchedule\n", []string{`devk.yaml:3: controlPlaneTaint: is "NoSchedule", want keep or remove`}},
		{"a bootstrapper", header + "bootstrapper: kubeam\n", []string{`devk.yaml:3: bootstrapper: is "kubeam", want devk (the default) or kubeadm`}},
		{"patches with devk's bootstrapper", header + "bootstrapper: devk\nkubeadmConfigPatches:\n- \"kind: ClusterConfiguration\"\n",
			[]string{"devk.yaml:4: kubeadmConfigPatches: patches kubeadm's config, but the bootstrapper is devk: set bootstrapper: kubeadm, or leave kubeadmConfigPatches out"}},
		{"JSON 6902 patches with devk's bootstrapper", header + "bootstrapper: devk\nkubeadmConfigPatchesJSON6902:\n- {kind: InitConfiguration, patch: \"[]\"}\n",
			[]string{"devk.yaml:4: kubeadmConfigPatchesJSON6902: patches kubeadm's config, but the bootstrapper is devk"}},
		{"a merge patch not YAML", kubeadmHeader + "kubeadmConfigPatches:\n- \"kind: [\"\n", []string{"devk.yaml:5: kubeadmConfigPatches[0]: is not YAML"}},
		{"a merge patch without a kind", kubeadmHeader + "kubeadmConfigPatches:\n- |\n  apiServer: {}\n", []string{"devk.yaml:5: kubeadmConfigPatches[0]: has no kind: give the kind of the documents it patches, e.g. kind: ClusterConfiguration"}},
		{"a merge patch's kind", kubeadmHeader + "kubeadmConfigPatches:\n- |\n  kind: [a]\n", []string{"devk.yaml:5: kubeadmConfigPatches[0]: kind is a list: want the kind of the documents it patches"}},
		{"a merge patch's apiVersion", kubeadmHeader + "kubeadmConfigPatches:\n- |\n  kind: ClusterConfiguration\n  apiVersion: \"\"\n", []string{"devk.yaml:5: kubeadmConfigPatches[0]: apiVersion is an empty string: want the apiVersion of the documents it patches, e.g. kubeadm.k8s.io/v1beta4"}},
		{"a merge patch that is a list", kubeadmHeader + "kubeadmConfigPatches:\n- |\n  - kind: ClusterConfiguration\n", []string{"devk.yaml:5: kubeadmConfigPatches[0]: is a list, not a mapping"}},
		{"two documents in a merge patch", kubeadmHeader + "kubeadmConfigPatches:\n- \"kind: A\\n---\\nkind: B\\n\"\n", []string{"devk.yaml:5: kubeadmConfigPatches[0]: holds more than one YAML document: give each its own entry"}},
		{"a repeated key in a merge patch", kubeadmHeader + "kubeadmConfigPatches:\n- |\n  kind: A\n  kind: B\n", []string{"devk.yaml:5: kubeadmConfigPatches[0]: is not YAML"}},
		{"a JSON 6902 patch without a kind", kubeadmHeader + "kubeadmConfigPatchesJSON6902:\n- group: kubeadm.k8s.io\n  patch: \"[]\"\n", []string{"devk.yaml:5: kubeadmConfigPatchesJSON6902[0].kind: missing: give the kind of the documents it patches"}},
		{"a JSON 6902 patch that is a mapping", kubeadmHeader + "kubeadmConfigPatchesJSON6902:\n- kind: InitConfiguration\n  patch: \"op: add\"\n", []string{"devk.yaml:6: kubeadmConfigPatchesJSON6902[0].patch: is a mapping, not a list of operations"}},
		{"a JSON 6902 op", kubeadmHeader + "kubeadmConfigPatchesJSON6902:\n- kind: InitConfiguration\n  patch: |\n    - {op: add, path: /a, value: 1}\n    - {op: append, path: /a}\n", []string{"devk.yaml:6: kubeadmConfigPatchesJSON6902[0].patch: operation 1: op is append: want one of add, remove, replace, move, copy, test"}},
		{"a JSON 6902 path", kubeadmHeader + "kubeadmConfigPatchesJSON6902:\n- kind: InitConfiguration\n  patch: \"[{op: remove, path: a.b}]\"\n", []string{"devk.yaml:6: kubeadmConfigPatchesJSON6902[0].patch: operation 0: path is a.b: want a JSON pointer such as /networking/dnsDomain"}},
		{"a JSON 6902 test without a value", kubeadmHeader + "kubeadmConfigPatchesJSON6902:\n- kind: InitConfiguration\n  patch: \"[{op: test, path: ''}]\"\n", []string{"devk.yaml:6: kubeadmConfigPatchesJSON6902[0].patch: operation 0: test needs a value, e.g. {op: test, path: /networking/dnsDomain, value: example.local}"}},
		{"a JSON 6902 move without a from", kubeadmHeader + "kubeadmConfigPatchesJSON6902:\n- kind: InitConfiguration\n  patch: \"[{op: move, path: /a}]\"\n", []string{"devk.yaml:6: kubeadmConfigPatchesJSON6902[0].patch: operation 0: move needs a from, e.g. {op: move, from: /networking/dnsDomain, path: /networking/serviceSubnet}"}},
		{"a JSON 6902 from", kubeadmHeader + "kubeadmConfigPatchesJSON6902:\n- kind: InitConfiguration\n  patch: \"[{op: copy, from: 3, path: /a}]\"\n", []string{"devk.yaml:6: kubeadmConfigPatchesJSON6902[0].patch: operation 0: from is 3: want a JSON pointer such as /networking/dnsDomain"}},
		{"kube-proxy's flags with kubeadm", kubeadmHeader + "kubeProxy:\n  extraArgs:\n    v: \"2\"\n", []string{"devk.yaml:5: kubeProxy.extraArgs: kubeadm runs kube-proxy with its config file alone: set its KubeProxyConfiguration (logging.verbosity for v) with kubeadmConfigPatches"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.body), "devk.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
	// Several problems are all reported, in the file's order.
	_, err := Decode([]byte(header+"controlPlaneTaint: x\nnetworking:\n  podSubnet: x\n"), "devk.yaml")
	var ue *Error
	if !errors.As(err, &ue) || len(ue.Problems) != 2 || !strings.HasPrefix(ue.Problems[0], "devk.yaml:3:") || !strings.HasPrefix(ue.Problems[1], "devk.yaml:5:") {
		t.Errorf("two problems: %v", err)
	}
}

// TestOwnedFlagsRefused: every flag devk owns, of every component, is
// refused in extraArgs at its line with the reason, and dropped by
// WithoutOwned; the tuning defaults stay the user's.
func TestOwnedFlagsRefused(t *testing.T) {
	for comp, flags := range ownFlags() {
		for flag, why := range flags {
			if flag == FeatureGatesFlag {
				continue // refused with its own message
			}
			body := header + comp + ":\n  extraArgs:\n    " + flag + ": x\n"
			_, err := Decode([]byte(body), "devk.yaml")
			if want := "devk.yaml:5: " + comp + ".extraArgs." + flag + ": " + why + ": leave it out of extraArgs"; err == nil || err.Error() != want {
				t.Errorf("%s.extraArgs.%s: %v, want %s", comp, flag, err, want)
			}
			if w := WithoutOwned(comp, map[string]string{flag: "x", "v": "3"}); !maps.Equal(w, map[string]string{"v": "3"}) {
				t.Errorf("rendering passes %s.extraArgs %v", comp, w)
			}
		}
		for _, flag := range []string{FeatureGatesFlag, RuntimeConfigFlag, EmulatedVersionFlag} {
			if w := WithoutOwned(comp, map[string]string{flag: "x"}); len(w) > 0 {
				t.Errorf("rendering passes %s.extraArgs %v, which the spec's own keys set", comp, w)
			}
		}
	}
	for path, f := range Owned[Kubelet].ConfigFile {
		if f.Tunable && f.Flag != "" {
			if _, err := Decode([]byte(header+"kubelet:\n  extraArgs:\n    "+f.Flag+": x\n"), "devk.yaml"); err != nil {
				t.Errorf("%s (%s) is a tuning default extraArgs may change: %v", f.Flag, path, err)
			}
		}
	}
}

// TestKubeadm: a file of a cluster kubeadm bootstraps keeps its patches
// as written, each checked as it will be applied.
func TestKubeadm(t *testing.T) {
	c, err := Decode([]byte(kubeadmHeader+`kubeadmConfigPatches:
- |
  kind: ClusterConfiguration
  apiServer:
    extraArgs:
    - {name: v, value: "4"}
kubeadmConfigPatchesJSON6902:
- group: kubeadm.k8s.io
  version: v1beta4
  kind: InitConfiguration
  patch: |
    - op: add
      path: /skipPhases
      value: [addon/kube-proxy]
`), "devk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Kubeadm() || c.BootstrappedBy() != layout.BootstrapperKubeadm || len(c.KubeadmConfigPatches) != 1 || len(c.KubeadmConfigPatchesJSON6902) != 1 {
		t.Fatalf("spec %+v", c.Spec)
	}
	p, err := ParseMergePatch(c.KubeadmConfigPatches[0])
	if err != nil || p.Kind != "ClusterConfiguration" || p.APIVersion != "" || p.Fields["kind"] != nil || p.Fields["apiServer"] == nil {
		t.Errorf("merge patch %+v, %v", p, err)
	}
	ops, err := ParseJSON6902(c.KubeadmConfigPatchesJSON6902[0])
	if want := `[{"op":"add","path":"/skipPhases","value":["addon/kube-proxy"]}]`; err != nil || string(ops) != want {
		t.Errorf("JSON 6902 patch %s, %v; want %s", ops, err, want)
	}
	// Empty lists are no patches, for devk too.
	c, err = Decode([]byte(header+"kubeadmConfigPatches: []\nkubeadmConfigPatchesJSON6902: []\n"), "devk.yaml")
	if err != nil || c.Kubeadm() || c.BootstrappedBy() != layout.BootstrapperDevk || c.KubeadmConfigPatches != nil || c.KubeadmConfigPatchesJSON6902 != nil {
		t.Errorf("empty patch lists: %+v, %v", c, err)
	}
}

// TestBootstrapperUnchangeable: an existing cluster's bootstrapper
// cannot change.
func TestBootstrapperUnchangeable(t *testing.T) {
	c, err := Decode([]byte(kubeadmHeader), "devk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	made := layout.NewConfig("dev")
	if err := c.Unchangeable(made); err == nil || !strings.Contains(err.Error(), "devk.yaml:3: bootstrapper: is kubeadm, but devk made cluster dev, and a cluster's bootstrapper cannot change: `devk down --name dev` first") {
		t.Errorf("a devk cluster to kubeadm: %v", err)
	}
	made.Spec.Bootstrapper = layout.BootstrapperKubeadm
	if err := c.Unchangeable(made); err != nil && strings.Contains(err.Error(), "bootstrapper") {
		t.Errorf("a kubeadm cluster stays kubeadm's: %v", err)
	}
	devk, err := Decode([]byte(header), "devk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := devk.Unchangeable(made); err == nil || !strings.Contains(err.Error(), "devk.yaml: bootstrapper: is devk, but kubeadm made cluster dev") {
		t.Errorf("a kubeadm cluster to devk: %v", err)
	}
}

func TestNodes(t *testing.T) {
	u, err := Decode([]byte(header+"nodes:\n- role: control-plane\n- role: worker\n- role: worker\n  name: big\n- role: control-plane\n"), "devk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Node{{Role: layout.RoleControlPlane}, {Role: layout.RoleWorker}, {Role: layout.RoleWorker, Name: "big"}}; len(u.Nodes) != 4 || !slices.Equal(u.JoinNodes(), want) || u.ControlPlanes() != 2 {
		t.Errorf("nodes %+v, join %+v, control planes %d", u.Nodes, u.JoinNodes(), u.ControlPlanes())
	}
	for _, tc := range []struct{ name, body, want string }{
		{"worker first", "nodes:\n- role: worker\n", "devk.yaml:4: nodes[0].role: is \"worker\": the first node is the control plane"},
		{"bad role", "nodes:\n- role: control-plane\n- role: boss\n", "nodes[1].role: is \"boss\", want control-plane or worker"},
		{"bad name", "nodes:\n- role: control-plane\n- role: worker\n  name: Big_One\n", "nodes[1].name: node name \"Big_One\""},
		{"same name", "nodes:\n- role: control-plane\n- {role: worker, name: w}\n- {role: worker, name: w}\n", "nodes[2].name: w is nodes[1]'s name too"},
		{"control plane named", "nodes:\n- {role: control-plane, name: cp}\n", "nodes[0].name: the control-plane node is named by the cluster"},
	} {
		_, err := Decode([]byte(header+tc.body), "devk.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// docsPage is the config file's reference.
const docsPage = "../../docs/config.md"

// docsExamples are the example files of docsPage, the first of which
// sets every key but kubeadm's patches, the second those.
func docsExamples(t *testing.T) []string {
	t.Helper()
	text, err := os.ReadFile(docsPage)
	if err != nil {
		t.Fatal(err)
	}
	var examples []string
	for rest := string(text); ; {
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		var example string
		example, rest, _ = strings.Cut(rest, "```")
		examples = append(examples, example)
	}
	if len(examples) < 2 {
		t.Fatalf("%s has %d example files, want the whole file's and kubeadm's", docsPage, len(examples))
	}
	return examples
}

// TestDocsExample: the example files of docs/config.md are valid, and
// the first says what its comments say.
func TestDocsExample(t *testing.T) {
	examples := docsExamples(t)
	for _, e := range examples[1:] {
		if _, err := Decode([]byte(e), "docs/config.md"); err != nil {
			t.Errorf("an example in %s: %v", docsPage, err)
		}
	}
	u, err := Decode([]byte(examples[0]), "docs/config.md")
	if err != nil {
		t.Fatalf("the example in %s: %v", docsPage, err)
	}
	if u.Name != "dev" || u.Networking.PodSubnet != layout.DefaultPodCIDR || u.Networking.ServiceSubnet != layout.DefaultServiceCIDR ||
		u.ControlPlaneTaint != DefaultControlPlaneTaint || !layout.On(u.Addons.KubeProxy) || !layout.On(u.Addons.CoreDNS) ||
		u.Bootstrapper != layout.BootstrapperDevk {
		t.Errorf("the example in %s does not show the defaults it says: %+v", docsPage, u)
	}
}

// TestDocsEveryKey: the example files of docs/config.md set every key
// the types have, at its place (a list's keys in one of its items), and
// so every key has its line of explanation there. A key added to the
// types fails here until the reference shows it.
func TestDocsEveryKey(t *testing.T) {
	have := map[string]bool{}
	var walk func(n *yaml3.Node, prefix string)
	walk = func(n *yaml3.Node, prefix string) {
		switch n.Kind {
		case yaml3.DocumentNode, yaml3.SequenceNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key := prefix + n.Content[i].Value
				have[key] = true
				walk(n.Content[i+1], key+".")
			}
		}
	}
	for _, e := range docsExamples(t) {
		var root yaml3.Node
		if err := yaml3.Unmarshal([]byte(e), &root); err != nil {
			t.Fatal(err)
		}
		walk(&root, "")
	}
	for _, key := range typeKeys(reflect.TypeFor[Cluster](), "") {
		if !have[key] {
			t.Errorf("%s does not show %s", docsPage, key)
		}
	}
}

// typeKeys are the key paths of the config file's type t: a struct's
// keys, and theirs in turn (a list's items' as the list's own); a map's
// keys are the user's, not the type's.
func typeKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	var out []string
	for name, ft := range jsonFields(t) {
		out = append(out, prefix+name)
		out = append(out, typeKeys(ft, prefix+name+".")...)
	}
	slices.Sort(out)
	return out
}

// TestDocsOwnedFlags: the flags docs/config.md says devk owns are owned
// by a component in Owned, and the defaults it says extraArgs may
// change are owned by none (a trailing * stands for any ending).
func TestDocsOwnedFlags(t *testing.T) {
	text, err := os.ReadFile(docsPage)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(text), "devk owns every flag")
	owned, rest, ok2 := strings.Cut(rest, "The other flags devk sets are defaults")
	defaults, _, ok3 := strings.Cut(rest, "any flag devk does not set")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("%s no longer says which flags devk owns and which are defaults", docsPage)
	}
	isOwned := func(pattern string) bool {
		prefix, wild := strings.CutSuffix(pattern, "*")
		for _, flags := range ownFlags() {
			for flag := range flags {
				if flag == prefix || wild && strings.HasPrefix(flag, prefix) {
					return true
				}
			}
		}
		return false
	}
	flag := regexp.MustCompile("`--([a-z0-9-]+\\*?)`")
	for _, m := range flag.FindAllStringSubmatch(owned, -1) {
		if !isOwned(m[1]) {
			t.Errorf("%s says devk owns --%s; config.Owned does not", docsPage, m[1])
		}
	}
	for _, m := range flag.FindAllStringSubmatch(defaults, -1) {
		if isOwned(m[1]) {
			t.Errorf("%s says --%s is a default extraArgs may change; config.Owned owns it", docsPage, m[1])
		}
	}
}

// TestNodeTrees: a worker's tree relative to the file is made absolute;
// a file listing no nodes gives none (those recorded hold).
func TestNodeTrees(t *testing.T) {
	c, err := Decode([]byte(header+"nodes:\n- role: control-plane\n- role: worker\n  name: old\n  tree: ../kubernetes-v1.33.8\n- role: worker\n"), "/home/u/dev/devk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.NodeTrees(); len(got) != 1 || got["old"] != "/home/u/kubernetes-v1.33.8" {
		t.Errorf("NodeTrees() = %v, want old: /home/u/kubernetes-v1.33.8", got)
	}
	if c, err := Decode([]byte(header), "devk.yaml"); err != nil || c.NodeTrees() != nil {
		t.Errorf("a file without nodes: %v, %v", c.NodeTrees(), err)
	}
}
