package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap"
)

// StaticPod names a control-plane static pod: its manifest file and the
// component whose image it runs.
type StaticPod struct {
	// Name is the pod's and container's name (kube-apiserver, etcd).
	Name string
	// Component is the build catalog name (apiserver, etcd).
	Component string
}

// StaticPods are the control plane, in start order.
var StaticPods = []StaticPod{
	{"etcd", "etcd"},
	{"kube-apiserver", "apiserver"},
	{"kube-controller-manager", "controller-manager"},
	{"kube-scheduler", "scheduler"},
}

// manifestImage is the image the manifest of sp is to name: the one the
// images phase recorded, unless a swap put another in the installed
// manifest, which stays (running up after a swap changes nothing; `devk
// swap --rollback` goes back).
func (c *Cluster) manifestImage(sp StaticPod, installed *corev1.Pod) (img string, swapped bool, err error) {
	img = c.Config.Images[sp.Component]
	if img == "" {
		return "", false, fmt.Errorf("no image recorded for %s: run `devk up phase images` first", sp.Component)
	}
	if installed != nil {
		if s, ok := staticpod.SwappedImage(installed); ok && s != img {
			return s, true, nil
		}
	}
	return img, false, nil
}

// writeManifest renders and installs one static pod manifest unless the
// installed one says the same (but for a swap's stamp); the temp file
// lives outside the manifests dir, which the kubelet scans.
func (c *Cluster) writeManifest(ctx context.Context, n Node, sp StaticPod) (phase.Outcome, error) {
	return c.writeManifestWith(ctx, n, sp, controlplane.ManifestInput{})
}

// writeManifestWith is writeManifest with what in sets beyond the
// cluster's config, paths and image (a joining etcd member's cluster).
func (c *Cluster) writeManifestWith(ctx context.Context, n Node, sp StaticPod, in controlplane.ManifestInput) (phase.Outcome, error) {
	path := n.Files.ManifestPath(sp.Name)
	// A `devk run` killed with its pod taken out: the manifest it took
	// out is the installed one (it may name a swapped-in image).
	returned, err := swap.ManifestFor(n.Files.Manifests(), sp.Name).ReturnRun(ctx, sp.Name)
	if err != nil {
		return phase.Done, err
	}
	if returned {
		c.noteManifestWritten(path, time.Now())
	}
	installed := controlplane.InstalledPod(path)
	img, swapped, err := c.manifestImage(sp, installed)
	if err != nil {
		return phase.Done, err
	}
	in.Config, in.Node, in.Files, in.Image = c.Config, n.Net, n.Files, img
	if sp.Name == "kube-apiserver" && c.Config.Spec.Audit.On() {
		if err := writeAuditPolicy(c.Config.Spec, n); err != nil {
			return phase.Done, err
		}
	}
	if swapped {
		// The swap's stamp stays with its image: a manifest rewritten for
		// a changed flag still tells the next up the image was swapped in.
		in.Annotations = map[string]string{staticpod.WrittenAnnotation: installed.Annotations[staticpod.WrittenAnnotation]}
	}
	data, err := controlplane.Manifest(sp.Name, in)
	if err != nil {
		return phase.Done, err
	}
	short := digest.ShortImage(img)
	if swapped {
		short += " (swapped in)"
	}
	if installed != nil {
		if rendered, err := staticpod.Parse(data); err == nil && staticpod.SameButStamp(installed, rendered) {
			return manifestOutcome(short, returned, false), nil
		}
	}
	written := time.Now()
	changed, err := atomicfile.WriteIfChanged(path, data, 0o600, n.Files.Tmp())
	if err != nil {
		return phase.Done, err
	}
	if changed {
		c.noteManifestWritten(path, written)
	}
	return manifestOutcome(short, returned, changed), nil
}

// manifestOutcome says what writeManifest did to the manifest of the
// image short: put it back from an interrupted `devk run` (returned),
// wrote it (changed), both, or neither.
func manifestOutcome(short string, returned, changed bool) phase.Outcome {
	switch {
	case returned && !changed:
		return phase.Changed("put back %s after an interrupted `devk run`", short)
	case returned:
		return phase.Changed("put back after an interrupted `devk run`, wrote %s", short)
	case !changed:
		return phase.Unchanged("unchanged %s", short)
	}
	return phase.Changed("wrote %s", short)
}

// noteManifestWritten records that this run put the manifest at path in
// place at t: wait-control-plane waits for the container the kubelet
// starts from it.
func (c *Cluster) noteManifestWritten(path string, t time.Time) {
	if c.manifestsWritten == nil {
		c.manifestsWritten = map[string]time.Time{}
	}
	c.manifestsWritten[path] = t
}

// writeAuditPolicy puts the API server's audit policy on node n before
// its manifest names it. The API server reads it when it starts; the
// manifest carries its digest, so a changed policy restarts the pod.
func writeAuditPolicy(spec layout.Spec, n Node) error {
	data, err := controlplane.AuditPolicy(spec)
	if err != nil {
		return err
	}
	_, err = atomicfile.WriteIfChanged(n.Files.AuditPolicy(), data, 0o600, n.Files.Tmp())
	return err
}
