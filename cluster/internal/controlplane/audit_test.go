package controlplane

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/devk/devk/internal/layout"
)

// TestDefaultAuditPolicy loads devk's policy with the API server's own
// reader and asks its own evaluator what level each kind of request
// gets.
func TestDefaultAuditPolicy(t *testing.T) {
	data, err := AuditPolicy(layout.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.LoadPolicyFromBytes(data)
	if err != nil {
		t.Fatalf("the API server refuses devk's policy: %v\n%s", err, data)
	}
	eval := policy.NewPolicyRuleEvaluator(p)
	kubelet := &user.DefaultInfo{Name: "system:node:devk-worker", Groups: []string{"system:nodes"}}
	kubectl := &user.DefaultInfo{Name: "kubernetes-admin", Groups: []string{"kubeadm:cluster-admins"}}
	res := func(u user.Info, verb, group, resource, sub string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub,
			Namespace: "default", Name: "x", ResourceRequest: true}
	}
	tests := []struct {
		name string
		req  authorizer.AttributesRecord
		want audit.Level
	}{
		{"a kubelet renews its lease", res(kubelet, "update", "coordination.k8s.io", "leases", ""), audit.LevelNone},
		{"leader election reads a lease", res(kubectl, "get", "coordination.k8s.io", "leases", ""), audit.LevelNone},
		{"readyz", authorizer.AttributesRecord{User: kubelet, Verb: "get", Path: "/readyz"}, audit.LevelNone},
		{"livez of one check", authorizer.AttributesRecord{User: kubelet, Verb: "get", Path: "/livez/etcd"}, audit.LevelNone},
		{"a Secret created", res(kubectl, "create", "", "secrets", ""), audit.LevelMetadata},
		{"a ConfigMap updated", res(kubectl, "update", "", "configmaps", ""), audit.LevelMetadata},
		{"a token requested", res(kubelet, "create", "", "serviceaccounts", "token"), audit.LevelMetadata},
		{"a TokenReview", res(kubelet, "create", "authentication.k8s.io", "tokenreviews", ""), audit.LevelMetadata},
		{"an Event", res(kubelet, "create", "", "events", ""), audit.LevelMetadata},
		{"pods listed", res(kubectl, "list", "", "pods", ""), audit.LevelMetadata},
		{"services watched", res(kubelet, "watch", "", "services", ""), audit.LevelMetadata},
		{"a Service created", res(kubectl, "create", "", "services", ""), audit.LevelRequestResponse},
		{"a pod bound", res(kubectl, "create", "", "pods", "binding"), audit.LevelRequestResponse},
		{"a status written", res(kubelet, "patch", "", "pods", "status"), audit.LevelRequestResponse},
		{"an EndpointSlice", res(kubectl, "create", "discovery.k8s.io", "endpointslices", ""), audit.LevelRequestResponse},
		{"a ServiceAccount created", res(kubectl, "create", "", "serviceaccounts", ""), audit.LevelRequestResponse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := eval.EvaluatePolicyRule(tt.req)
			if got.Level != tt.want {
				t.Errorf("level %s, want %s", got.Level, tt.want)
			}
			if got.Level != audit.LevelNone && !slices.Contains(got.OmitStages, audit.StageRequestReceived) {
				t.Errorf("stage RequestReceived not omitted: %v", got.OmitStages)
			}
		})
	}
}

func TestAuditPolicyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"
	tests := []struct {
		name, file, wantErr string
	}{
		{"the user's own", write("own.yaml", own), ""},
		{"missing", filepath.Join(dir, "nope.yaml"), "audit.policyFile: open"},
		{"a misspelt key", write("typo.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrulez: []\n"), "not an audit.k8s.io/v1 Policy"},
		{"no rules", write("empty.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\n"), "has no rules"},
		{"another kind", write("pod.yaml", "apiVersion: v1\nkind: Pod\n"), "not an audit.k8s.io/v1 Policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := AuditPolicy(layout.Spec{Audit: layout.Audit{PolicyFile: tt.file}})
			if tt.wantErr == "" {
				if err != nil || string(data) != own {
					t.Fatalf("got %q, %v; want the file as it is", data, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestManifestAudit: the API server's audit flags and mounts, and none
// with audit.enabled false.
func TestManifestAudit(t *testing.T) {
	cfg, p := testCluster()
	want := []string{
		"--audit-policy-file=/home/u/.devk/clusters/devk/audit-policy.yaml",
		"--audit-log-path=/home/u/.devk/clusters/devk/logs/audit/audit.log",
		"--audit-log-format=json", "--audit-log-maxsize=20", "--audit-log-maxbackup=3",
	}
	render := func(cfg layout.Config) (cmd []string, mounts map[string]bool) {
		data, err := Manifest("kube-apiserver", ManifestInput{Config: cfg, Node: cfg.FirstNode(), Files: p, Image: digestRef})
		if err != nil {
			t.Fatal(err)
		}
		pod := parseManifest(t, data)
		mounts = map[string]bool{}
		for _, m := range pod.Spec.Containers[0].VolumeMounts {
			mounts[m.Name+":"+m.MountPath] = m.ReadOnly
		}
		return pod.Spec.Containers[0].Command, mounts
	}
	cmd, mounts := render(cfg)
	for _, f := range want {
		if !slices.Contains(cmd, f) {
			t.Errorf("missing %s in %v", f, cmd)
		}
	}
	if ro, ok := mounts["audit:/home/u/.devk/clusters/devk/audit-policy.yaml"]; !ok || !ro {
		t.Errorf("the policy is not mounted read-only: %v", mounts)
	}
	if ro, ok := mounts["audit-log:/home/u/.devk/clusters/devk/logs/audit"]; !ok || ro {
		t.Errorf("the log dir is not mounted writable: %v", mounts)
	}
	digest := func(cfg layout.Config) string {
		data, err := Manifest("kube-apiserver", ManifestInput{Config: cfg, Node: cfg.FirstNode(), Files: p, Image: digestRef})
		if err != nil {
			t.Fatal(err)
		}
		return parseManifest(t, data).Annotations[AuditPolicyAnnotation]
	}
	own := filepath.Join(t.TempDir(), "own.yaml")
	if err := os.WriteFile(own, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withOwn := cfg
	withOwn.Spec.Audit.PolicyFile = own
	devks, owns := digest(cfg), digest(withOwn)
	if !strings.HasPrefix(devks, "sha256:") || devks == owns {
		t.Errorf("the policy's digest on the pod: devk's %q, the file's %q", devks, owns)
	}
	if err := os.WriteFile(own, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if digest(withOwn) == owns {
		t.Error("a changed policy file leaves the manifest as it was: the API server would not read it")
	}
	off := false
	cfg.Spec.Audit.Enabled = &off
	cmd, mounts = render(cfg)
	for _, a := range cmd {
		if strings.HasPrefix(a, "--audit-") {
			t.Errorf("audit off, yet %s", a)
		}
	}
	if _, ok := mounts["audit-log:/home/u/.devk/clusters/devk/logs/audit"]; ok {
		t.Errorf("audit off, yet the log dir is mounted")
	}
}
