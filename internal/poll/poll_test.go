package poll

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestTimedOut(t *testing.T) {
	never := func(context.Context) (bool, error) { return false, nil }
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Millisecond, true, never)
	if !TimedOut(ctx, err) {
		t.Fatalf("the poll's own timeout (%v) is not TimedOut", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = wait.PollUntilContextTimeout(cctx, time.Millisecond, time.Second, true, never)
	if TimedOut(cctx, err) {
		t.Fatalf("an interrupt (%v) is TimedOut", err)
	}
	boom := errors.New("boom")
	err = wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Second, true, func(context.Context) (bool, error) { return false, boom })
	if TimedOut(ctx, err) || !errors.Is(err, boom) {
		t.Fatalf("the condition's error (%v) is TimedOut", err)
	}
}
