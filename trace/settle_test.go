package trace

import (
	"testing"
	"time"
)

func TestSettled(t *testing.T) {
	exit := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return exit.Add(d) }
	const settle, max = 2 * time.Second, 30 * time.Second
	tests := []struct {
		name      string
		last, now time.Time
		want      settleState
	}{
		{"nothing happened, just exited", time.Time{}, at(0), waiting},
		{"nothing happened for the settle time", time.Time{}, at(settle), quiet},
		{"activity before the exit counts from the exit", at(-5 * time.Second), at(time.Second), waiting},
		{"activity before the exit, quiet since", at(-5 * time.Second), at(settle), quiet},
		{"activity after the exit restarts the wait", at(time.Second), at(2500 * time.Millisecond), waiting},
		{"quiet since the last activity", at(time.Second), at(3 * time.Second), quiet},
		{"busy until --for", at(29900 * time.Millisecond), at(max), timedOut},
		{"quiet wins at --for", at(27 * time.Second), at(max), quiet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := settled(exit, tt.last, tt.now, settle, max); got != tt.want {
				t.Errorf("settled = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseFilter(t *testing.T) {
	f, err := ParseFilter([]string{"resource=services", "resource=endpointslices.discovery.k8s.io", "namespace=default", "user-agent=kubectl"})
	if err != nil {
		t.Fatal(err)
	}
	req := func(group, resource, ns, ua string) Request {
		return Request{group: group, resource: resource, Namespace: ns, UserAgent: ua}
	}
	tests := []struct {
		name string
		r    Request
		want bool
	}{
		{"all match", req("", "services", "default", "kubectl/v1.34.4"), true},
		{"a resource by group", req("discovery.k8s.io", "endpointslices", "default", "kubectl/v1.34.4"), true},
		{"another resource", req("", "pods", "default", "kubectl/v1.34.4"), false},
		{"another namespace", req("", "services", "kube-system", "kubectl/v1.34.4"), false},
		{"another client", req("", "services", "default", "kube-controller-manager/v1.34.4"), false},
	}
	for _, tt := range tests {
		if got := f.Request(tt.r); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, bad := range []string{"resource", "resource=", "verb=get"} {
		if _, err := ParseFilter([]string{bad}); err == nil {
			t.Errorf("--filter %s accepted", bad)
		}
	}
}
