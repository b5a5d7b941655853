package etcdwatch

import (
	"errors"
	"testing"

	"github.com/devk/devk/internal/testutil"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		key    string
		want   KeyInfo
	}{
		{"namespaced pod", "", "/registry/pods/default/web-1", KeyInfo{Resource: "pods", Namespace: "default", Name: "web-1"}},
		{"service under specs", "", "/registry/services/specs/kube-system/kube-dns", KeyInfo{Resource: "services", Namespace: "kube-system", Name: "kube-dns"}},
		{"endpoints under services", "", "/registry/services/endpoints/default/kubernetes", KeyInfo{Resource: "endpoints", Namespace: "default", Name: "kubernetes"}},
		{"node under minions", "", "/registry/minions/devk-control-plane", KeyInfo{Resource: "nodes", Name: "devk-control-plane"}},
		{"replication controller under controllers", "", "/registry/controllers/default/rc1", KeyInfo{Resource: "replicationcontrollers", Namespace: "default", Name: "rc1"}},
		{"ingress singular dir", "", "/registry/ingress/default/site", KeyInfo{Resource: "ingresses", Group: "networking.k8s.io", Namespace: "default", Name: "site"}},
		{"service account", "", "/registry/serviceaccounts/kube-system/default", KeyInfo{Resource: "serviceaccounts", Namespace: "kube-system", Name: "default"}},
		{"cluster-scoped namespace", "", "/registry/namespaces/kube-system", KeyInfo{Resource: "namespaces", Name: "kube-system"}},
		{"cluster role with colon", "", "/registry/clusterroles/system:aggregate-to-admin", KeyInfo{Resource: "clusterroles", Group: "rbac.authorization.k8s.io", Name: "system:aggregate-to-admin"}},
		{"range allocation", "", "/registry/ranges/serviceips", KeyInfo{Resource: "rangeallocations", Name: "serviceips"}},
		{"crd", "", "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", KeyInfo{Resource: "customresourcedefinitions", Group: "apiextensions.k8s.io", Name: "widgets.example.com"}},
		{"apiservice", "", "/registry/apiregistration.k8s.io/apiservices/v1.apps", KeyInfo{Resource: "apiservices", Group: "apiregistration.k8s.io", Name: "v1.apps"}},
		{"namespaced custom resource", "", "/registry/example.com/widgets/default/w1", KeyInfo{Resource: "widgets", Group: "example.com", Namespace: "default", Name: "w1"}},
		{"cluster custom resource", "", "/registry/example.com/gizmos/g1", KeyInfo{Resource: "gizmos", Group: "example.com", Name: "g1"}},
		{"unknown resource guessed", "", "/registry/things/ns1/t1", KeyInfo{Resource: "things", Namespace: "ns1", Name: "t1"}},
		{"other prefix", "/kubernetes.io", "/kubernetes.io/pods/default/p", KeyInfo{Resource: "pods", Namespace: "default", Name: "p"}},
		{"outside the prefix", "", "compact_rev_key", KeyInfo{}},
		{"resource dir only", "", "/registry/pods", KeyInfo{Resource: "pods"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseKey(tc.prefix, tc.key)
			tc.want.Key = tc.key
			if got != tc.want {
				t.Errorf("ParseKey(%q) = %+v, want %+v", tc.key, got, tc.want)
			}
		})
	}
}

func TestLookupResource(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     string
		wantErr  string
		wantDirs string
	}{
		{"plural", "pods", "pods", "", "pods"},
		{"short name", "svc", "services", "", "services/specs"},
		{"kind, any case", "ConfigMap", "configmaps", "", "configmaps"},
		{"group qualified", "deployments.apps", "deployments", "", "deployments"},
		{"singular", "endpointslice", "endpointslices", "", "endpointslices"},
		{"custom resource", "widgets.example.com", "widgets", "", "example.com/widgets"},
		{"typo lists close matches", "pdos", "", "did you mean pods", ""},
		{"transposed letters", "deploymnets", "", "deployments", ""},
		{"prefix of a name", "endpointsl", "", "endpointslices", ""},
		{"nothing close", "zzzzzzzzzz", "", "devk etcd ls --count", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := LookupResource(tc.in)
			if testutil.WantErr(t, err, tc.wantErr) {
				if !errors.Is(err, ErrUnknownResource) {
					t.Fatalf("err = %v, want ErrUnknownResource", err)
				}
				return
			}
			if r.Name != tc.want || r.Dir != tc.wantDirs {
				t.Errorf("got %s (dir %s), want %s (dir %s)", r.Name, r.Dir, tc.want, tc.wantDirs)
			}
		})
	}
}

func TestResolveObject(t *testing.T) {
	tests := []struct {
		name    string
		arg, ns string
		want    string
		wantErr string
	}{
		{"raw key", "/registry/pods/default/x", "", "/registry/pods/default/x", ""},
		{"resource ns name", "svc/kube-system/kube-dns", "", "/registry/services/specs/kube-system/kube-dns", ""},
		{"namespaced defaults to default", "cm/settings", "", "/registry/configmaps/default/settings", ""},
		{"namespace flag", "cm/settings", "prod", "/registry/configmaps/prod/settings", ""},
		{"cluster scoped", "node/devk-control-plane", "", "/registry/minions/devk-control-plane", ""},
		{"cluster scoped with namespace", "nodes/x/y", "", "", "not namespaced"},
		{"conflicting namespaces", "pods/a/p", "b", "", "-n says"},
		{"bare name", "web", "", "", "RESOURCE/NAME"},
		{"empty segment", "pods//x", "", "", "RESOURCE/NAME"},
		{"unknown resource", "pdos/x", "", "", "did you mean pods"},
		{"namespace flag with a slash", "cm/y", "../x", "", `namespace "../x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveObject("", tc.arg, tc.ns)
			if testutil.WantErr(t, err, tc.wantErr) {
				return
			}
			if got.Key != tc.want || !got.Exact {
				t.Errorf("key = %q, want %q", got.Key, tc.want)
			}
		})
	}
}

func TestResolvePrefix(t *testing.T) {
	tests := []struct {
		name    string
		arg, ns string
		want    string
		wantNS  string
		wantErr string
	}{
		{"everything", "", "", "/registry/", "", ""},
		{"everything in a namespace", "", "kube-system", "/registry/", "kube-system", ""},
		{"resource", "pods", "", "/registry/pods/", "", ""},
		{"resource in namespace", "svc/default", "", "/registry/services/specs/default/", "default", ""},
		{"resource with -n", "svc", "default", "/registry/services/specs/default/", "default", ""},
		{"raw prefix", "/registry/minions/", "", "/registry/minions/", "", ""},
		{"raw prefix with -n", "/registry/pods/", "x", "", "", "put the namespace in the prefix"},
		{"cluster scoped with namespace", "nodes/x", "", "", "", "not namespaced"},
		{"too many parts", "pods/a/b", "", "", "", "RESOURCE/NAMESPACE"},
		{"unknown", "srevices", "", "", "", "did you mean services"},
		{"namespace flag with a slash", "pods", "a/b", "", "", `namespace "a/b"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolvePrefix("", tc.arg, tc.ns)
			if testutil.WantErr(t, err, tc.wantErr) {
				return
			}
			if got.Key != tc.want || got.Namespace != tc.wantNS {
				t.Errorf("got %q ns %q, want %q ns %q", got.Key, got.Namespace, tc.want, tc.wantNS)
			}
		})
	}
}
