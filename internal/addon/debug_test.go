package addon

import (
	"context"
	"errors"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devk/devk/internal/staticpod"
)

// underDlv is a debugger command line for tests.
func underDlv(own []string) ([]string, error) {
	return append([]string{"/usr/local/bin/dlv", "exec", "--listen=" + DebugListenHost + ":2350", own[0], "--"}, own[1:]...), nil
}

func probe(port int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port)}}}
}

// TestSetDebug: kube-proxy (host network, a command) and CoreDNS (pod
// network, no command, two replicas) under the debugger and back, byte
// for byte; a swap of a new image puts the container back with it.
func TestSetDebug(t *testing.T) {
	ctx := context.Background()
	proxy := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}, Spec: appsv1.DaemonSetSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{
			Name: "kube-proxy", Image: "r/kube-proxy@sha256:aa", Command: []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf"},
			LivenessProbe: probe(10256), Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
		}}}}}}
	dns := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2)),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "coredns", Image: "r/coredns@sha256:bb", Args: []string{"-conf", "/etc/coredns/Corefile"},
			LivenessProbe: probe(8080), ReadinessProbe: probe(8181),
		}}}}}}
	cs := fake.NewClientset(proxy, dns)
	pw, _ := Lookup("kube-proxy")
	dw, _ := Lookup("coredns")
	get := func(w Workload) *State {
		t.Helper()
		s, err := Get(ctx, cs, w)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	if err := SetDebug(ctx, cs, pw, Debug{Stop: true}); !errors.Is(err, ErrNotDebugged) {
		t.Fatalf("stop of a workload not debugged: %v", err)
	}
	for _, w := range []Workload{pw, dw} {
		if err := SetDebug(ctx, cs, w, Debug{Image: "r/" + w.Component + "@sha256:dd", Command: underDlv, Entrypoint: []string{"/coredns"}, Port: 2350}); err != nil {
			t.Fatal(err)
		}
		s := get(w)
		c := s.Container()
		if !s.Debugging() || c.Image != "r/"+w.Component+"@sha256:dd" || c.Command[0] != "/usr/local/bin/dlv" || c.LivenessProbe != nil {
			t.Errorf("%s under the debugger: %+v", w, c)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == DebugIPEnv && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
		}) {
			t.Errorf("%s: no %s from the pod's IP: %+v", w, DebugIPEnv, c.Env)
		}
	}
	if c := get(pw).Container(); len(c.Ports) != 0 || c.Command[3] != "/usr/local/bin/kube-proxy" {
		t.Errorf("kube-proxy (host network): ports %+v, command %q", c.Ports, c.Command)
	}
	s := get(dw)
	if c := s.Container(); len(c.Ports) != 1 || c.Ports[0].HostPort != 2350 || c.Command[3] != "/coredns" || !slices.Equal(c.Args, []string{"-conf", "/etc/coredns/Corefile"}) || c.ReadinessProbe == nil {
		t.Errorf("coredns (pod network, the image's entrypoint): %+v", c)
	}
	if s.Desired != 1 || s.Annotations[DebugReplicasAnnotation] != "2" {
		t.Errorf("coredns under the debugger runs %d replicas (annotation %q), want 1 (2 kept)", s.Desired, s.Annotations[DebugReplicasAnnotation])
	}

	// Stop: as before, byte for byte.
	if err := SetDebug(ctx, cs, pw, Debug{Stop: true}); err != nil {
		t.Fatal(err)
	}
	if s := get(pw); !apiequality.Semantic.DeepEqual(s.Template, proxy.Spec.Template) || s.Debugging() {
		t.Errorf("after stop kube-proxy's template is %+v, want %+v", s.Template, proxy.Spec.Template)
	}
	// A swap of a new image: back as before, with that image.
	if err := SetDebug(ctx, cs, dw, Debug{Stop: true, Image: "r/coredns@sha256:ee"}); err != nil {
		t.Fatal(err)
	}
	s = get(dw)
	want := dns.Spec.Template.DeepCopy()
	want.Spec.Containers[0].Image = "r/coredns@sha256:ee"
	if !apiequality.Semantic.DeepEqual(s.Template, *want) || s.Desired != 2 || s.Debugging() || s.Annotations[DebugReplicasAnnotation] != "" {
		t.Errorf("after a swap coredns is %+v with %d replicas, want %+v with 2", s.Template, s.Desired, want)
	}
	if _, ok := s.Annotations[staticpod.DebugAnnotation]; ok {
		t.Error("the debug annotation stayed")
	}
}
