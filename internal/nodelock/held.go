package nodelock

import (
	"errors"

	"github.com/devk/devk/internal/execx"
)

// HeldEnv is the variable devk sets for a command it runs inside a node
// while it holds that node's lock (kubeadm, which calls `systemctl
// restart kubelet`): its value is the node's key (Key). devk's systemctl
// takes the node's lock before it starts or stops the kubelet, so that
// it never races a swap; called under a devk that holds it, it would
// find it busy. With HeldEnv naming this node, a busy lock is its
// caller's, and it goes on without it.
const HeldEnv = "DEVK_HELD_NODE_LOCK"

// HeldEnvVar is HeldEnv=key of the node whose manifests dir is
// manifestsDir, for the environment of a command run under its lock.
func HeldEnvVar(manifestsDir string) (string, error) {
	k, err := Key(manifestsDir)
	if err != nil {
		return "", err
	}
	return HeldEnv + "=" + k, nil
}

// HeldByCaller says whether environ's HeldEnv (the last, as getenv)
// names the node whose manifests dir is manifestsDir: a devk job that
// holds the node's lock ran the command.
func HeldByCaller(environ []string, manifestsDir string) bool {
	v := execx.Getenv(environ, HeldEnv)
	if v == "" {
		return false
	}
	k, err := Key(manifestsDir)
	return err == nil && k == v
}

// AcquireUnlessHeld is Acquire for a command a devk holding the node's
// lock may have run: when environ's HeldEnv names this node and the lock
// is busy, the caller holds it, and it returns a nil *Lock (Release is a
// no-op) and no error. A lock HeldEnv names but no one holds is taken as
// Acquire takes it; one HeldEnv does not name is refused when busy.
func AcquireUnlessHeld(environ []string, manifestsDir, command string) (*Lock, error) {
	return AcquireUnlessHeldIn(Dir(), environ, manifestsDir, command)
}

// AcquireUnlessHeldIn is AcquireUnlessHeld with the lock directory given.
func AcquireUnlessHeldIn(dir string, environ []string, manifestsDir, command string) (*Lock, error) {
	l, err := AcquireIn(dir, manifestsDir, command)
	if errors.Is(err, ErrBusy) && HeldByCaller(environ, manifestsDir) {
		return nil, nil
	}
	return l, err
}
