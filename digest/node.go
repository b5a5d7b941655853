package digest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/source"
)

// Of returns the sha256:… part of an image reference or image ID
// (repo@sha256:…, docker-pullable://repo@sha256:…, sha256:…); empty when
// the reference names no digest (a tag).
func Of(ref string) string {
	ref = strings.TrimPrefix(ref, "docker-pullable://")
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		return ref[i+1:]
	}
	if strings.HasPrefix(ref, "sha256:") {
		return ref
	}
	return ""
}

// notStaticPod is the note node sources give for kubectl and friends.
func notStaticPod(t Target) (Observation, bool) {
	if t.Component.StaticPod {
		return Observation{}, false
	}
	return Observation{Note: t.Component.Name + " is not a static pod", NotApplicable: true}, true
}

// Manifest is the image a static pod's manifest names, in the kubelet's
// manifests dir.
type Manifest struct{ Dir string }

func (Manifest) Name() string { return "manifest" }

func (s Manifest) Observe(_ context.Context, t Target) (Observation, error) {
	if ob, skip := notStaticPod(t); skip {
		return ob, nil
	}
	path := filepath.Join(s.Dir, t.Component.Binary+".yaml")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Observation{Ref: path, Note: "no manifest: is the cluster up?"}, nil
	}
	if err != nil {
		return Observation{}, err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return Observation{}, fmt.Errorf("%s: %w", path, err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == t.Component.Binary || len(pod.Spec.Containers) == 1 {
			ob := Observation{Ref: path, Digest: Of(c.Image)}
			if ob.Digest == "" {
				ob.Note = "names " + c.Image + " by tag, not by digest"
			}
			return ob, nil
		}
	}
	return Observation{Ref: path, Note: "no container " + t.Component.Binary}, nil
}

// CRI is the imageRef of the running container, as the runtime reports it.
type CRI struct{ Client *cri.Client }

func (CRI) Name() string { return "cri" }

func (s CRI) Observe(ctx context.Context, t Target) (Observation, error) {
	if ob, skip := notStaticPod(t); skip {
		return ob, nil
	}
	cts, err := s.Client.Containers(ctx, cri.Filter{PodNamespace: metav1.NamespaceSystem, Container: t.Component.Binary, RunningOnly: true})
	if err != nil {
		return Observation{}, err
	}
	for _, ct := range cts {
		if !strings.HasPrefix(ct.PodName, t.Component.Binary+"-") {
			continue
		}
		st, err := s.Client.ContainerStatus(ctx, ct.ID)
		if err != nil {
			return Observation{}, err
		}
		return Observation{Ref: "container " + ct.ID[:12], Digest: Of(st.ImageRef)}, nil
	}
	return Observation{Note: "no running container"}, nil
}

// Mirror is the imageID the kubelet reports in the mirror pod's status.
type Mirror struct{ Client kubernetes.Interface }

func (Mirror) Name() string { return "mirror-pod" }

func (s Mirror) Observe(ctx context.Context, t Target) (Observation, error) {
	if ob, skip := notStaticPod(t); skip {
		return ob, nil
	}
	pods, err := s.Client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Observation{Note: "API not reachable: " + err.Error()}, nil
	}
	for _, p := range pods.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; !mirror || !strings.HasPrefix(p.Name, t.Component.Binary+"-") {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == t.Component.Binary && cs.State.Running != nil {
				return Observation{Ref: "pod " + p.Name, Digest: Of(cs.ImageID)}, nil
			}
		}
		return Observation{Ref: "pod " + p.Name, Note: "container not running"}, nil
	}
	return Observation{Note: "no mirror pod"}, nil
}

// NodeSources are the node's views of what runs: the manifest, the CRI
// runtime and the mirror pod. close releases the CRI connection.
func NodeSources(manifestsDir, kubeconfig, criSocket string) (sources []Source, close func(), err error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	rt, err := cri.Dial(criSocket)
	if err != nil {
		return nil, nil, err
	}
	return []Source{Manifest{Dir: manifestsDir}, CRI{Client: rt}, Mirror{Client: client}}, func() { rt.Close() }, nil
}

// PushedStaticPods names the static-pod components the tree has pushed.
func PushedStaticPods(treeDir string) ([]string, error) {
	tree, err := source.Open(treeDir)
	if err != nil {
		return nil, err
	}
	st, err := build.LoadState(tree.Root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range build.Catalog {
		if cs := st.Components[c.Name]; c.StaticPod && cs != nil && cs.Pushed != nil {
			out = append(out, c.Name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nothing pushed from %s yet: run `devk build apiserver --push`", tree.Root)
	}
	return out, nil
}
