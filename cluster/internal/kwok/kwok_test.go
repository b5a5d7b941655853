package kwok

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/testutil"
)

const stage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: %s
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  next:
    statusTemplate: ""
`

func write(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckStages(t *testing.T) {
	two := strings.ReplaceAll(stage, "%s", "a") + "---\n# a comment alone\n---\n" + strings.ReplaceAll(stage, "%s", "b")
	for _, tc := range []struct {
		name, data string
		want       []string
		err        string
	}{
		{"two stages and an empty document", two, []string{"a", "b"}, ""},
		{"not a stage", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", nil, "is v1 ConfigMap, want apiVersion kwok.x-k8s.io/v1alpha1 and kind Stage"},
		{"no name", strings.ReplaceAll(stage, "name: %s", "labels: {}"), nil, "document 1: no metadata.name"},
		{"no resource", strings.ReplaceAll(strings.ReplaceAll(stage, "%s", "c"), "kind: Pod", "apiGroup: v1"), nil, "stage c: no spec.resourceRef.kind"},
		{"empty", "# nothing\n", nil, "no Stage in it"},
		{"not YAML", "a: [\n", nil, "stage file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, names, err := CheckStages(write(t, "stages.yaml", tc.data))
			testutil.WantErr(t, err, tc.err)
			if !slices.Equal(names, tc.want) {
				t.Errorf("names %v, want %v", names, tc.want)
			}
		})
	}
	if _, _, err := CheckStages(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestStages: the user's files replace the defaults, each checked, and
// the defaults are read from kwok's module (a directory shaped as it).
func TestStages(t *testing.T) {
	module := t.TempDir()
	for i, f := range DefaultStageFiles {
		p := filepath.Join(module, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(stage, "%s", "s"+string(rune('0'+i)))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, n, err := Stages(nil, module)
	if err != nil || n != len(DefaultStageFiles) {
		t.Fatalf("defaults: %d stages, %v", n, err)
	}
	docs, err := splitDocs(data)
	if err != nil || len(docs) != len(DefaultStageFiles) {
		t.Errorf("defaults: %d documents (%v), want %d:\n%s", len(docs), err, len(DefaultStageFiles), data)
	}
	own := write(t, "own.yaml", strings.ReplaceAll(stage, "%s", "mine"))
	data, n, err = Stages([]string{own}, "/nonexistent")
	if err != nil || n != 1 || !strings.Contains(string(data), "name: mine") || strings.Contains(string(data), "name: s0") {
		t.Errorf("own stages: %d, %v:\n%s", n, err, data)
	}
	if _, _, err := Stages([]string{write(t, "bad.yaml", "kind: Pod\n")}, module); err == nil {
		t.Error("a bad stage file was taken")
	}
}

// TestLease: kwok's renewals of all leases stay near
// LeaseRenewalsPerSecond, never below the shortest lease; the
// controller-manager's grace period is half a lease, not below its
// default, and not set without fake nodes.
func TestLease(t *testing.T) {
	for _, tc := range []struct {
		n     int
		lease int
		grace time.Duration
	}{
		{0, MinLeaseDurationSeconds, 0},
		{1, MinLeaseDurationSeconds, 60 * time.Second},
		{240, MinLeaseDurationSeconds, 60 * time.Second},
		{250, 128, 64 * time.Second},
		{1000, 500, 250 * time.Second},
		{5000, 2500, 1250 * time.Second},
	} {
		lease, grace := LeaseDurationSeconds(tc.n), NodeMonitorGracePeriod(tc.n)
		if argv := Argv("kwok", "kwok.conf", "kwok.yaml", tc.n); !slices.Contains(argv, fmt.Sprintf("--node-lease-duration-seconds=%d", lease)) {
			t.Errorf("%d fake nodes: kwok's command line %q has not its lease", tc.n, argv)
		}
		if lease != tc.lease || grace != tc.grace {
			t.Errorf("%d fake nodes: lease %d s, grace %s; want %d s, %s", tc.n, lease, grace, tc.lease, tc.grace)
		}
		if rate := float64(tc.n) / (float64(lease) / leaseRenewalsPerLease); rate > LeaseRenewalsPerSecond {
			t.Errorf("%d fake nodes: %.1f renewals a second, over %d", tc.n, rate, LeaseRenewalsPerSecond)
		}
	}
}

func TestParseTaint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want corev1.Taint
		err  string
	}{
		{"dedicated=batch:NoSchedule", corev1.Taint{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}, ""},
		{"example.com/gpu:NoExecute", corev1.Taint{Key: "example.com/gpu", Effect: corev1.TaintEffectNoExecute}, ""},
		{"dedicated=batch", corev1.Taint{}, "want KEY[=VALUE]:EFFECT"},
		{"a=b:Sometimes", corev1.Taint{}, `effect "Sometimes"`},
		{"bad key!=b:NoSchedule", corev1.Taint{}, "key:"},
	} {
		got, err := ParseTaint(tc.in)
		testutil.WantErr(t, err, tc.err)
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestCheckGroup(t *testing.T) {
	if errs := CheckGroup(layout.FakeNodeGroup{Count: 3, CPU: "8", Memory: "32Gi", Pods: "250", Labels: map[string]string{"pool": "a"}, Taints: []string{"x=y:NoSchedule"}, Zones: []string{"z1", "z2"}}); len(errs) > 0 {
		t.Errorf("a good group: %v", errs)
	}
	errs := CheckGroup(layout.FakeNodeGroup{Count: -1, CPU: "lots", Memory: "-1Gi", Labels: map[string]string{layout.FakeNodeKey: "x", "bad key": "v"}, Taints: []string{"t"}, Zones: []string{""}})
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"count -1", `cpu "lots"`, `memory "-1Gi"`, "label kwok.x-k8s.io/node: devk sets it", "label bad key=v", `taint "t"`, `zone ""`} {
		if !strings.Contains(all, want) {
			t.Errorf("no problem %q among:\n%s", want, all)
		}
	}
}

func TestNode(t *testing.T) {
	f := layout.FakeNodes{Groups: []layout.FakeNodeGroup{
		{Count: 2},
		{Count: 3, CPU: "4", Pods: "20", Labels: map[string]string{"pool": "b"}, Taints: []string{"gpu=yes:NoSchedule"}, Zones: []string{"z1", "z2"}},
	}}
	list := f.List("dev")
	if len(list) != 5 || list[0].Name != "dev-fake-1" || list[4].Name != "dev-fake-5" || list[2].Zone != "z1" || list[3].Zone != "z2" || list[4].Zone != "z1" {
		t.Fatalf("list %+v", list)
	}
	n, err := Node(list[3])
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[layout.FakeNodeKey] != layout.FakeNodeValue || n.Annotations[layout.FakeNodeKey] != layout.FakeNodeValue || n.Labels[corev1.LabelTopologyZone] != "z2" || n.Labels["pool"] != "b" || n.Labels[corev1.LabelHostname] != "dev-fake-4" {
		t.Errorf("labels %v, annotations %v", n.Labels, n.Annotations)
	}
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[0].Key != layout.FakeNodeKey || n.Spec.Taints[1].Key != "gpu" {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Cmp(resource.MustParse("4")) != 0 {
		t.Errorf("cpu %s", q.String())
	}
	if q := n.Status.Allocatable[corev1.ResourceMemory]; q.Cmp(resource.MustParse(layout.FakeNodeMemory)) != 0 {
		t.Errorf("memory %s, want the default %s", q.String(), layout.FakeNodeMemory)
	}
	d, _ := Node(list[0])
	if _, zoned := d.Labels[corev1.LabelTopologyZone]; zoned || len(d.Spec.Taints) != 1 {
		t.Errorf("a default node: labels %v taints %v", d.Labels, d.Spec.Taints)
	}
}

func TestWithTotal(t *testing.T) {
	f := layout.FakeNodes{Groups: []layout.FakeNodeGroup{{Count: 2}, {Count: 3, CPU: "4"}}}
	for _, tc := range []struct {
		n    int
		want []int
	}{{10, []int{2, 8}}, {5, []int{2, 3}}, {3, []int{2, 1}}, {2, []int{2}}, {1, []int{1}}, {0, []int{0}}} {
		got := f.WithTotal(tc.n)
		var counts []int
		for _, g := range got.Groups {
			counts = append(counts, g.Count)
		}
		if !slices.Equal(counts, tc.want) || got.Total() != tc.n {
			t.Errorf("WithTotal(%d): %v (total %d), want %v", tc.n, counts, got.Total(), tc.want)
		}
	}
	if f.Total() != 5 {
		t.Errorf("WithTotal changed f: %+v", f)
	}
	if c := (layout.FakeNodes{Count: 4}).WithTotal(7); c.Count != 7 || c.Total() != 7 {
		t.Errorf("count: %+v", c)
	}
}

func TestPodSubnetNodes(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		want int
	}{{"10.244.0.0/16", 256}, {"10.244.0.0/14", 1024}, {"10.244.0.0/24", 1}, {"10.244.0.0/25", 0}, {"x", 0}} {
		if got := PodSubnetNodes(tc.cidr, 24); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.cidr, got, tc.want)
		}
	}
	if m := WiderMask(1001, 24); m != 14 {
		t.Errorf("1001 nodes: /%d, want /14", m)
	}
}

func TestKeepsOffFakeNodes(t *testing.T) {
	// The affinity applied, read back as the API returns it.
	ac := NotOnFakeNodes()
	req := ac.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	a := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}
	for _, term := range req.NodeSelectorTerms {
		var t corev1.NodeSelectorTerm
		for _, r := range term.MatchExpressions {
			t.MatchExpressions = append(t.MatchExpressions, corev1.NodeSelectorRequirement{Key: *r.Key, Operator: *r.Operator})
		}
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, t)
	}
	if !KeepsOffFakeNodes(a) {
		t.Errorf("NotOnFakeNodes does not keep off fake nodes: %+v", a)
	}
	if KeepsOffFakeNodes(nil) || KeepsOffFakeNodes(&corev1.Affinity{}) {
		t.Error("no affinity keeps off fake nodes")
	}
	// A second term without the requirement lets pods onto fake nodes.
	a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, corev1.NodeSelectorTerm{})
	if KeepsOffFakeNodes(a) {
		t.Error("an OR'ed term without the requirement keeps off fake nodes")
	}
}

func TestMemoryProblem(t *testing.T) {
	if MemoryProblem(100, 1<<40) != nil || MemoryProblem(100, 0) != nil || MemoryProblem(0, 1) != nil {
		t.Error("a problem where there is none")
	}
	err := MemoryProblem(1000, 100<<20)
	if err == nil || !strings.Contains(err.Error(), "1000 more fake nodes need about") {
		t.Errorf("1000 nodes in 100 MiB: %v", err)
	}
}
