package cluster

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	strictjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
)

// renderedFields are the JSON paths of the leaves of doc, a component's
// config file rendered as JSON, as its Go type t has them: a struct is
// walked into (a metav1.Duration is a leaf), anything else, maps
// included, is a leaf. A key t lacks is an error.
func renderedFields(t *testing.T, typ reflect.Type, doc map[string]any, prefix string) map[string]any {
	t.Helper()
	out := map[string]any{}
	fields := jsonFields(typ)
	for k, v := range doc {
		if prefix == "" && (k == "apiVersion" || k == "kind") {
			continue
		}
		ft, ok := fields[k]
		if !ok {
			t.Errorf("the rendered config has %s%s, which %s lacks", prefix, k, typ)
			continue
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		sub, isMap := v.(map[string]any)
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[metav1.Duration]() && isMap {
			maps.Copy(out, renderedFields(t, ft, sub, prefix+k+"."))
			continue
		}
		out[prefix+k] = v
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

// TestOwnedKubeletConfigFields: kubeletConfigFlags lists every field
// KubeletConfigYAML writes (with each conditional field set), by the
// JSON names of k8s.io/kubelet's KubeletConfiguration, and no other.
// A field added to the rendering without saying which flag overrides
// it, and whether extraArgs may, fails here.
func TestOwnedKubeletConfigFields(t *testing.T) {
	cfg := layout.NewConfig(layout.DefaultName)
	cfg.Spec.Kubelet.FeatureGates = map[string]bool{"KubeletTracing": true}
	n := cfg.ControlPlane()
	n.CgroupRoot = "/devk-" + cfg.Name
	data, err := KubeletConfigYAML(KubeletConfigInput{Config: cfg, Paths: layout.ClusterPaths(t.TempDir(), cfg.Name), Node: n, CRISocket: "/x.sock"})
	if err != nil {
		t.Fatal(err)
	}
	doc := decodeJSONMap(t, data, &kubeletconfig.KubeletConfiguration{})
	got := renderedFields(t, reflect.TypeFor[kubeletconfig.KubeletConfiguration](), doc, "")
	for path := range got {
		if _, ok := kubeletConfigFlags[path]; !ok {
			t.Errorf("KubeletConfigYAML writes %s, which kubeletConfigFlags lacks: add it with the flag that overrides it (AddKubeletConfigFlags), owned unless it is a tuning default", path)
		}
	}
	for path := range kubeletConfigFlags {
		if _, ok := got[path]; !ok {
			t.Errorf("kubeletConfigFlags lists %s, which KubeletConfigYAML does not write", path)
		}
	}
}

// TestOwnedKubeProxyConfigFields: kubeProxyConfigFlags lists every field
// kubeProxyConfigYAML sets (differs from an empty configuration's), and
// no other.
func TestOwnedKubeProxyConfigFields(t *testing.T) {
	cfg := layout.NewConfig(layout.DefaultName)
	cfg.Spec.KubeProxy.FeatureGates = map[string]bool{"ComponentFlagz": true}
	data, err := kubeProxyConfigYAML(cfg)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := yaml.Marshal(kubeproxyconfig.KubeProxyConfiguration{})
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[kubeproxyconfig.KubeProxyConfiguration]()
	set := renderedFields(t, typ, decodeJSONMap(t, data, &kubeproxyconfig.KubeProxyConfiguration{}), "")
	zero := renderedFields(t, typ, decodeJSONMap(t, empty, &kubeproxyconfig.KubeProxyConfiguration{}), "")
	for path, v := range set {
		_, listed := kubeProxyConfigFlags[path]
		switch changed := !reflect.DeepEqual(v, zero[path]); {
		case changed && !listed:
			t.Errorf("kubeProxyConfigYAML sets %s, which kubeProxyConfigFlags lacks: add it with kube-proxy's flag for it", path)
		case !changed && listed:
			t.Errorf("kubeProxyConfigFlags lists %s, which kubeProxyConfigYAML does not set", path)
		}
	}
}

// TestOwnedFlagsRefusedAndDropped: every flag devk owns, of every
// component, is refused in extraArgs at its line with the reason, and
// dropped by rendering from a spec that got past validation (a
// cluster.json edited by hand); the tuning defaults stay the user's.
func TestOwnedFlagsRefusedAndDropped(t *testing.T) {
	for comp, flags := range ownFlags() {
		for flag, why := range flags {
			if flag == featureGatesFlag {
				continue // refused with its own message
			}
			body := header + comp + ":\n  extraArgs:\n    " + flag + ": x\n"
			_, err := DecodeUserConfig([]byte(body), "devk.yaml")
			if want := "devk.yaml:5: " + comp + ".extraArgs." + flag + ": " + why + ": leave it out of extraArgs"; err == nil || err.Error() != want {
				t.Errorf("%s.extraArgs.%s: %v, want %s", comp, flag, err, want)
			}
			if w := withoutOwned(comp, map[string]string{flag: "x", "v": "3"}); !maps.Equal(w, map[string]string{"v": "3"}) {
				t.Errorf("rendering passes %s.extraArgs %v", comp, w)
			}
		}
	}
	for path, f := range kubeletConfigFlags {
		if f.tunable && f.flag != "" {
			if _, err := DecodeUserConfig([]byte(header+"kubelet:\n  extraArgs:\n    "+f.flag+": x\n"), "devk.yaml"); err != nil {
				t.Errorf("%s (%s) is a tuning default extraArgs may change: %v", f.flag, path, err)
			}
		}
	}

	// Rendering, from a spec validation never saw.
	c := mustOpenWith(t, t.TempDir(), "", "")
	c.Config.Spec.Kubelet.ExtraArgs = map[string]string{"container-runtime-endpoint": "unix:///run/containerd/containerd.sock", "max-pods": "50"}
	c.Config.Spec.APIServer.ExtraArgs = map[string]string{"anonymous-auth": "true", "authorization-mode": "AlwaysAllow", "audit-log-maxage": "3"}
	c.Config.Spec.KubeProxy.ExtraArgs = map[string]string{"metrics-bind-address": "0.0.0.0:10249", "v": "2"}
	args := strings.Join(c.kubeletArgs(c.firstNode()), " ")
	if strings.Contains(args, "container-runtime-endpoint") || !strings.Contains(args, "--max-pods=50") {
		t.Errorf("kubelet: %s", args)
	}
	api := manifestFlags(t, c, "kube-apiserver")
	if api["anonymous-auth"] != "" || api["authorization-mode"] != "Node,RBAC" || api["audit-log-maxage"] != "3" {
		t.Errorf("kube-apiserver: anonymous-auth %q authorization-mode %q audit-log-maxage %q", api["anonymous-auth"], api["authorization-mode"], api["audit-log-maxage"])
	}
	cmd := strings.Join(kubeProxyDaemonSet("img", c.Config.Spec.KubeProxy.ExtraArgs).Spec.Template.Spec.Containers[0].Command, " ")
	if strings.Contains(cmd, "metrics-bind-address") || !strings.Contains(cmd, "--v=2") {
		t.Errorf("kube-proxy: %s", cmd)
	}
}
