// Package kwok is what devk gives kwok to fake a cluster's nodes: the
// Node objects of layout.FakeNodes (kwok's annotation, label and taint,
// each group's capacity, labels, taints and zone), kwok's stages (its
// own defaults read from its module, or the user's files, checked),
// its command line, and its identity's rights in the cluster (a
// ClusterRole as narrow as kwok's own, exempt from API priority and
// fairness as kwok's own deployment is). It runs nothing and talks to
// no cluster but through the clientset it is given.
package kwok

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	flowcontrolv1ac "k8s.io/client-go/applyconfigurations/flowcontrol/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/layout"
)

// ProcessName is kwok's supervised process on node 0.
const ProcessName = "kwok"

// User is the common name of kwok's client certificate: the user its
// ClusterRole is bound to.
const User = "devk:kwok"

// RoleName names kwok's ClusterRole, its binding and its FlowSchema.
const RoleName = "devk:kwok"

// Each fake node's lease is what keeps it Ready (the heartbeat stage
// updates its status only every ten minutes); kwok renews a lease every
// quarter of its duration. The lease grows with the count so that all
// of kwok's renewals together stay near LeaseRenewalsPerSecond: at the
// kubelet's 40 s a thousand fake nodes wrote 100 leases a second, most
// of the API server's writes while pods were scheduled on two cores; at
// 120 s 33; at 480 s, 8, and 4,000 pods were Running in 138 s instead of
// 156 s (the API server's CPU 91 s instead of 112, etcd's 30 instead of
// 39). The controller-manager's node-monitor-grace-period follows
// (NodeMonitorGracePeriod), so that a late renewal is not a lost node.
const (
	// MinLeaseDurationSeconds is the shortest lease kwok is given.
	MinLeaseDurationSeconds = 120
	// LeaseRenewalsPerSecond is what all fake nodes' renewals aim at.
	LeaseRenewalsPerSecond = 8
	// leaseRenewalsPerLease: kwok renews at a quarter of the lease.
	leaseRenewalsPerLease = 4
	// DefaultNodeMonitorGracePeriod is the controller-manager's own.
	DefaultNodeMonitorGracePeriod = 50 * time.Second
)

// LeaseDurationSeconds is the lease kwok keeps for each of n fake nodes.
func LeaseDurationSeconds(n int) int {
	renewEvery := (n + LeaseRenewalsPerSecond - 1) / LeaseRenewalsPerSecond
	return max(MinLeaseDurationSeconds, leaseRenewalsPerLease*renewEvery)
}

// NodeMonitorGracePeriod is the controller-manager's
// node-monitor-grace-period with n fake nodes: half their lease, so a
// node is lost only when two renewals in a row are, and never less than
// the controller-manager's default; zero (its default stands) with none.
// A real node that stops is then seen as lost that much later too.
func NodeMonitorGracePeriod(n int) time.Duration {
	if n == 0 {
		return 0
	}
	return max(DefaultNodeMonitorGracePeriod, time.Duration(LeaseDurationSeconds(n))*time.Second/2)
}

// StageAPIVersion and StageKind head every Stage document.
const (
	StageAPIVersion = "kwok.x-k8s.io/v1alpha1"
	StageKind       = "Stage"
)

// DefaultStageFiles are kwok's default stages in its module (the list
// kustomize/stage/fast composes): nodes made Ready at once and kept so
// by leases, pods Running at once, completed, and deleted when asked.
var DefaultStageFiles = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// stageDoc is what devk checks of a Stage.
type stageDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ResourceRef struct {
			APIGroup string `json:"apiGroup"`
			Kind     string `json:"kind"`
		} `json:"resourceRef"`
	} `json:"spec"`
}

// CheckStages reads a file of Stage documents and returns its bytes and
// their names; a document that is not a Stage, or has no name or
// resource, is an error naming it.
func CheckStages(path string) ([]byte, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("stage file: %w", err)
	}
	docs, err := splitDocs(data)
	if err != nil {
		return nil, nil, fmt.Errorf("stage file %s: %v", path, err)
	}
	var names []string
	for i, doc := range docs {
		var s stageDoc
		if err := yaml.Unmarshal(doc, &s); err != nil {
			return nil, nil, fmt.Errorf("stage file %s, document %d: %v", path, i+1, err)
		}
		switch {
		case s.APIVersion != StageAPIVersion || s.Kind != StageKind:
			return nil, nil, fmt.Errorf("stage file %s, document %d: is %s %s, want apiVersion %s and kind %s (kwok's Stage)", path, i+1, s.APIVersion, s.Kind, StageAPIVersion, StageKind)
		case s.Metadata.Name == "":
			return nil, nil, fmt.Errorf("stage file %s, document %d: no metadata.name", path, i+1)
		case s.Spec.ResourceRef.Kind == "":
			return nil, nil, fmt.Errorf("stage file %s, stage %s: no spec.resourceRef.kind (Node, Pod …)", path, s.Metadata.Name)
		}
		names = append(names, s.Metadata.Name)
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("stage file %s: no Stage in it", path)
	}
	return data, names, nil
}

