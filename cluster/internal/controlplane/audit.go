package controlplane

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
)

// The audit log's rotation (the API server's lumberjack): a file of at
// most AuditLogMaxSizeMB megabytes, AuditLogMaxBackups rotated ones kept
// beside it, so at most 4 × 20 MB per control-plane node.
const (
	AuditLogMaxSizeMB  = 20
	AuditLogMaxBackups = 3
	// AuditLogFormat is what `devk trace` reads: one audit.k8s.io/v1
	// Event a line.
	AuditLogFormat = "json"
)

// The volumes of the API server's audit files, named as the Kubernetes
// documentation's (and kind's guide's) example names them.
const (
	auditPolicyVolume = "audit"
	auditLogVolume    = "audit-log"
)

// withAudit adds the audit flags and mounts to the API server's pod
// when the spec turns the audit log on: the policy file and the log's
// paths are devk's own (config.Owned), rotation a default.
func withAudit(in ManifestInput, s podSpec) podSpec {
	if !in.Config.Spec.Audit.On() {
		return s
	}
	p := in.Files
	s.args["audit-policy-file"] = p.AuditPolicy()
	s.args["audit-log-path"] = p.AuditLog()
	s.args["audit-log-format"] = AuditLogFormat
	s.defaults["audit-log-maxsize"] = strconv.Itoa(AuditLogMaxSizeMB)
	s.defaults["audit-log-maxbackup"] = strconv.Itoa(AuditLogMaxBackups)
	s.hostPath(auditPolicyVolume, p.AuditPolicy(), corev1.HostPathFile)
	s.mounts[len(s.mounts)-1].ReadOnly = true
	s.hostPath(auditLogVolume, p.AuditLogDir(), corev1.HostPathDirectoryOrCreate)
	// The API server reads its policy when it starts: the policy's
	// digest on the pod makes a changed policy a changed manifest, which
	// the next up writes, and the kubelet restarts the pod. A policy that
	// cannot be read is reported by the phase that writes it.
	if data, err := AuditPolicy(in.Config.Spec); err == nil {
		s.annotations = map[string]string{AuditPolicyAnnotation: fmt.Sprintf("sha256:%x", sha256.Sum256(data))}
	}
	return s
}

// AuditPolicyAnnotation holds, on the API server's pod, the digest of
// the audit policy it was started with.
const AuditPolicyAnnotation = "devk.dev/audit-policy"

// DefaultAuditPolicy is devk's: writes with their request and response
// bodies, reads and watches as metadata, nothing for the traffic an idle
// cluster makes all the time (leases' renewals, health checks), and no
// body of what holds credentials (Secrets, ConfigMaps such as
// cluster-info's signed tokens, a ServiceAccount's token request, a
// TokenReview). Events are written by every controller and kept at
// metadata: `devk trace` reads their objects from the API.
func DefaultAuditPolicy() *auditv1.Policy {
	reads := []string{"get", "list", "watch"}
	return &auditv1.Policy{
		TypeMeta:   metav1.TypeMeta{APIVersion: auditv1.SchemeGroupVersion.String(), Kind: "Policy"},
		OmitStages: []auditv1.Stage{auditv1.StageRequestReceived},
		Rules: []auditv1.PolicyRule{
			{Level: auditv1.LevelNone, Verbs: []string{"get", "list", "watch", "update", "patch"},
				Resources: []auditv1.GroupResources{{Group: "coordination.k8s.io", Resources: []string{"leases"}}}},
			{Level: auditv1.LevelNone, NonResourceURLs: []string{"/healthz*", "/livez*", "/readyz*", "/version"}},
			{Level: auditv1.LevelMetadata, Resources: []auditv1.GroupResources{
				{Resources: []string{"secrets", "configmaps", "serviceaccounts/token", "events"}},
				{Group: "authentication.k8s.io", Resources: []string{"tokenreviews"}},
				{Group: "events.k8s.io", Resources: []string{"events"}},
			}},
			{Level: auditv1.LevelMetadata, Verbs: reads},
			{Level: auditv1.LevelRequestResponse},
		},
	}
}

// AuditPolicy is the policy file the API server of a cluster with spec
// reads: the spec's audit.policyFile, checked to be an audit.k8s.io/v1
// Policy, or devk's.
func AuditPolicy(spec layout.Spec) ([]byte, error) {
	if f := spec.Audit.PolicyFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("audit.policyFile: %w (fix the path in the config file, or leave the key out for devk's policy)", err)
		}
		if err := checkAuditPolicy(data); err != nil {
			return nil, fmt.Errorf("audit.policyFile %s: %w", f, err)
		}
		return data, nil
	}
	return yaml.Marshal(DefaultAuditPolicy())
}

// auditCodecs decodes audit.k8s.io/v1 strictly: a misspelt key is an
// error here rather than the API server's exit at start.
var auditCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := auditv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// checkAuditPolicy says why data is not an audit.k8s.io/v1 Policy with
// at least one rule.
func checkAuditPolicy(data []byte) error {
	obj, gvk, err := auditCodecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return fmt.Errorf("not an audit.k8s.io/v1 Policy: %w", err)
	}
	p, ok := obj.(*auditv1.Policy)
	if !ok {
		return fmt.Errorf("is a %s, want an audit.k8s.io/v1 Policy", gvk.Kind)
	}
	if len(p.Rules) == 0 {
		return fmt.Errorf("has no rules: the API server refuses a policy without rules")
	}
	return nil
}
