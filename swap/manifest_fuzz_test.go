package swap

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/staticpod"
)

// FuzzManifestImage: a static pod manifest is whatever file sits in the
// kubelet's manifests dir, and a swap reads it, picks a container and
// rewrites its image. Whatever the bytes, the container name and the
// image (an image reference, as a swap has one): nothing panics; Read accepts only Pods; and when Read accepts a
// manifest and staticpod.WithImage rewrites it, the rewrite reads back as a Pod
// whose chosen container runs the new image, whose other containers are
// untouched, stamped with staticpod.WrittenAnnotation, and otherwise the same
// document field for field (fields corev1.Pod does not know included),
// in which staticpod sees the swapped image and the same pod.
func FuzzManifestImage(f *testing.F) {
	image := "localhost:5000/kube-apiserver@sha256:" + "2222222222222222222222222222222222222222222222222222222222222222"
	for _, seed := range []struct {
		manifest, container, image string
	}{
		{apiserverManifest, "kube-apiserver", image},
		{apiserverManifest, "", ""},
		{apiserverManifest, "other", image},
		{apiserverManifest + "  priorityClassName: system-node-critical\n  unknownToCorev1:\n    a: [1, 2.5, true, null]\n", "kube-apiserver", image},
		{"apiVersion: v1\nkind: Pod\nmetadata:\n  name: two\n  annotations:\n    devk.dev/written: \"2026-01-01T00:00:00Z\"\nspec:\n  containers:\n  - name: a\n    image: a:1\n  - name: b\n    image: b:1\n", "b", "b:2"},
		{`{"apiVersion":"v1","kind":"Pod","metadata":null,"spec":{"containers":[{"name":"c","image":"c:1","args":["--x=1e400"]}]}}`, "c", "c:2"},
		{"apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n", "", image},
		{"apiVersion: v1\nkind: Deployment\n", "", image},
		{"- a\n- b\n", "", ""},
		{"{", "", ""},
	} {
		f.Add([]byte(seed.manifest), seed.container, seed.image)
	}
	dir := f.TempDir()
	m := Manifest{Path: filepath.Join(dir, "kube-apiserver.yaml"), WorkDir: dir}
	now := time.Date(2026, 2, 3, 4, 5, 6, 7, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte, container, image string) {
		if _, err := name.ParseReference(image); image != "" && (err != nil || !printableASCII(image)) {
			return // a swap puts in the reference it pushed
		}
		if err := os.WriteFile(m.Path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		pod, read, err := m.Read()
		if err != nil {
			return
		}
		if pod.Kind != "Pod" {
			t.Fatalf("Read accepted a %q", pod.Kind)
		}
		c, err := staticpod.Container(pod, container)
		if err != nil {
			return
		}
		out, old, err := staticpod.WithImage(read, pod, container, image, nil, now)
		if !inDocument(read, c.Name) {
			// corev1.Pod read a container the document does not spell as
			// written (a null entry, a key in another case): WithImage
			// must refuse rather than report a change it did not make.
			if err == nil && image != "" {
				t.Fatalf("WithImage reported success on a manifest whose containers it cannot find as written:\n%s", data)
			}
			return
		}
		if err != nil {
			t.Fatalf("Read accepted the manifest and picked container %q, but WithImage fails: %v\n%s", c.Name, err, data)
		}
		if old != c.Image {
			t.Fatalf("WithImage says it replaced %q, the container ran %q", old, c.Image)
		}
		want := image
		if want == "" {
			want = old
		}

		if err := os.WriteFile(m.Path, out, 0o600); err != nil {
			t.Fatal(err)
		}
		pod2, _, err := m.Read()
		if err != nil {
			t.Fatalf("the rewritten manifest does not read back: %v\n%s", err, out)
		}
		if len(pod2.Spec.Containers) != len(pod.Spec.Containers) {
			t.Fatalf("%d containers after the rewrite, %d before", len(pod2.Spec.Containers), len(pod.Spec.Containers))
		}
		for i, ct := range pod2.Spec.Containers {
			switch {
			case ct.Name == c.Name && ct.Image != want:
				t.Fatalf("container %q runs %q after the rewrite, want %q\n%s", ct.Name, ct.Image, want, out)
			case ct.Name != c.Name && ct.Image != pod.Spec.Containers[i].Image:
				t.Fatalf("container %q changed from %q to %q; only %q was to change", ct.Name, pod.Spec.Containers[i].Image, ct.Image, c.Name)
			}
		}
		if got := pod2.Annotations[staticpod.WrittenAnnotation]; got != now.Format(time.RFC3339Nano) {
			t.Fatalf("%s = %q after the rewrite", staticpod.WrittenAnnotation, got)
		}
		if len(pod.Spec.Containers) == 1 {
			if got, swapped := staticpod.SwappedImage(pod2); !swapped || got != want {
				t.Fatalf("staticpod.SwappedImage = %q, %v; want %q", got, swapped, want)
			}
		}
		expected := pod.DeepCopy()
		for i := range expected.Spec.Containers {
			if expected.Spec.Containers[i].Name == c.Name {
				expected.Spec.Containers[i].Image = want
			}
		}
		if !staticpod.SameButStamp(expected, pod2) {
			t.Fatalf("the rewrite changed more than the image:\n%s\n%s", data, out)
		}
		before, after := document(t, read), document(t, out)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("the rewrite changed the document beyond image and stamp:\n%v\n%v", before, after)
		}
	})
}

// document is a manifest as a generic document without what a swap
// rewrites: the staticpod.WrittenAnnotation (and the maps holding only it) and the
// images of the containers.
func document(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("not a document: %v", err)
	}
	if md, ok := doc["metadata"].(map[string]any); ok || doc["metadata"] == nil {
		if ann, ok := md["annotations"].(map[string]any); ok || md["annotations"] == nil {
			delete(ann, staticpod.WrittenAnnotation)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
		if len(md) == 0 {
			delete(doc, "metadata")
		}
	}
	if spec, ok := doc["spec"].(map[string]any); ok {
		if ctrs, ok := spec["containers"].([]any); ok {
			for _, ct := range ctrs {
				if m, ok := ct.(map[string]any); ok {
					delete(m, "image")
				}
			}
		}
	}
	return doc
}

// printableASCII: image references are (name.ParseReference lets other
// bytes through in a registry's host name).
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// inDocument reports whether the manifest, read as a generic document,
// has spec.containers[].name == name, where WithImage looks for it.
func inDocument(data []byte, name string) bool {
	var doc map[string]any
	if yaml.Unmarshal(data, &doc) != nil {
		return false
	}
	spec, _ := doc["spec"].(map[string]any)
	ctrs, _ := spec["containers"].([]any)
	for _, ct := range ctrs {
		if m, ok := ct.(map[string]any); ok && m["name"] == name {
			return true
		}
	}
	return false
}