// splitDocs splits a YAML stream into its documents, dropping those
// with nothing but comments.
func splitDocs(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil || v != nil {
			out = append(out, doc)
		}
	}
}

// Stages is kwok's --config: the stage files' documents, each file
// checked. With no files, the defaults are read from kwok's module at
// moduleDir.
func Stages(files []string, moduleDir string) ([]byte, int, error) {
	if len(files) == 0 {
		for _, f := range DefaultStageFiles {
			files = append(files, filepath.Join(moduleDir, f))
		}
	}
	var b bytes.Buffer
	n := 0
	for _, f := range files {
		data, names, err := CheckStages(f)
		if err != nil {
			return nil, 0, err
		}
		fmt.Fprintf(&b, "---\n# %s\n", f)
		b.Write(bytes.TrimSpace(data))
		b.WriteString("\n")
		n += len(names)
	}
	return b.Bytes(), n, nil
}

// Argv is kwok's command line for a count of fake nodes: the nodes it
// manages are those with kwok's annotation, their leases
// LeaseDurationSeconds, no server of its own.
func Argv(binary, kubeconfig, config string, nodes int) []string {
	return []string{binary,
		"--kubeconfig=" + kubeconfig,
		"--config=" + config,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + layout.FakeNodeKey + "=" + layout.FakeNodeValue,
		"--node-lease-duration-seconds=" + strconv.Itoa(LeaseDurationSeconds(nodes)),
	}
}

// Env is kwok's environment beyond the daemons': its work directory
// (where it would read a default config) is dir, not the user's ~/.kwok.
func Env(dir string) []string { return []string{"KWOK_WORKDIR=" + dir} }

// ParseTaint parses kubectl's KEY[=VALUE]:EFFECT.
func ParseTaint(s string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("taint %q: want KEY[=VALUE]:EFFECT, e.g. dedicated=batch:NoSchedule", s)
	}
	key, value, _ := strings.Cut(kv, "=")
	t := corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return corev1.Taint{}, fmt.Errorf("taint %q: effect %q: want NoSchedule, PreferNoSchedule or NoExecute", s, effect)
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return corev1.Taint{}, fmt.Errorf("taint %q: key: %s", s, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return corev1.Taint{}, fmt.Errorf("taint %q: value: %s", s, strings.Join(errs, "; "))
	}
	return t, nil
}

