package controlplane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// TestWaitTimesOut: a check that never passes ends the wait with its
// last error and the end of its log; one that passed is not named.
func TestWaitTimesOut(t *testing.T) {
	log := filepath.Join(t.TempDir(), "etcd.log")
	if err := os.WriteFile(log, []byte("starting\nbad flag --x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	looks := 0
	w := Wait{Node: "devk", Logs: "/logs", Interval: time.Millisecond, Timeout: 30 * time.Millisecond,
		ManifestPath: func(pod string) string { return "/manifests/" + pod + ".yaml" },
		After:        func(int, string) error { looks++; return nil }}
	_, err := w.For(t.Context(), nil, []Readiness{
		{Name: "etcd", Log: func() string { return log }, Check: func(context.Context, kubernetes.Interface) error { return errors.New("connection refused") }},
		{Name: "kube-apiserver", Log: func() string { return "/nowhere" }, Check: func(context.Context, kubernetes.Interface) error { return nil }},
	})
	if err == nil {
		t.Fatal("a check that never passes did not fail the wait")
	}
	for _, want := range []string{"the control plane of node devk was not ready after 30ms", "read the logs under /logs", "etcd: connection refused", "    bad flag --x"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "kube-apiserver") {
		t.Errorf("error %q names a check that passed", err)
	}
	if looks == 0 {
		t.Error("After was never told of a look")
	}
}
