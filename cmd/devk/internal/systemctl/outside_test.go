package systemctl

import (
	"os"
	"testing"
)

// TestOutside: this test runs in its parent's mount namespace, so there
// is no ancestor to leave to and devk's systemctl acts itself; one that
// left the node once (leftNodeEnv) never tries again; parentOf reads
// /proc as getppid does. Leaving a real node is cmd/devk's
// TestNodeSystemctl.
func TestOutside(t *testing.T) {
	if pid, ok := outsideAncestor(); ok {
		t.Errorf("outsideAncestor = %d in the test's own mount namespace; want none", pid)
	}
	if err := leaveNode("/nonexistent/systemctl", []string{"restart", "kubelet"}, nil); err != nil {
		t.Errorf("leaveNode with no ancestor outside = %v; want nil (act here)", err)
	}
	if err := leaveNode("/nonexistent/systemctl", []string{"restart", "kubelet"}, []string{leftNodeEnv + "=1"}); err != nil {
		t.Errorf("leaveNode after leaving once = %v; want nil", err)
	}
	if ppid, err := parentOf(os.Getpid()); err != nil || ppid != os.Getppid() {
		t.Errorf("parentOf(self) = %d, %v; want %d", ppid, err, os.Getppid())
	}
}
