package config

import (
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
)

// FuzzConfigFile: whatever the bytes, decoding a config file never
// panics; a file it accepts names a valid cluster (or none), hands no
// flag devk owns (a layout flag, a config-file field's, a security
// setting: Owned) to extraArgs, and survives a write and a read unchanged.
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte(fullConfig))
	f.Add([]byte(header))
	f.Add([]byte(header + "networking:\n  podSubnet: 10.0.0.0/33\n"))
	f.Add([]byte(header + "apiServer:\n  extraArgs:\n    etcd-servers: x\n"))
	f.Add([]byte(header + "kubelet:\n  extraArgs:\n    container-runtime-endpoint: x\n    anonymous-auth: \"true\"\n    max-pods: \"9\"\n"))
	f.Add([]byte(header + "apiServer:\n  extraArgs:\n    authorization-mode: AlwaysAllow\n"))
	f.Add([]byte(header + "runtimeConfig:\n  api/all: \"true\"\n"))
	f.Add([]byte(kubeadmHeader + "kubeadmConfigPatches:\n- |\n  kind: ClusterConfiguration\n  clusterName: x\nkubeadmConfigPatchesJSON6902:\n- {group: kubeadm.k8s.io, version: v1beta4, kind: InitConfiguration, patch: \"[{op: remove, path: /x}]\"}\n"))
	f.Add([]byte("null"))
	f.Add([]byte(`"":`))
	own := ownFlags()
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := Decode(data, "f.yaml")
		if err != nil {
			return
		}
		if u.Name != "" && layout.ValidateName(u.Name) != nil {
			t.Fatalf("accepted name %q", u.Name)
		}
		for name, c := range SpecComponents(&u.Spec) {
			for flag := range c.ExtraArgs {
				if _, ok := own[name][flag]; ok || SetBySpecKey(flag) {
					t.Fatalf("accepted %s.extraArgs.%s, devk's flag", name, flag)
				}
			}
		}
		again, err := yaml.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(again, "f.yaml")
		if err != nil {
			t.Fatalf("an accepted file does not read back: %v\n%s", err, again)
		}
		u.file, u.root, back.file, back.root = "", nil, "", nil
		if !reflect.DeepEqual(back, u) {
			t.Fatalf("round trip changed the file:\n%+v\n%+v", u, back)
		}
	})
}
