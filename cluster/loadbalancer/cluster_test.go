package loadbalancer

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestPutBackTakenOut: API servers a killed rolling swap (drain) or node
// removal (maint) left out of the real HAProxy are put back by the
// load-balancer phase's check, each named with the status it had; a
// second look finds nothing to do. The API servers are backends (TLS servers
// on 127.0.0.1 answering /readyz), standing in for kube-apiserver.
func TestPutBackTakenOut(t *testing.T) {
	lb := newLB(t, newBackend(t, "cp"), newBackend(t, "cp2"), newBackend(t, "cp3"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := lb.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	api := lb.API()
	status := func() map[string]string {
		t.Helper()
		stats, err := api.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, s := range stats {
			if s.Proxy == BackendName && s.Server != "BACKEND" {
				out[s.Server] = strings.Fields(s.Status)[0]
			}
		}
		return out
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		s := status()
		return s["cp"] == "UP" && s["cp2"] == "UP" && s["cp3"] == "UP", nil
	}); err != nil {
		t.Fatalf("servers never UP: %v", status())
	}
	if err := api.SetState(ctx, BackendName, "cp2", Drain); err != nil {
		t.Fatal(err)
	}
	if err := api.SetState(ctx, BackendName, "cp3", Maint); err != nil {
		t.Fatal(err)
	}
	back, err := api.PutBackTakenOut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(back, ", "); got != "cp2 (was DRAIN), cp3 (was MAINT)" {
		t.Errorf("put back %q, want cp2 (was DRAIN), cp3 (was MAINT)", got)
	}
	for node, st := range status() {
		if TakenOut(st) {
			t.Errorf("%s still %s", node, st)
		}
	}
	if back, err := api.PutBackTakenOut(ctx); err != nil || len(back) != 0 {
		t.Errorf("a second look put back %v (%v), want nothing", back, err)
	}
}
