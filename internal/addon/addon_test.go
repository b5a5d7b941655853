package addon

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func state(image string, ann map[string]string) *State {
	w, _ := Lookup("kube-proxy")
	return &State{Workload: w, Annotations: ann, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "sidecar", Image: "other"}, {Name: "kube-proxy", Image: image}}}}}
}

func TestKeptImage(t *testing.T) {
	const up, swapped, edited = "r/kube-proxy@sha256:1", "r/kube-proxy@sha256:2", "r/kube-proxy@sha256:3"
	for _, tc := range []struct {
		name     string
		live     *State
		want     string
		wantSwap bool
	}{
		{"absent", nil, up, false},
		{"installed by up", state(up, nil), up, false},
		{"swapped in", state(swapped, map[string]string{SwappedImageAnnotation: swapped}), swapped, true},
		{"rolled back to up's", state(up, map[string]string{SwappedImageAnnotation: up}), up, false},
		// kubectl set image after the swap: the container no longer
		// names what the swap put there, so up's record wins.
		{"edited since the swap", state(edited, map[string]string{SwappedImageAnnotation: swapped}), up, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, sw := KeptImage(up, tc.live)
			if got != tc.want || sw != tc.wantSwap {
				t.Fatalf("KeptImage = %s, %v; want %s, %v", got, sw, tc.want, tc.wantSwap)
			}
		})
	}
}

func TestImageIsTheAddonsContainer(t *testing.T) {
	if got := state("x", nil).Image(); got != "x" {
		t.Fatalf("Image = %q: want the kube-proxy container's, not the first", got)
	}
	if w, ok := Lookup("coredns"); !ok || w.Kind != Deployment || w.String() != "Deployment kube-system/coredns" {
		t.Fatalf("coredns: %+v %v", w, ok)
	}
}
