package swap

import (
	"context"

	"github.com/devk/devk/swap/holdport"
)

// holdAPIServerPort holds, over the hand-over, the address of the API
// server of manifest current (holdport): when it and the one replacing
// it (next) bind with SO_REUSEPORT, in the node's network namespace,
// which migrates queued connections; nil (the reason logged) when it
// cannot. The hold lets go once the new API server listens too (Watch)
// or when Release is called.
func (n *Target) holdAPIServerPort(ctx context.Context, current, next []byte) *holdport.Hold {
	addr, why := holdport.Holdable(n.NetNS, apiServerPod, current, next)
	if why != "" {
		n.Reporter.Debugf("kube-apiserver's address not held over the hand-over: %s", why)
		return nil
	}
	h, err := holdport.Start(ctx, n.NetNS, addr)
	if err != nil {
		n.Reporter.Debugf("kube-apiserver's address not held over the hand-over: %v", err)
		return nil
	}
	n.Reporter.Debugf("holding %s over the hand-over", addr)
	return h
}
