// Package poll holds what devk's waits share on top of apimachinery's
// wait package, which every wait uses.
package poll

import (
	"context"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TimedOut reports whether err, from a wait.PollUntilContextTimeout run
// under ctx, is that poll's own timeout: not ctx's end (an interrupt,
// which the caller passes on as it is) nor the condition's error.
func TimedOut(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && wait.Interrupted(err)
}
