package cluster

import "testing"

func TestWaitStatus(t *testing.T) {
	tests := []struct {
		name         string
		ready, total int
		waiting      string
		want         string
	}{
		{"one line", 3, 5, "waiting for node: node devk not Ready: container runtime network not ready",
			"ready 3 of 5; waiting for node: node devk not Ready: container runtime network not ready"},
		{"first line of a long error", 0, 2, "waiting for coredns: 0 of 1 ready\nlast events:\n  x", "ready 0 of 2; waiting for coredns: 0 of 1 ready"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitStatus(tc.ready, tc.total, tc.waiting).String(); got != tc.want {
				t.Errorf("waitStatus = %q, want %q", got, tc.want)
			}
		})
	}
}
