package interrupt

import (
	"context"
	"syscall"
	"testing"
	"time"
)

func TestTwoLevels(t *testing.T) {
	ctx, stop := Handle(context.Background())
	defer stop()
	cleanup := Cleanup(ctx)
	syscall.Kill(syscall.Getpid(), syscall.SIGINT)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first interrupt did not cancel the context")
	}
	if !Interrupted(ctx) {
		t.Errorf("cause %v, want ErrInterrupted", context.Cause(ctx))
	}
	if cleanup.Err() != nil {
		t.Fatal("the first interrupt canceled the cleanup context")
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	select {
	case <-cleanup.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the second interrupt did not cancel the cleanup context")
	}
	if !Interrupted(cleanup) {
		t.Errorf("cleanup cause %v", context.Cause(cleanup))
	}
}

func TestCleanupWithoutHandleIsNeverCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Cleanup(ctx).Err() != nil {
		t.Fatal("cleanup context canceled with its parent")
	}
	if Interrupted(ctx) {
		t.Fatal("a plain cancel counted as an interrupt")
	}
}
