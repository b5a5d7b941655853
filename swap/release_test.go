package swap

import (
	"testing"
	"time"
)

func TestReleaseClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type poll struct {
		ms           int
		sandboxReady bool
		dirExists    bool
		want         bool
	}
	tests := []struct {
		name     string
		checkDir bool
		polls    []poll
	}{
		{"sandbox still ready", true, []poll{
			{0, true, false, false}, {2000, true, false, false},
		}},
		{"waits a relist after the sandbox stopped, though the dir went first", true, []poll{
			{0, false, false, false}, {1000, false, false, false}, {1249, false, false, false}, {1250, false, false, true},
		}},
		{"waits for the dir, then a moment more", true, []poll{
			{0, false, true, false}, {2000, false, true, false}, {2100, false, false, false}, {2399, false, false, false}, {2400, false, false, true},
		}},
		{"a pod the kubelet was still starting starts the clock over", true, []poll{
			{0, false, false, false}, {1000, true, true, false}, {1500, false, true, false}, {2000, false, false, false}, {2749, false, false, false}, {2750, false, false, true},
		}},
		{"no kubelet root: the sandbox alone", false, []poll{
			{0, true, true, false}, {100, false, true, false}, {1349, false, true, false}, {1350, false, true, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := releaseClock{checkDir: tt.checkDir}
			for _, p := range tt.polls {
				if got := rc.released(at(p.ms), p.sandboxReady, p.dirExists); got != p.want {
					t.Fatalf("at %d ms (sandbox ready %v, dir %v): released = %v, want %v", p.ms, p.sandboxReady, p.dirExists, got, p.want)
				}
			}
		})
	}
}
