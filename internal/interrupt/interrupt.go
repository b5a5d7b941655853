// Package interrupt gives devk two levels of Ctrl-C. The first interrupt
// (SIGINT or SIGTERM) cancels the command's context: work stops and the
// command puts back what it had changed (a swap restores the old
// manifest). The second cancels the cleanup context too: the command stops
// waiting for that cleanup to finish and exits, leaving its journal for
// the next run to complete.
package interrupt

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
)

// ErrInterrupted is the cause of a context an interrupt canceled.
var ErrInterrupted = errors.New("interrupted")

type cleanupKey struct{}

// Handle returns a context that the first SIGINT or SIGTERM cancels; its
// Cleanup context is canceled by the second. stop releases the signals.
func Handle(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	cleanup, cancelCleanup := context.WithCancelCause(context.WithoutCancel(parent))
	ctx = context.WithValue(ctx, cleanupKey{}, cleanup)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-sigs:
				n++
				if n == 1 {
					cancel(ErrInterrupted)
				} else {
					cancelCleanup(ErrInterrupted)
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
		cancelCleanup(nil)
	}
}

// Cleanup is the context for undoing what a canceled ctx left half done:
// not canceled by the first interrupt, but by the second. Without Handle
// it is never canceled.
func Cleanup(ctx context.Context) context.Context {
	if c, ok := ctx.Value(cleanupKey{}).(context.Context); ok {
		return c
	}
	return context.WithoutCancel(ctx)
}

// Interrupted reports whether ctx was canceled by an interrupt.
func Interrupted(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrInterrupted)
}
