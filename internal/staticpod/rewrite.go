package staticpod

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// WithImage returns the manifest bytes with the container's image set to
// image (unchanged when image is empty) and WrittenAnnotation set to now,
// and the image it replaced. A new image also ends or starts debugging
// (debugContainer: a container `devk debug` wrote is put back as it was;
// with debug, the new one's command is debug's wrapping of its own).
// Every other field is kept.
func WithImage(data []byte, pod *corev1.Pod, container, image string, debug func(command []string) ([]string, error), now time.Time) ([]byte, string, error) {
	c, err := Container(pod, container)
	if err != nil {
		return nil, "", err
	}
	old := c.Image
	// A generic map keeps the fields corev1.Pod does not know.
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, "", err
	}
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		obj["metadata"] = md
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[WrittenAnnotation] = now.UTC().Format(time.RFC3339Nano)
	if image != "" {
		spec, _ := obj["spec"].(map[string]any)
		ctrs, _ := spec["containers"].([]any)
		set := 0
		for _, ct := range ctrs {
			if m, ok := ct.(map[string]any); ok && (m["name"] == c.Name) {
				if err := debugContainer(m, ann, debug); err != nil {
					return nil, "", fmt.Errorf("%s: %w", c.Name, err)
				}
				m["image"] = image
				set++
			}
		}
		if set == 0 {
			// corev1.Pod read it (encoding/json matches keys in any case,
			// and skips a null entry), but the document does not spell
			// spec.containers[].name as Kubernetes writes it.
			return nil, "", fmt.Errorf("the manifest's spec.containers has no entry named %q as written (keys spelt as Kubernetes spells them): fix the manifest", c.Name)
		}
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, "", err
	}
	return out, old, nil
}

// killsPaused are the probes that would restart a component paused at a
// breakpoint; readiness stays (a paused component is not ready).
var killsPaused = []string{"livenessProbe", "startupProbe"}

// debugContainer rewrites the manifest's container ctr (as the manifest
// spells it) in place: a container `devk debug` wrote is first put back
// as it was (DebugAnnotation, which then goes); with debug, to start
// debugging, the container as it is is kept in the annotation, its
// command wrapped by debug and the probes that kill a paused process
// dropped. ann is the manifest's annotations. (DebugOriginal reads the
// annotation back.)
func debugContainer(ctr, ann map[string]any, debug func(command []string) ([]string, error)) error {
	if raw, ok := ann[DebugAnnotation].(string); ok {
		var orig map[string]any
		if err := json.Unmarshal([]byte(raw), &orig); err != nil {
			return fmt.Errorf("annotation %s is not a container: %w", DebugAnnotation, err)
		}
		clear(ctr)
		for k, v := range orig {
			ctr[k] = v
		}
		delete(ann, DebugAnnotation)
	}
	if debug == nil {
		return nil
	}
	orig, err := json.Marshal(ctr)
	if err != nil {
		return err
	}
	var command []string
	if err := remarshal(ctr["command"], &command); err != nil || len(command) == 0 {
		return fmt.Errorf("the container has no command to run under the debugger (a manifest devk or kubeadm wrote names the binary and its flags in command)")
	}
	if command, err = debug(command); err != nil {
		return err
	}
	ctr["command"] = command
	for _, p := range killsPaused {
		delete(ctr, p)
	}
	ann[DebugAnnotation] = string(orig)
	return nil
}

// remarshal converts v, as a generic YAML document holds it, into out.
func remarshal(v, out any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}
