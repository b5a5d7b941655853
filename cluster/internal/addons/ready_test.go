package addons

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devk/devk/internal/cri"
)

// TestStatusesCurrent: after the node's runtime was emptied (down
// --keep-data, a reboot) the API still says the old pods are ready; a
// pod counts only once the containers it reports run.
func TestStatusesCurrent(t *testing.T) {
	readyPod := func(name, containerID string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "coredns", Ready: true, ContainerID: "containerd://" + containerID}}}}
	}
	notReady := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "starting"}}
	running := []cri.Container{{ID: "aaa"}, {ID: "bbb"}}
	leaving := notReady
	leaving.DeletionTimestamp = &metav1.Time{}
	if err := statusesCurrent([]corev1.Pod{readyPod("a", "aaa"), readyPod("b", "bbb"), leaving}, running); err != nil {
		t.Errorf("pods whose containers run: %v", err)
	}
	if err := statusesCurrent([]corev1.Pod{readyPod("a", "aaa"), notReady}, running); err == nil || !strings.Contains(err.Error(), "pod starting") {
		t.Errorf("a pod not ready while its workload's status says all are: %v", err)
	}
	if err := statusesCurrent([]corev1.Pod{readyPod("a", "aaa"), readyPod("old", "gone")}, running); err == nil || !strings.Contains(err.Error(), "pod old") {
		t.Errorf("a pod reporting a container that does not run: %v", err)
	}
}
