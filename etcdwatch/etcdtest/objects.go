package etcdtest

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// created is a fixed time, so fixtures encode the same bytes every run.
var created = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func meta(ns, name string, i int) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              name,
		Namespace:         ns,
		UID:               types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
		CreationTimestamp: created,
		Labels:            map[string]string{"app": "web", "tier": fmt.Sprintf("t%d", i%7)},
		ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager:    "kubectl-client-side-apply",
			Operation:  metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1",
			Time:       &created,
			FieldsType: "FieldsV1",
			FieldsV1:   &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:tier":{}}}}`)},
		}},
	}
}

// Pod is a pod shaped like one a Deployment makes, status included.
func Pod(ns, name string, i int) *corev1.Pod {
	m := meta(ns, name, i)
	m.GenerateName = "web-"
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f7c", UID: "11111111-2222-4333-8444-555555555555"}}
	return &corev1.Pod{
		ObjectMeta: m,
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "web",
				Image: "registry.k8s.io/nginx-slim:0.27",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
				Env:   []corev1.EnvVar{{Name: "INDEX", Value: fmt.Sprint(i)}, {Name: "MODE", Value: "production"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
			}},
			Volumes:            []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}},
			RestartPolicy:      corev1.RestartPolicyAlways,
			DNSPolicy:          corev1.DNSClusterFirst,
			ServiceAccountName: "default",
			NodeName:           "devk-control-plane",
			SchedulerName:      "default-scheduler",
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: created}},
			HostIP:     "127.0.0.1",
			PodIP:      fmt.Sprintf("10.244.%d.%d", i/250%250, i%250+1),
			StartTime:  &created,
		},
	}
}

// Service is a ClusterIP service.
func Service(ns, name string, i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: meta(ns, name, i),
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			Selector:   map[string]string{"app": "web"},
			ClusterIP:  fmt.Sprintf("10.96.%d.%d", i/250%250, i%250+1),
			ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250%250, i%250+1)},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// ConfigMap holds two entries.
func ConfigMap(ns, name string, i int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: meta(ns, name, i),
		Data:       map[string]string{"index": fmt.Sprint(i), "settings.yaml": "log: info\nworkers: 4\n"},
	}
}

// Secret holds a password that the decoder must redact.
func Secret(ns, name string, i int) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: meta(ns, name, i),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"password": []byte(fmt.Sprintf("hunter%d", i)), "user": []byte("admin")},
	}
}

// EndpointSlice has one ready endpoint.
func EndpointSlice(ns, name string, i int) *discoveryv1.EndpointSlice {
	ready := true
	port, proto, pname := int32(8080), corev1.ProtocolTCP, "http"
	m := meta(ns, name, i)
	m.Labels[discoveryv1.LabelServiceName] = "web"
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  m,
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.244.0.%d", i%250+1)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
}

// Lease is a leader-election lease.
func Lease(ns, name string, i int) *coordinationv1.Lease {
	holder := fmt.Sprintf("holder-%d", i)
	secs := int32(15)
	renew := metav1.NewMicroTime(created.Time)
	return &coordinationv1.Lease{
		ObjectMeta: meta(ns, name, i),
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &renew},
	}
}

// Kinds are the fixture kinds Objects cycles through, with the key
// directory kube-apiserver stores each under.
var Kinds = []struct {
	Dir  string
	Make func(ns, name string, i int) runtime.Object
}{
	{"pods", func(ns, n string, i int) runtime.Object { return Pod(ns, n, i) }},
	{"services/specs", func(ns, n string, i int) runtime.Object { return Service(ns, n, i) }},
	{"configmaps", func(ns, n string, i int) runtime.Object { return ConfigMap(ns, n, i) }},
	{"secrets", func(ns, n string, i int) runtime.Object { return Secret(ns, n, i) }},
	{"endpointslices", func(ns, n string, i int) runtime.Object { return EndpointSlice(ns, n, i) }},
	{"leases", func(ns, n string, i int) runtime.Object { return Lease(ns, n, i) }},
}

// Objects returns n encoded objects keyed as kube-apiserver keys them
// (/registry/<dir>/<namespace>/<name>), cycling through Kinds and ten
// namespaces.
func Objects(n int) map[string][]byte {
	out := make(map[string][]byte, n)
	for i := 0; i < n; i++ {
		k := Kinds[i%len(Kinds)]
		ns := fmt.Sprintf("ns-%d", i%10)
		name := fmt.Sprintf("obj-%05d", i)
		out[fmt.Sprintf("/registry/%s/%s/%s", k.Dir, ns, name)] = MustEncode(k.Make(ns, name, i))
	}
	return out
}
