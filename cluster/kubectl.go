package cluster

import (
	"context"
	"fmt"

	"github.com/devk/devk/build"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// kubectlComponent is the tree's kubectl, which up builds for you.
const kubectlComponent = "kubectl"

// kubectlBuild is kubectl's build, which the images phase starts once it
// has compiled what the cluster runs: kubectl compiles while the
// cluster starts, and the kubectl phase installs what it made.
type kubectlBuild struct {
	done   chan struct{}
	path   string
	err    error
	cancel context.CancelFunc
}

// startKubectl starts kubectl's build (buildKubectl) beside the phases
// that follow; stopKubectl ends it when up does.
func (c *Cluster) startKubectl(ctx context.Context) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := &kubectlBuild{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(b.done)
		b.path, b.err = c.buildKubectl(ctx, progress.Discard())
	}()
	c.kubectl = b
}

// stopKubectl cancels a kubectl build up did not wait for (a phase
// failed before the kubectl phase) and waits for it to end.
func (c *Cluster) stopKubectl() {
	if c.kubectl != nil {
		c.kubectl.cancel()
		<-c.kubectl.done
	}
}

// buildKubectl builds (incrementally) the tree's kubectl.
func (c *Cluster) buildKubectl(ctx context.Context, r progress.Reporter) (string, error) {
	bj, err := build.Run(ctx, build.Options{TreeDir: c.TreeDir, Components: []string{kubectlComponent}, Reporter: r}, phase.Options{})
	if err != nil {
		return "", fmt.Errorf("build kubectl: %w", err)
	}
	for _, b := range bj.Binaries {
		if b.Name == kubectlComponent {
			return b.Path, nil
		}
	}
	return "", fmt.Errorf("build kubectl: no kubectl among what was built")
}

// runKubectl installs the tree's kubectl in devk's bin dir: the one the
// images phase began to build, waited for; built now when this run did
// not start it (`devk up phase kubectl`, a resumed up).
func (c *Cluster) runKubectl(ctx context.Context) (phase.Outcome, error) {
	var path string
	var err error
	if b := c.kubectl; b != nil {
		c.Reporter.Progress(progress.StepOf(ctx), progress.Status{Note: "waiting for kubectl's build, begun after the images phase's compile"})
		select {
		case <-b.done:
			path, err = b.path, b.err
		case <-ctx.Done():
			return phase.Done, ctx.Err()
		}
	} else {
		path, err = c.buildKubectl(ctx, progress.Under(c.Reporter, "kubectl"))
	}
	if err != nil {
		return phase.Done, err
	}
	changed, err := node.InstallBinary(path, c.KubectlPath())
	if err != nil {
		return phase.Done, fmt.Errorf("install kubectl for you: %w", err)
	}
	return phase.ChangedIf(changed, "%s", c.KubectlPath()), nil
}
