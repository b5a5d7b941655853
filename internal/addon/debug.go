package addon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/devk/devk/internal/staticpod"
)

// An addon under the debugger (`devk debug kube-proxy|coredns`): its
// workload's container runs the debug image with the debugger around its
// own command, listening on its pod's address ($(DEVK_DEBUG_IP), which
// the kubelet expands from the downward API); a pod off the host
// network publishes the debugger's port on its node (hostPort), and a
// Deployment runs one replica (one debugger, one node port). The
// container as it was is kept in staticpod.DebugAnnotation on the
// workload, and the replicas in DebugReplicasAnnotation; SetDebug with
// Stop, or a swap of a new image, puts them back.
const (
	// DebugIPEnv is the debugged container's pod IP (a host-network
	// pod's is its node's).
	DebugIPEnv = "DEVK_DEBUG_IP"
	// DebugListenHost is the debugger's listen host in the container's
	// command line.
	DebugListenHost = "$(" + DebugIPEnv + ")"
	// DebugReplicasAnnotation is a Deployment's replicas before
	// debugging made them one.
	DebugReplicasAnnotation = "devk.dev/debug-replicas"
	// debugPortName names the debugger's port in the container.
	debugPortName = "dlv"
)

// Debug says how SetDebug changes an addon's workload.
type Debug struct {
	// Image is the container's image: the debug image or, with Stop,
	// the one to go back to (empty: the kept container's own).
	Image string
	// Command is the container's command under the debugger, given its
	// own (the image's Entrypoint when the container names none).
	Command    func(own []string) ([]string, error)
	Entrypoint []string
	// Port is the debugger's.
	Port int32
	// Stop puts the container (and replicas) back as they were.
	Stop bool
}

// ErrNotDebugged is SetDebug's error stopping a workload that runs no
// debugger.
var ErrNotDebugged = errors.New("not being debugged")

// Debugging says whether the workload's container runs under the
// debugger.
func (s *State) Debugging() bool {
	_, ok := s.Annotations[staticpod.DebugAnnotation]
	return ok
}

// SetDebug changes w's workload as d says, by an update (retried on a
// conflict) as FieldManager: the container put back as it was first, if
// a debug change kept it; then, unless d.Stop, kept again and run under
// the debugger. `devk up` applying the addon again ends debugging (its
// command and probes are its own fields).
func SetDebug(ctx context.Context, cs kubernetes.Interface, w Workload, d Debug) error {
	opts := metav1.UpdateOptions{FieldManager: FieldManager}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		switch w.Kind {
		case DaemonSet:
			ds, err := cs.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := debugTemplate(&ds.Spec.Template, &ds.ObjectMeta, nil, w, d); err != nil {
				return err
			}
			_, err = cs.AppsV1().DaemonSets(w.Namespace).Update(ctx, ds, opts)
			return err
		case Deployment:
			dep, err := cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := debugTemplate(&dep.Spec.Template, &dep.ObjectMeta, &dep.Spec, w, d); err != nil {
				return err
			}
			_, err = cs.AppsV1().Deployments(w.Namespace).Update(ctx, dep, opts)
			return err
		}
		return fmt.Errorf("addon %s: unknown kind %q", w.Component, w.Kind)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", w, err)
	}
	return nil
}

// debugTemplate is SetDebug's change of one object: its pod template,
// its metadata (the annotations) and, for a Deployment, its spec (the
// replicas).
func debugTemplate(tmpl *corev1.PodTemplateSpec, meta *metav1.ObjectMeta, dep *appsv1.DeploymentSpec, w Workload, d Debug) error {
	i := slices.IndexFunc(tmpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == w.Container })
	if i < 0 {
		return fmt.Errorf("no container %s", w.Container)
	}
	ctr := &tmpl.Spec.Containers[i]
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	ann := meta.Annotations
	if _, ok := ann[staticpod.DebugAnnotation]; ok {
		orig, err := (&State{Workload: w, Annotations: ann}).DebugOriginal()
		if err != nil {
			return err
		}
		*ctr = *orig
		delete(ann, staticpod.DebugAnnotation)
		if r, ok := ann[DebugReplicasAnnotation]; ok && dep != nil {
			n, err := strconv.ParseInt(r, 10, 32)
			if err != nil {
				return fmt.Errorf("annotation %s is not a number of replicas: %q", DebugReplicasAnnotation, r)
			}
			dep.Replicas = ptr.To(int32(n))
		}
		delete(ann, DebugReplicasAnnotation)
	} else if d.Stop && d.Image == "" {
		return fmt.Errorf("%s is %w (no %s annotation): nothing to stop", w, ErrNotDebugged, staticpod.DebugAnnotation)
	}
	if d.Stop {
		if d.Image != "" {
			ctr.Image = d.Image
		}
		return nil
	}
	kept, err := json.Marshal(ctr)
	if err != nil {
		return err
	}
	if *ctr, err = DebugContainer(*ctr, tmpl.Spec.HostNetwork, d); err != nil {
		return fmt.Errorf("%s: %w", w, err)
	}
	ann[staticpod.DebugAnnotation] = string(kept)
	if dep != nil && ptr.Deref(dep.Replicas, 1) > 1 {
		ann[DebugReplicasAnnotation] = strconv.Itoa(int(*dep.Replicas))
		dep.Replicas = ptr.To(int32(1))
	}
	return nil
}

// DebugContainer is container c run under the debugger as d says: the
// debug image, its command (the image's entrypoint when it names none)
// wrapped by d.Command, the probes that restart a paused process gone
// (readiness stays: a paused component is not ready), its pod's IP in
// DebugIPEnv and, off the host network, the debugger's port published
// on the node.
func DebugContainer(c corev1.Container, hostNetwork bool, d Debug) (corev1.Container, error) {
	c = *c.DeepCopy()
	own := c.Command
	if len(own) == 0 {
		own = d.Entrypoint
	}
	if len(own) == 0 {
		return c, errors.New("the container names no command and its image no entrypoint: nothing to run under the debugger")
	}
	var err error
	if c.Command, err = d.Command(own); err != nil {
		return c, err
	}
	c.Image = d.Image
	c.LivenessProbe, c.StartupProbe = nil, nil
	c.Env = append(c.Env, corev1.EnvVar{Name: DebugIPEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}})
	if !hostNetwork {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: debugPortName, ContainerPort: d.Port, HostPort: d.Port, Protocol: corev1.ProtocolTCP})
	}
	return c, nil
}

// DebugOriginal is the container the workload ran before it was
// debugged; an error when it is not (or the annotation is not one).
func (s *State) DebugOriginal() (*corev1.Container, error) {
	raw, ok := s.Annotations[staticpod.DebugAnnotation]
	if !ok {
		return nil, fmt.Errorf("%s is %w (no %s annotation): nothing to stop", s.Workload, ErrNotDebugged, staticpod.DebugAnnotation)
	}
	var c corev1.Container
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return nil, fmt.Errorf("%s: annotation %s is not a container: %w", s.Workload, staticpod.DebugAnnotation, err)
	}
	return &c, nil
}
