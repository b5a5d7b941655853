package cluster

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	strictjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/addons"
	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/internal/layout"
)

// The table of what devk owns (config.Owned) is data that validation
// reads; these tests keep it the same as what rendering sets.

// TestOwnedFlagsAreRendered: config.Owned lists, for each component,
// exactly the flags rendering passes from the cluster's layout (a
// podSpec's args, kubeletconfig.Flags' own for node 0 and a joined node,
// addons.KubeProxyFlags), with every spec key set; feature-gates and
// runtime-config and emulated-version come from the spec's own keys. No default is owned
// (extraArgs could never change it).
func TestOwnedFlagsAreRendered(t *testing.T) {
	cfg, _ := testCluster()
	cfg.Spec.FeatureGates = map[string]bool{"ComponentFlagz": true}
	cfg.Spec.RuntimeConfig = map[string]string{"api/alpha": "true"}
	cfg.Spec.EmulatedVersion = "1.33"
	in := controlplane.ManifestInput{Config: cfg, Node: cfg.FirstNode(), Files: layout.HomeFiles("/").Cluster(cfg.Name).FirstNode()}
	pod := func(name string) (own, defaults map[string]string) { return controlplane.Flags(name, in) }
	kubelet := func() (own, defaults map[string]string) {
		own, defaults = kubeletconfig.Flags(cfg, in.Files, cfg.FirstNode())
		joined, _ := kubeletconfig.Flags(cfg, in.Files, layout.NodeNet{Name: cfg.Name + "-worker", IP: cfg.FirstNode().IP})
		maps.Copy(own, joined)
		return own, defaults
	}
	rendered := map[string]func() (own, defaults map[string]string){
		config.APIServer:         func() (map[string]string, map[string]string) { return pod("kube-apiserver") },
		config.ControllerManager: func() (map[string]string, map[string]string) { return pod("kube-controller-manager") },
		config.Scheduler:         func() (map[string]string, map[string]string) { return pod("kube-scheduler") },
		config.Kubelet:           kubelet,
		config.KubeProxy:         func() (map[string]string, map[string]string) { return addons.KubeProxyFlags(), nil },
	}
	if got, want := slices.Sorted(maps.Keys(rendered)), slices.Sorted(maps.Keys(config.Owned)); !slices.Equal(got, want) {
		t.Fatalf("rendered components %v, config.Owned has %v", got, want)
	}
	for comp, render := range rendered {
		own, defaults := render()
		maps.DeleteFunc(own, func(flag, _ string) bool {
			return config.SetBySpecKey(flag)
		})
		got, want := slices.Sorted(maps.Keys(own)), slices.Sorted(slices.Values(config.Owned[comp].Flags))
		if !slices.Equal(got, want) {
			t.Errorf("%s: rendering sets %v from the layout, config.Owned[%s].Flags lists %v", comp, got, comp, want)
		}
		for flag := range defaults {
			if w := config.WithoutOwned(comp, map[string]string{flag: "x"}); len(w) == 0 {
				t.Errorf("%s: --%s is a default extraArgs may change, but devk owns it", comp, flag)
			}
		}
	}
}

// configLeaves are the leaves of doc, a component's config file rendered
// as JSON, by JSON path: a path the table lists is a leaf, and so is
// any value that is not a mapping; other mappings are walked into.
func configLeaves(doc map[string]any, table map[string]config.ConfigField, prefix string) map[string]any {
	out := map[string]any{}
	for k, v := range doc {
		if prefix == "" && (k == "apiVersion" || k == "kind") {
			continue
		}
		path := prefix + k
		if sub, isMap := v.(map[string]any); isMap {
			if _, listed := table[path]; !listed {
				maps.Copy(out, configLeaves(sub, table, path+"."))
				continue
			}
		}
		out[path] = v
	}
	return out
}