// CheckGroup checks a group's capacity, labels, taints and zones; each
// problem is one error.
func CheckGroup(g layout.FakeNodeGroup) []error {
	var errs []error
	if g.Count < 0 {
		errs = append(errs, fmt.Errorf("count %d: want 0 or more", g.Count))
	}
	for _, q := range []struct{ key, v string }{{"cpu", g.CPU}, {"memory", g.Memory}, {"pods", g.Pods}} {
		if q.v == "" {
			continue
		}
		if v, err := resource.ParseQuantity(q.v); err != nil || v.Sign() <= 0 {
			errs = append(errs, fmt.Errorf("%s %q: want a positive quantity, e.g. %s", q.key, q.v, map[string]string{"cpu": layout.FakeNodeCPU, "memory": layout.FakeNodeMemory, "pods": layout.FakeNodePods}[q.key]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(g.Labels)) {
		if msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(g.Labels[k])...); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %s=%s: %s", k, g.Labels[k], strings.Join(msgs, "; ")))
		}
		if k == layout.FakeNodeKey || k == corev1.LabelHostname || (k == corev1.LabelTopologyZone && len(g.Zones) > 0) {
			errs = append(errs, fmt.Errorf("label %s: devk sets it", k))
		}
	}
	for _, t := range g.Taints {
		if _, err := ParseTaint(t); err != nil {
			errs = append(errs, err)
		}
	}
	for _, z := range g.Zones {
		if msgs := validation.IsValidLabelValue(z); len(msgs) > 0 || z == "" {
			errs = append(errs, fmt.Errorf("zone %q: %s", z, strings.Join(append(msgs, "want a label value"), "; ")))
		}
	}
	return errs
}

// Node is the Node object of fake node n, as kwok's node stages expect
// it: kwok's annotation, label and taint, the group's capacity as
// capacity and allocatable, its labels and taints, its zone.
func Node(n layout.FakeNode) (*corev1.Node, error) {
	g := n.Group
	labels := map[string]string{
		corev1.LabelHostname:   n.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		layout.FakeNodeKey:     layout.FakeNodeValue,
		"type":                 "kwok", // kwok's own examples select on it
	}
	maps.Copy(labels, g.Labels)
	if n.Zone != "" {
		labels[corev1.LabelTopologyZone] = n.Zone
	}
	taints := []corev1.Taint{{Key: layout.FakeNodeKey, Value: layout.FakeNodeValue, Effect: corev1.TaintEffectNoSchedule}}
	for _, s := range g.Taints {
		t, err := ParseTaint(s)
		if err != nil {
			return nil, err
		}
		taints = append(taints, t)
	}
	capacity := corev1.ResourceList{}
	for _, q := range []struct {
		name     corev1.ResourceName
		v, deflt string
	}{{corev1.ResourceCPU, g.CPU, layout.FakeNodeCPU}, {corev1.ResourceMemory, g.Memory, layout.FakeNodeMemory}, {corev1.ResourcePods, g.Pods, layout.FakeNodePods}} {
		v := q.v
		if v == "" {
			v = q.deflt
		}
		qty, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("fake node %s: %s %q: %v", n.Name, q.name, v, err)
		}
		capacity[q.name] = qty
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.Name,
			Labels:      labels,
			Annotations: map[string]string{layout.FakeNodeKey: layout.FakeNodeValue, "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec:   corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy(), Phase: corev1.NodePending},
	}, nil
}

// Selector selects the fake nodes.
const Selector = layout.FakeNodeKey + "=" + layout.FakeNodeValue

// ApplyRBAC gives kwok's user what kwok's own ClusterRole gives it
// (nodes read, nodes' and pods' status written, pods deleted, leases,
// events) and kwok's own FlowSchema (exempt: a thousand nodes' leases
// are not throttled). It reports whether anything changed.
func ApplyRBAC(ctx context.Context, cs kubernetes.Interface) (bool, error) {
	rule := func(group string, resources []string, verbs ...string) *rbacv1ac.PolicyRuleApplyConfiguration {
		return rbacv1ac.PolicyRule().WithAPIGroups(group).WithResources(resources...).WithVerbs(verbs...)
	}
	read := []string{"get", "list", "watch"}
	role := rbacv1ac.ClusterRole(RoleName).WithRules(
		rule("", []string{"nodes"}, read...),
		rule("", []string{"nodes/status", "pods/status"}, "patch", "update"),
		rule("", []string{"pods"}, append(read, "patch", "update", "delete")...),
		rule("coordination.k8s.io", []string{"leases"}, append(read, "create", "patch", "update")...),
		rule("", []string{"events"}, "create", "patch", "update"),
	)
	changed, err := kube.Apply(ctx, cs.RbacV1().ClusterRoles(), RoleName, role)
	if err != nil {
		return false, fmt.Errorf("kwok's ClusterRole: %w", err)
	}
	user := rbacv1ac.Subject().WithKind(rbacv1.UserKind).WithAPIGroup(rbacv1.GroupName).WithName(User)
	bound, err := kube.ApplyClusterRoleBinding(ctx, cs, RoleName, RoleName, user)
	if err != nil {
		return false, fmt.Errorf("kwok's ClusterRoleBinding: %w", err)
	}
	fs := flowcontrolv1ac.FlowSchema(flowSchemaName).WithSpec(flowcontrolv1ac.FlowSchemaSpec().
		WithPriorityLevelConfiguration(flowcontrolv1ac.PriorityLevelConfigurationReference().WithName(flowcontrolv1.PriorityLevelConfigurationNameExempt)).
		WithMatchingPrecedence(flowSchemaPrecedence).
		WithRules(flowcontrolv1ac.PolicyRulesWithSubjects().
			WithSubjects(flowcontrolv1ac.Subject().WithKind(flowcontrolv1.SubjectKindUser).WithUser(flowcontrolv1ac.UserSubject().WithName(User))).
			WithResourceRules(flowcontrolv1ac.ResourcePolicyRule().WithAPIGroups("*").WithResources("*").WithVerbs("*").WithClusterScope(true).WithNamespaces("*"))))
	exempt, err := kube.Apply(ctx, cs.FlowcontrolV1().FlowSchemas(), flowSchemaName, fs)
	if err != nil {
		return false, fmt.Errorf("kwok's FlowSchema: %w", err)
	}
	return changed || bound || exempt, nil
}

// flowSchemaName is RoleName as an object name (no colon), and its
// precedence kwok's own.
const (
	flowSchemaName       = "devk-kwok"
	flowSchemaPrecedence = 1000
)

// StopGrace is how long kwok has to exit on SIGTERM.
const StopGrace = 10 * time.Second

// Stop stops kwok on node 0 (the job's stop phase, and down's).
func Stop(ctx context.Context, files layout.NodeFiles) (bool, error) {
	return files.Procs().Stop(ctx, ProcessName, StopGrace)
}

// DeleteRBAC removes what ApplyRBAC made; it reports whether anything
// was there.
func DeleteRBAC(ctx context.Context, cs kubernetes.Interface) (bool, error) {
	found := false
	for _, del := range []struct {
		what string
		fn   func() error
	}{
		{"ClusterRoleBinding", func() error { return cs.RbacV1().ClusterRoleBindings().Delete(ctx, RoleName, metav1.DeleteOptions{}) }},
		{"ClusterRole", func() error { return cs.RbacV1().ClusterRoles().Delete(ctx, RoleName, metav1.DeleteOptions{}) }},
		{"FlowSchema", func() error {
			return cs.FlowcontrolV1().FlowSchemas().Delete(ctx, flowSchemaName, metav1.DeleteOptions{})
		}},
	} {
		switch err := del.fn(); {
		case err == nil:
			found = true
		case !apierrors.IsNotFound(err):
			return found, fmt.Errorf("delete kwok's %s: %w", del.what, err)
		}
	}
	return found, nil
}

// What a fake node costs the machine, measured by bench/scale on a
// v1.34.4 cluster (1,000 fake nodes, then 10,000 pods on them): the API
// server's, etcd's and kwok's resident memory together grew by 317 KiB
// a node and 72.7 KiB a pod. Each node is budgeted its podsPerNode.
const (
	nodeMemory  = 320 << 10
	podMemory   = 73 << 10
	podsPerNode = 10
)

// MemoryProblem says whether the machine lacks the memory for n more
// fake nodes (nil when it has it, or cannot tell).
func MemoryProblem(n int, available uint64) error {
	each := uint64(nodeMemory + podsPerNode*podMemory)
	need := uint64(n) * each
	if n <= 0 || available == 0 || available >= need {
		return nil
	}
	return fmt.Errorf("%d more fake nodes need about %d MiB (%d KiB each with %d pods: the API server's, etcd's and kwok's growth, as bench/scale measures it), and %d MiB are available: ask for at most %d, or free memory",
		n, need>>20, each>>10, podsPerNode, available>>20, available/each)
}

// NotOnFakeNodes is the node affinity that keeps a pod off fake nodes.
func NotOnFakeNodes() *corev1ac.AffinityApplyConfiguration {
	return corev1ac.Affinity().WithNodeAffinity(corev1ac.NodeAffinity().WithRequiredDuringSchedulingIgnoredDuringExecution(
		corev1ac.NodeSelector().WithNodeSelectorTerms(corev1ac.NodeSelectorTerm().WithMatchExpressions(
			corev1ac.NodeSelectorRequirement().WithKey(layout.FakeNodeKey).WithOperator(corev1.NodeSelectorOpDoesNotExist)))))
}

// KeepsOffFakeNodes says whether an affinity has NotOnFakeNodes' term.
func KeepsOffFakeNodes(a *corev1.Affinity) bool {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	return len(terms) > 0 && !slices.ContainsFunc(terms, func(t corev1.NodeSelectorTerm) bool {
		return !slices.ContainsFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == layout.FakeNodeKey && r.Operator == corev1.NodeSelectorOpDoesNotExist
		})
	})
}

// PodSubnetNodes is how many nodes a pod subnet has room for when each
// gets a /mask of it (the controller-manager's --node-cidr-mask-size).
func PodSubnetNodes(cidr string, mask int) int {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return 0
	}
	ones, _ := n.Mask.Size()
	if ones > mask {
		return 0
	}
	return 1 << (mask - ones)
}

// WiderMask is the longest prefix whose /masks hold n nodes.
func WiderMask(n, mask int) int {
	m := mask
	for m > 8 && 1<<(mask-m) < n {
		m--
	}
	return m
}
