package controlplane

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestContainerLog: the newest log of the container among the pod's
// generations, none before it has started, and none of another node's.
func TestContainerLog(t *testing.T) {
	podLogs := t.TempDir()
	if got := ContainerLog(podLogs, "devk-control-plane", "etcd"); got != "" {
		t.Errorf("no container yet: %q", got)
	}
	write := func(pod, file string, age time.Duration) string {
		p := filepath.Join(podLogs, pod, "etcd", file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("log\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("kube-system_etcd-devk-control-plane_uid1", "0.log", time.Hour)
	newest := write("kube-system_etcd-devk-control-plane_uid2", "1.log", time.Minute)
	write("kube-system_etcd-devk-control-plane2_uid3", "0.log", 0)
	if got := ContainerLog(podLogs, "devk-control-plane", "etcd"); got != newest {
		t.Errorf("ContainerLog = %q, want %q", got, newest)
	}
}
