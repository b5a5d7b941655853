package debug

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/delve"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap"
)

// kubeletDebugger puts the dlv the build made beside the node's kubelet
// and records that the kubelet runs under it (delve.Debugged), which the
// node's kubelet command line reads when the swap restarts it.
func (j *job) kubeletDebugger(ctx context.Context) (phase.Outcome, error) {
	if j.Node.Dir == "" || len(j.Swap.Kubelets) != 1 {
		return phase.Done, fmt.Errorf("devk debug kubelet runs the kubelet of a node of a devk cluster under dlv: none was found (--name, --node)")
	}
	st, err := build.LoadState(j.tree.Root)
	if err != nil {
		return phase.Done, err
	}
	dlv := st.Component(build.Delve).Binary
	if dlv == nil {
		return phase.Done, fmt.Errorf("no dlv was built: run `devk build %s`", build.Delve)
	}
	dest := filepath.Join(filepath.Dir(j.Node.KubeletBinary()), filepath.Base(dlv.Path))
	if _, err := swap.InstallBinary(ctx, dlv.Path, dest, nil); err != nil {
		return phase.Done, err
	}
	want := j.debugged(dest)
	old, err := delve.ReadDebugged(j.Node.KubeletDebugger())
	if err == nil && old != nil && *old == want {
		return phase.Unchanged("the kubelet runs under %s at %s already", dest, want.Listen), nil
	}
	if err := want.Write(j.Node.KubeletDebugger()); err != nil {
		return phase.Done, err
	}
	j.recorded = true
	j.Swap.Debug.Restart = true // its command line changed
	return phase.Changed("%s records the kubelet's start under %s at %s", j.Node.KubeletDebugger(), dest, want.Listen), nil
}

// undoKubeletDebugger, after a failed run that recorded the kubelet's
// start under dlv, removes the record and restarts the kubelet on its
// own (the swap's rollback restarted the old binary under dlv).
func (j *job) undoKubeletDebugger(ctx context.Context, cause error) error {
	if err := os.Remove(j.Node.KubeletDebugger()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errors.Join(cause, err)
	}
	if err := j.Swap.Kubelets[0].Restart(context.WithoutCancel(ctx)); err != nil {
		return errors.Join(cause, fmt.Errorf("restart the kubelet without the debugger: %w", err))
	}
	return fmt.Errorf("%w (the kubelet runs on its own again)", cause)
}

// stopKubelet removes the record that runs node's kubelet under dlv;
// the swap of its normal build then restarts it on its own.
func stopKubelet(node layout.NodeFiles) error {
	if node.Dir == "" {
		return fmt.Errorf("devk debug kubelet runs the kubelet of a node of a devk cluster under dlv: none was found (--name, --node)")
	}
	d, err := delve.ReadDebugged(node.KubeletDebugger())
	if err != nil {
		return err
	}
	if d == nil {
		return fmt.Errorf("the kubelet is not being debugged (no %s): nothing to stop", node.KubeletDebugger())
	}
	return os.Remove(node.KubeletDebugger())
}
