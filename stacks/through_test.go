package stacks

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestEndpointThrough: through a cluster's API, the API server's dump is
// read at the kubeconfig's server or, with a node, at the address and
// port its pod advertises; a kubelet's through the node proxy, the first
// node by default; the controllers' and etcd's are refused with why.
func TestEndpointThrough(t *testing.T) {
	older := metav1.NewTime(time.Unix(1000, 0))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/namespaces/kube-system/pods/kube-apiserver-cp2":
			json.NewEncoder(w).Encode(corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver",
				Command: []string{"kube-apiserver", "--advertise-address=10.250.0.3", "--secure-port=6444"}}}}})
		case "/api/v1/nodes":
			json.NewEncoder(w).Encode(corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, Items: []corev1.Node{
				{ObjectMeta: metav1.ObjectMeta{Name: "w1", CreationTimestamp: metav1.NewTime(time.Unix(2000, 0))}},
				{ObjectMeta: metav1.ObjectMeta{Name: "cp1", CreationTimestamp: older}},
			}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	conn := &rest.Config{Host: srv.URL}
	ctx := context.Background()
	for _, tc := range []struct {
		component, node, host, path string
	}{
		{APIServer, "", srv.URL, GoroutinePath},
		{APIServer, "cp2", "https://10.250.0.3:6444", GoroutinePath},
		{Kubelet, "", srv.URL, "/api/v1/nodes/cp1/proxy" + GoroutinePath},
		{Kubelet, "w1", srv.URL, "/api/v1/nodes/w1/proxy" + GoroutinePath},
	} {
		e, err := EndpointThrough(ctx, conn, tc.component, tc.node)
		if err != nil || e.Host != tc.host || e.Path != tc.path {
			t.Errorf("%s on %q: %+v, %v; want %s%s", tc.component, tc.node, e, err, tc.host, tc.path)
		}
	}
	for _, c := range []string{ControllerManager, Scheduler, Etcd} {
		if _, err := EndpointThrough(ctx, conn, c, ""); err == nil || !strings.Contains(err.Error(), "only on a devk cluster of this machine") {
			t.Errorf("%s: %v", c, err)
		}
	}
	if _, err := EndpointThrough(ctx, conn, APIServer, "nope"); err == nil || !strings.Contains(err.Error(), "--node nope") {
		t.Errorf("a node without an API server: %v", err)
	}
}
