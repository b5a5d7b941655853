// Package nodetree is a worker that runs another tree's kubelet (a
// config file's nodes[].tree): that tree's version checked against the
// version skew policy beside the cluster's control plane, then its
// kubelet built (incrementally) for the node's kubelet-start to install.
package nodetree

import (
	"context"
	"fmt"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/skew"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
)

// Check says whether node may run the kubelet of tree beside a control
// plane of version controlPlane: a kubelet newer than the API server,
// or more than skew.NodeBehind minor versions older, is refused. An
// unknown control-plane version ("") passes: the node's kubelet-start
// checks again once the cluster's is recorded.
func Check(ctx context.Context, tree, node, controlPlane string) error {
	if controlPlane == "" {
		return nil
	}
	t, err := source.Open(tree)
	if err != nil {
		return fmt.Errorf("node %s's tree: %w", node, err)
	}
	v, err := t.Version(ctx)
	if err != nil {
		return fmt.Errorf("node %s's tree %s: %w", node, tree, err)
	}
	running := []skew.Running{{Component: skew.APIServer, Version: controlPlane}, {Component: skew.Kubelet, Node: node, Version: v.GitVersion}}
	if err := skew.Check("node "+node+" with the kubelet of "+tree, running); err != nil {
		return fmt.Errorf("%w: give the node a tree within the policy in the config file's nodes[].tree, or leave tree out", err)
	}
	return nil
}

// Kubelet is the kubelet node runs from tree beside a control plane of
// version controlPlane: Check first, then the kubelet built. It returns
// the binary.
func Kubelet(ctx context.Context, tree, node, controlPlane string, r progress.Reporter) (string, error) {
	if err := Check(ctx, tree, node, controlPlane); err != nil {
		return "", err
	}
	bj, err := build.Run(ctx, build.Options{TreeDir: tree, Components: []string{"kubelet"}, Reporter: r}, phase.Options{})
	if err != nil {
		return "", fmt.Errorf("build node %s's kubelet in %s: %w", node, tree, err)
	}
	for _, b := range bj.Binaries {
		if b.Name == "kubelet" {
			return b.Path, nil
		}
	}
	return "", fmt.Errorf("build node %s's kubelet in %s: no kubelet among what was built", node, tree)
}
