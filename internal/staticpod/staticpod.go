// Package staticpod holds what the packages that write static pod
// manifests or restart static pods (cluster's up, swap, certs renew)
// must agree on.
package staticpod

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// WrittenAnnotation is stamped on every manifest a swap writes. The
// kubelet names a static pod by the hash of its manifest: without the
// stamp, swapping back to an image that ran before would reuse a pod UID
// the kubelet has just terminated, and the kubelet keeps that UID's final
// status, so the mirror pod would not show the new pod for minutes. It
// also tells `devk up` that the image in the manifest was swapped in.
const WrittenAnnotation = "devk.dev/written"

// DebugAnnotation, on a manifest `devk debug` wrote, holds the
// component's container as it was before, as JSON: `devk debug --stop`
// and `devk swap` put it back from there, probes and flags as they were.
const DebugAnnotation = "devk.dev/debug-original"

// DebugOriginal is the container a manifest `devk debug` wrote replaced,
// and false for any other manifest.
func DebugOriginal(pod *corev1.Pod) (*corev1.Container, bool, error) {
	raw, ok := pod.Annotations[DebugAnnotation]
	if !ok {
		return nil, false, nil
	}
	var c corev1.Container
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return nil, true, fmt.Errorf("pod %s: annotation %s is not a container: %w", pod.Name, DebugAnnotation, err)
	}
	return &c, true, nil
}

// HAStopGrace is how long an old static pod container gets after SIGTERM
// on a node whose API server a swap or a certificate renewal took out of
// the load balancer. An API server begins its graceful shutdown at once:
// it stops listening, tells its HTTP/2 clients to go away (they connect
// again, through the load balancer, to another) and finishes its
// requests in flight, which take milliseconds; what it still holds after
// that are watches, which it may keep for its whole grace period (30 s
// were seen: a swap of three nodes then took 84 s), and whose clients
// watch again elsewhere when they end.
const HAStopGrace = 5 * time.Second

// Parse reads a manifest into a Pod.
func Parse(data []byte) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil, err
	}
	return &pod, nil
}

// ErrNoContainer says a manifest has no container of the name asked for
// (and more than one, so none is the only one).
var ErrNoContainer = errors.New("no container")

// Container is the pod's container named name, else its only container:
// the one a swap replaces the image of and the checks read.
func Container(pod *corev1.Pod, name string) (*corev1.Container, error) {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i], nil
		}
	}
	if len(pod.Spec.Containers) == 1 {
		return &pod.Spec.Containers[0], nil
	}
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("pod %s has %w %q (it has %s)", pod.Name, ErrNoContainer, name, strings.Join(names, ", "))
}

// Image is the image the manifest at path names for container (see
// Container). A missing manifest is an error that errors.Is
// fs.ErrNotExist; a missing container, ErrNoContainer.
func Image(path, container string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	pod, err := Parse(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	c, err := Container(pod, container)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return c.Image, nil
}

// SwappedImage is the image of the first container (a control-plane
// static pod has one) of a manifest a swap wrote, and false for any other
// manifest.
func SwappedImage(pod *corev1.Pod) (string, bool) {
	if _, ok := pod.Annotations[WrittenAnnotation]; !ok {
		return "", false
	}
	if len(pod.Spec.Containers) == 0 {
		return "", false
	}
	return pod.Spec.Containers[0].Image, true
}

// SameButStamp reports whether two manifests describe the same pod, the
// WrittenAnnotation aside (a swap re-serializes a manifest, so bytes
// differ where the pod does not).
func SameButStamp(a, b *corev1.Pod) bool {
	strip := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		delete(p.Annotations, WrittenAnnotation)
		if len(p.Annotations) == 0 {
			p.Annotations = nil
		}
		return p
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

// FlagList is flags on a command line, as Flags reads them back:
// --name=value, sorted by name (the kubelet's, kube-proxy's and the
// control plane's commands).
func FlagList(flags map[string]string) []string {
	names := slices.Sorted(maps.Keys(flags))
	out := make([]string, 0, len(names))
	for _, k := range names {
		out = append(out, "--"+k+"="+flags[k])
	}
	return out
}

// Flags are the --name=value flags of a container's command and args
// (a bare --name is "true"); later ones win, as with pflag. A container
// the pod lacks has none.
func Flags(pod *corev1.Pod, container string) map[string]string {
	flags := map[string]string{}
	for _, c := range pod.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			if !strings.HasPrefix(a, "--") {
				continue
			}
			name, val, ok := strings.Cut(a[2:], "=")
			if !ok {
				val = "true"
			}
			flags[name] = val
		}
	}
	return flags
}
