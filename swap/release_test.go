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
		cgroupExists bool
	}
	tests := []struct {
		name     string
		checkDir bool
		polls    []poll
		cgroup   bool
	}{
		{"sandbox still ready", true, []poll{
			{0, true, false, false, false}, {2000, true, false, false, false},
		}, false},
		{"waits a relist after the sandbox stopped, though the dir went first", true, []poll{
			{0, false, false, false, false}, {1000, false, false, false, false}, {1249, false, false, false, false}, {1250, false, false, true, false},
		}, false},
		{"waits for the dir, then a moment more", true, []poll{
			{0, false, true, false, false}, {2000, false, true, false, false}, {2100, false, false, false, false}, {2399, false, false, false, false}, {2400, false, false, true, false},
		}, false},
		{"a pod the kubelet was still starting starts the clock over", true, []poll{
			{0, false, false, false, false}, {1000, true, true, false, false}, {1500, false, true, false, false}, {2000, false, false, false, false}, {2749, false, false, false, false}, {2750, false, false, true, false},
		}, false},
		{"no kubelet root: the sandbox alone", false, []poll{
			{0, true, true, false, false}, {100, false, true, false, false}, {1349, false, true, false, false}, {1350, false, true, true, false},
		}, false},
		{"the pod cgroup known: its removal is the release, before a relist and the directory", true, []poll{
			{0, true, true, false, true}, {100, false, true, false, true}, {400, false, true, false, false}, {449, false, true, false, false}, {450, false, true, true, false},
		}, true},
		{"the pod cgroup known: the sandbox must have stopped too", true, []poll{
			{0, true, true, false, false}, {500, true, true, false, false}, {600, false, true, false, false}, {649, false, true, false, false}, {650, false, true, true, false},
		}, true},
		{"the pod cgroup back (the kubelet restarted the container) starts over", true, []poll{
			{0, false, true, false, false}, {30, false, true, false, true}, {100, false, true, false, false}, {149, false, true, false, false}, {150, false, true, true, false},
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := releaseClock{checkDir: tt.checkDir, checkCgroup: tt.cgroup}
			for _, p := range tt.polls {
				if got := rc.released(at(p.ms), p.sandboxReady, p.dirExists, p.cgroupExists); got != p.want {
					t.Fatalf("at %d ms (sandbox ready %v, dir %v, cgroup %v): released = %v, want %v", p.ms, p.sandboxReady, p.dirExists, p.cgroupExists, got, p.want)
				}
			}
		})
	}
}
