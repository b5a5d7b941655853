// Package nodetree is a worker that runs another tree's kubelet (a
// config file's nodes[].tree): that tree's version checked against the
// version skew policy beside the cluster's control plane, then its
// kubelet built (incrementally) for the node's kubelet-start to install,
// and its kube-proxy's image pushed for a DaemonSet of the node's own.
package nodetree

import (
	"context"
	"fmt"
	"strings"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
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

// Options say which node runs what of which tree beside which control
// plane.
type Options struct {
	// Tree is the node's tree, Node its name, ControlPlane the cluster's
	// version.
	Tree, Node, ControlPlane string
	// KubeProxy builds the tree's kube-proxy too and pushes its image
	// with Image (the cluster's registry).
	KubeProxy bool
	Image     image.Options
	Reporter  progress.Reporter
}

// Built is what the node runs of its tree: the kubelet binary, and the
// image of its kube-proxy ("" unless Options.KubeProxy).
type Built struct {
	Kubelet, KubeProxyImage string
}

// Build is what node o.Node runs of o.Tree: Check first, then the
// kubelet built (incrementally), and kube-proxy's image built and
// pushed when asked for.
func Build(ctx context.Context, o Options) (Built, error) {
	if err := Check(ctx, o.Tree, o.Node, o.ControlPlane); err != nil {
		return Built{}, err
	}
	comps := []string{skew.Kubelet}
	if o.KubeProxy {
		comps = append(comps, skew.KubeProxy)
	}
	what := "node " + o.Node + "'s " + strings.Join(comps, " and ") + " in " + o.Tree
	bj, err := build.Run(ctx, build.Options{TreeDir: o.Tree, Components: comps, Reporter: o.Reporter}, phase.Options{})
	if err != nil {
		return Built{}, fmt.Errorf("build %s: %w", what, err)
	}
	var out Built
	for _, b := range bj.Binaries {
		if b.Name == skew.Kubelet {
			out.Kubelet = b.Path
		}
	}
	if out.Kubelet == "" {
		return Built{}, fmt.Errorf("build %s: no kubelet among what was built", what)
	}
	if !o.KubeProxy {
		return out, nil
	}
	ij, err := image.PushBuilt(ctx, bj, []string{skew.KubeProxy}, o.Image, phase.Options{Reporter: o.Reporter})
	if err != nil {
		return Built{}, fmt.Errorf("push the image of %s: %w", what, err)
	}
	for _, r := range ij.Images {
		if r.Component == skew.KubeProxy {
			out.KubeProxyImage = r.Ref
		}
	}
	if out.KubeProxyImage == "" {
		return Built{}, fmt.Errorf("push the image of %s: no kube-proxy image among those pushed", what)
	}
	return out, nil
}
