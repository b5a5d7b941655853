package poll

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEach(t *testing.T) {
	t.Run("every item passes once", func(t *testing.T) {
		looks := 0
		var ready []int
		took, pending, err := Each(t.Context(), time.Millisecond, time.Second, []string{"a", "b"}, func(_ context.Context, it string) (string, error) {
			looks++
			if it == "b" && looks < 4 {
				return it, errors.New("not yet")
			}
			return it, nil
		}, func(n int, waiting string) error {
			ready = append(ready, n)
			if waiting != "waiting for b: not yet" {
				t.Errorf("waiting %q, want the first pending item's error", waiting)
			}
			return nil
		})
		if err != nil || len(pending) != 0 || len(took) != 2 || !strings.HasPrefix(took[0], "a ") || !strings.HasPrefix(took[1], "b ") {
			t.Fatalf("took %v, pending %v, err %v", took, pending, err)
		}
		if !slices.Equal(ready, []int{1, 1}) {
			t.Errorf("after told %v ready, want 1 after each of the two looks b failed", ready)
		}
	})
	t.Run("after's error ends the wait", func(t *testing.T) {
		gone := errors.New("the kubelet is not running")
		_, pending, err := Each(t.Context(), time.Millisecond, time.Second, []string{"a"}, func(_ context.Context, it string) (string, error) {
			return it, errors.New("never")
		}, func(int, string) error { return gone })
		if !errors.Is(err, gone) || !slices.Equal(pending, []string{"a"}) {
			t.Fatalf("pending %v, err %v; want a pending and after's error", pending, err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		ctx := t.Context()
		_, pending, err := Each(ctx, time.Millisecond, 20*time.Millisecond, []string{"a"}, func(_ context.Context, it string) (string, error) {
			return it, errors.New("never")
		}, func(int, string) error { return nil })
		if !TimedOut(ctx, err) || len(pending) != 1 {
			t.Fatalf("pending %v, err %v; want the poll's own timeout", pending, err)
		}
	})
}
