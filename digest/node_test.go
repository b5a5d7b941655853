package digest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/devk/devk/build"
)

func TestOf(t *testing.T) {
	d := "sha256:" + "ab12000000000000000000000000000000000000000000000000000000000000"
	for ref, want := range map[string]string{
		"127.0.0.1:5000/kube-apiserver@" + d:                   d,
		"docker-pullable://localhost:5000/kube-apiserver@" + d: d,
		d:                                       d,
		"127.0.0.1:5000/kube-apiserver:v1.34.4": "",
		"":                                      "",
	} {
		if got := Of(ref); got != want {
			t.Errorf("Of(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestManifestSource(t *testing.T) {
	dir := t.TempDir()
	d := "sha256:" + "cd34000000000000000000000000000000000000000000000000000000000000"
	os.WriteFile(filepath.Join(dir, "kube-apiserver.yaml"), []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\nspec:\n  containers:\n  - name: kube-apiserver\n    image: 127.0.0.1:5000/kube-apiserver@"+d+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "kube-scheduler.yaml"), []byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-scheduler\n    image: registry.k8s.io/kube-scheduler:v1.34.4\n"), 0o600)
	api, _ := build.Lookup("apiserver")
	sched, _ := build.Lookup("scheduler")
	cm, _ := build.Lookup("controller-manager")
	kubectl, _ := build.Lookup("kubectl")
	tests := []struct {
		name       string
		comp       build.Component
		wantDigest string
		wantNote   string
	}{
		{"by digest", api, d, ""},
		{"by tag", sched, "", "names registry.k8s.io/kube-scheduler:v1.34.4 by tag, not by digest"},
		{"no manifest", cm, "", "no manifest: is the cluster up?"},
		{"not a static pod", kubectl, "", "kubectl is not a static pod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ob, err := Manifest{Dir: dir}.Observe(context.Background(), Target{Component: tc.comp})
			if err != nil || ob.Digest != tc.wantDigest || ob.Note != tc.wantNote || ob.NotApplicable != (tc.comp.Name == "kubectl") {
				t.Fatalf("Observe = %+v, %v", ob, err)
			}
		})
	}
}
