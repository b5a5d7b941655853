package main

import (
	"math"
	"testing"
)

// A histogram's le label after another label whose name ends in "le"
// (profile), as the scheduler's attempt histogram has it.
const exposition = `# TYPE scheduler_scheduling_attempt_duration_seconds histogram
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.1"} 10
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="1"} 90
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="+Inf"} 100
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="error",le="0.1"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="error",le="1"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="error",le="+Inf"} 0
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 100
`

func TestHistogram(t *testing.T) {
	h := histogram(exposition, "scheduler_scheduling_attempt_duration_seconds")
	if len(h) != 3 || h[math.Inf(1)] != 100 {
		t.Fatalf("buckets %v", h)
	}
	// The median is the 50th of 100: in (0.1, 1], 40 of its 80.
	if q := h.quantile(0.5); math.Abs(q-0.55) > 1e-9 {
		t.Errorf("p50 %v, want 0.55", q)
	}
	if q := h.minus(h).quantile(0.5); !math.IsNaN(q) {
		t.Errorf("an empty histogram's p50 is %v", q)
	}
	if c := counter(exposition, `scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"}`); c != 100 {
		t.Errorf("counter %v", c)
	}
}
