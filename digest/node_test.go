package digest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/cri"
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
	// A tag, with the node's runtime: the digest it has for that tag
	// (kubeadm's manifests); a tag it has not pulled stays a tag.
	tags := tagDigests{"registry.k8s.io/kube-scheduler:v1.34.4": d}
	if ob, err := (Manifest{Dir: dir, Tags: tags}).Observe(context.Background(), Target{Component: sched}); err != nil || ob.Digest != d || !strings.Contains(ob.Note, "the node's runtime has it") {
		t.Errorf("a tag the runtime has: %+v, %v; want %s", ob, err, d)
	}
	if ob, err := (Manifest{Dir: dir, Tags: tagDigests{}}).Observe(context.Background(), Target{Component: sched}); err != nil || ob.Digest != "" {
		t.Errorf("a tag the runtime lacks: %+v, %v; want no digest", ob, err)
	}
}

// tagDigests is a runtime's digests by tag.
type tagDigests map[string]string

func (t tagDigests) ImageDigest(_ context.Context, ref string) (string, error) { return t[ref], nil }

func mirrorPod(name, imageID string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem, Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "h"}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "kube-apiserver", ImageID: imageID,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
}

// TestMirrorPodOfThisNode: with several control-plane nodes, each has a
// mirror pod kube-apiserver-<node>; the one of this node is read by its
// exact name, never another node's that shares the prefix (and sorts
// first).
func TestMirrorPodOfThisNode(t *testing.T) {
	d0 := "sha256:" + strings.Repeat("0", 64)
	d1 := "sha256:" + strings.Repeat("1", 64)
	api, _ := build.Lookup("apiserver")
	ctx := context.Background()
	cs := fake.NewClientset(mirrorPod("kube-apiserver-cp-0", "repo@"+d0), mirrorPod("kube-apiserver-cp-1", "repo@"+d1))
	ob, err := Mirror{Client: cs, NodeName: "cp-1"}.Observe(ctx, Target{Component: api})
	if err != nil || ob.Digest != d1 || ob.Ref != "pod kube-apiserver-cp-1" {
		t.Fatalf("cp-1's mirror pod: %+v, %v", ob, err)
	}
	// A node whose mirror pod is missing does not borrow another's.
	ob, err = Mirror{Client: fake.NewClientset(mirrorPod("kube-apiserver-cp-0", "repo@"+d0)), NodeName: "cp"}.Observe(ctx, Target{Component: api})
	if err != nil || ob.Digest != "" || ob.Note != "no mirror pod kube-apiserver-cp" {
		t.Fatalf("a node without a mirror pod: %+v, %v", ob, err)
	}
}

// sandboxes is a runtime that has only sandboxes.
type sandboxes []cri.Sandbox

func (sandboxes) Containers(context.Context, cri.Filter) ([]cri.Container, error) { return nil, nil }
func (sandboxes) ContainerStatus(context.Context, string) (*cri.Status, error) {
	return nil, errors.New("none")
}
func (s sandboxes) Sandboxes(context.Context, string) ([]cri.Sandbox, error) { return s, nil }

func TestNodeName(t *testing.T) {
	host, _ := os.Hostname()
	pods := StaticPodNames()
	for _, tc := range []struct {
		name string
		sbs  sandboxes
		want string
	}{
		{"from a static pod's sandbox", sandboxes{{PodName: "coredns-abc", Static: false}, {PodName: "kube-scheduler-cp-1.example", Static: true}}, "cp-1.example"},
		{"a pod that only looks static is not one", sandboxes{{PodName: "kube-apiserver-proxy-x", Static: false}}, strings.ToLower(host)},
		{"no sandbox: the host name, as kubeadm", nil, strings.ToLower(host)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeName(context.Background(), tc.sbs, pods); got != tc.want {
				t.Fatalf("NodeName = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPodChecks(t *testing.T) {
	want := "sha256:" + strings.Repeat("a", 64)
	other := "sha256:" + strings.Repeat("b", 64)
	good := PodView{ManifestImage: "r/x@" + want, ImageRef: "r/x@" + want, PodUID: "u1", MirrorImageID: "docker-pullable://r/x@" + want, ConfigHash: "u1"}
	for _, tc := range []struct {
		name   string
		edit   func(v *PodView)
		failed []string
	}{
		{"all agree", func(*PodView) {}, nil},
		{"the manifest names a tag", func(v *PodView) { v.ManifestImage = "r/x:v1" }, []string{CheckManifest}},
		{"another container runs", func(v *PodView) { v.ImageRef = "r/x@" + other }, []string{CheckCRI}},
		{"the mirror pod shows an older pod", func(v *PodView) { v.ConfigHash, v.MirrorImageID = "u0", "r/x@"+other }, []string{CheckMirror, CheckConfigHash}},
		{"no running pod", func(v *PodView) { v.ImageRef, v.PodUID, v.ConfigHash = "", "", "" }, []string{CheckCRI, CheckConfigHash}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := good
			tc.edit(&v)
			var failed []string
			for _, c := range PodChecks(want, v) {
				if !c.OK {
					failed = append(failed, c.Name)
				}
			}
			if strings.Join(failed, ",") != strings.Join(tc.failed, ",") {
				t.Fatalf("failed checks %v, want %v", failed, tc.failed)
			}
		})
	}
}

// TestTaggedLike: a manifest that names its image by tag (kubeadm's) gets
// the new digest with the pushed tag beside it, which kubeadm reads the
// version from; one by digest alone stays so.
func TestTaggedLike(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	img := "127.0.0.1:5000/kube-apiserver@" + d
	for _, tt := range []struct {
		current, tag, want string
	}{
		{"127.0.0.1:5000/kube-apiserver:v1.34.4", "v1.34.4", "127.0.0.1:5000/kube-apiserver:v1.34.4@" + d},
		{"127.0.0.1:5000/kube-apiserver:v1.34.4", "", "127.0.0.1:5000/kube-apiserver:v1.34.4@" + d},
		{"127.0.0.1:5000/kube-apiserver:v1.34.4@sha256:" + strings.Repeat("cd", 32), "v1.35.0-alpha.1", "127.0.0.1:5000/kube-apiserver:v1.35.0-alpha.1@" + d},
		{"127.0.0.1:5000/kube-apiserver@sha256:" + strings.Repeat("cd", 32), "v1.34.4", img},
	} {
		if got := TaggedLike(tt.current, img, tt.tag); got != tt.want {
			t.Errorf("TaggedLike(%s, …, %q) = %s, want %s", tt.current, tt.tag, got, tt.want)
		}
	}
	if got := TagOf("127.0.0.1:5000/etcd:3.6.5-0@" + d); got != "3.6.5-0" {
		t.Errorf("TagOf = %q", got)
	}
	if got := TagOf(img); got != "" {
		t.Errorf("TagOf(a digest reference) = %q, want none", got)
	}
}
