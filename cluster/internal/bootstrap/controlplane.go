package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/devk/devk/internal/kube"
)

const (
	// LabelControlPlane is a control-plane node's role label, and the key
	// of its NoSchedule taint.
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	labelExcludeLB    = "node.kubernetes.io/exclude-from-external-load-balancers"
)

// controlPlanePatch is the strategic merge patch that labels node n
// control-plane and gives it the control-plane NoSchedule taint when
// taint is set, or takes that taint away when not (a single node that
// ran no workload would be no cluster to develop on; kind does the same);
// nil if n is so already. Taints are replaced as a whole list, so the
// patch carries n's resourceVersion: it fails with a conflict, rather
// than drop another taint, if the node changed since it was read.
func controlPlanePatch(n *corev1.Node, taint bool) ([]byte, error) {
	labels := map[string]string{}
	for _, l := range []string{LabelControlPlane, labelExcludeLB} {
		if _, ok := n.Labels[l]; !ok {
			labels[l] = ""
		}
	}
	cp := corev1.Taint{Key: LabelControlPlane, Effect: corev1.TaintEffectNoSchedule}
	isCP := func(t corev1.Taint) bool { return t.Key == cp.Key && t.Effect == cp.Effect }
	tainted := slices.ContainsFunc(n.Spec.Taints, isCP)
	if len(labels) == 0 && tainted == taint {
		return nil, nil
	}
	meta := map[string]any{"resourceVersion": n.ResourceVersion}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	patch := map[string]any{"metadata": meta}
	switch {
	case taint && !tainted:
		patch["spec"] = map[string]any{"taints": append(slices.Clone(n.Spec.Taints), cp)}
	case !taint && tainted:
		patch["spec"] = map[string]any{"taints": slices.DeleteFunc(slices.Clone(n.Spec.Taints), isCP)}
	}
	return json.Marshal(patch)
}

// MarkControlPlane labels Node name control-plane and gives it the
// control-plane taint when taint is set, or takes the taint away when
// not (mark-control-plane), retrying on a conflict; it reports whether it
// patched the node. kubeletLog is where to look when the Node is not
// there.
func MarkControlPlane(ctx context.Context, cs kubernetes.Interface, name string, taint bool, kubeletLog string) (bool, error) {
	nodes := cs.CoreV1().Nodes()
	patched := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w (is the kubelet running? see %s)", name, err, kubeletLog)
		}
		patch, err := controlPlanePatch(n, taint)
		if err != nil || patch == nil {
			return err
		}
		if _, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: kube.FieldManager}); err != nil {
			return err
		}
		patched = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("label node %s: %w", name, err)
	}
	return patched, nil
}