func decodeJSONMap(t *testing.T, data []byte, strictInto any) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if strict, err := strictjson.UnmarshalStrict(j, strictInto); err != nil || len(strict) > 0 {
		t.Fatalf("the rendered config is not a %T: %v %v", strictInto, err, strict)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(j, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestOwnedKubeletConfigFields: config.Owned's kubelet ConfigFile lists
// every field kubeletconfig.YAML writes (with each conditional field set),
// by the JSON names of k8s.io/kubelet's KubeletConfiguration, and no
// other. A field added to the rendering without saying which flag
// overrides it, and whether extraArgs may, fails here.
func TestOwnedKubeletConfigFields(t *testing.T) {
	cfg, _ := testCluster()
	cfg.Spec.Kubelet.FeatureGates = map[string]bool{"KubeletTracing": true}
	n := cfg.FirstNode()
	data, err := kubeletconfig.YAML(kubeletconfig.Input{Config: cfg, Files: layout.HomeFiles(t.TempDir()).Cluster(cfg.Name).FirstNode(), Node: n, CRISocket: "/x.sock"})
	if err != nil {
		t.Fatal(err)
	}
	table := config.Owned[config.Kubelet].ConfigFile
	got := configLeaves(decodeJSONMap(t, data, &kubeletv1beta1.KubeletConfiguration{}), table, "")
	for path := range got {
		if _, ok := table[path]; !ok {
			t.Errorf("kubeletconfig.YAML writes %s, which config.Owned lacks: add it with the flag that overrides it (AddKubeletConfigFlags), owned unless it is a tuning default", path)
		}
	}
	for path := range table {
		if _, ok := got[path]; !ok {
			t.Errorf("config.Owned lists %s, which kubeletconfig.YAML does not write", path)
		}
	}
}

// TestOwnedKubeProxyConfigFields: config.Owned's kube-proxy ConfigFile
// lists every field addons.KubeProxyConfigYAML sets (differs from an empty
// configuration's), and no other.
func TestOwnedKubeProxyConfigFields(t *testing.T) {
	cfg := layout.NewConfig(layout.DefaultName)
	cfg.Spec.KubeProxy.FeatureGates = map[string]bool{"ComponentFlagz": true}
	data, err := addons.KubeProxyConfigYAML(cfg)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := yaml.Marshal(kubeproxyconfig.KubeProxyConfiguration{})
	if err != nil {
		t.Fatal(err)
	}
	table := config.Owned[config.KubeProxy].ConfigFile
	set := configLeaves(decodeJSONMap(t, data, &kubeproxyconfig.KubeProxyConfiguration{}), table, "")
	zero := configLeaves(decodeJSONMap(t, empty, &kubeproxyconfig.KubeProxyConfiguration{}), table, "")
	for path, v := range set {
		_, listed := table[path]
		switch changed := !reflect.DeepEqual(v, zero[path]); {
		case changed && !listed:
			t.Errorf("addons.KubeProxyConfigYAML sets %s, which config.Owned lacks: add it with kube-proxy's flag for it", path)
		case !changed && listed:
			t.Errorf("config.Owned lists %s, which addons.KubeProxyConfigYAML does not set", path)
		}
	}
	for path := range table {
		if _, ok := set[path]; !ok {
			t.Errorf("config.Owned lists %s, which addons.KubeProxyConfigYAML does not write", path)
		}
	}
}

// TestOwnedFlagsDropped: rendering drops the flags devk owns from a
// spec that got past no validation (a cluster.json edited by hand).
func TestOwnedFlagsDropped(t *testing.T) {
	c := mustOpenWith(t, t.TempDir(), "", "")
	c.Config.Spec.Kubelet.ExtraArgs = map[string]string{"container-runtime-endpoint": "unix:///run/containerd/containerd.sock", "max-pods": "50"}
	c.Config.Spec.APIServer.ExtraArgs = map[string]string{"anonymous-auth": "true", "authorization-mode": "AlwaysAllow", "audit-log-maxage": "3"}
	c.Config.Spec.KubeProxy.ExtraArgs = map[string]string{"metrics-bind-address": "0.0.0.0:10249", "v": "2"}
	args := strings.Join(c.FirstNode().KubeletArgs(), " ")
	if strings.Contains(args, "container-runtime-endpoint") || !strings.Contains(args, "--max-pods=50") {
		t.Errorf("kubelet: %s", args)
	}
	api := manifestFlags(t, c, "kube-apiserver")
	if api["anonymous-auth"] != "" || api["authorization-mode"] != "Node,RBAC" || api["audit-log-maxage"] != "3" {
		t.Errorf("kube-apiserver: anonymous-auth %q authorization-mode %q audit-log-maxage %q", api["anonymous-auth"], api["authorization-mode"], api["audit-log-maxage"])
	}
	cmd := strings.Join(addons.KubeProxyCommand(c.Config.Spec.KubeProxy.ExtraArgs), " ")
	if strings.Contains(cmd, "metrics-bind-address") || !strings.Contains(cmd, "--v=2") {
		t.Errorf("kube-proxy: %s", cmd)
	}
}
