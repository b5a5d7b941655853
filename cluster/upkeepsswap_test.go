package cluster

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/swap"
)

// schedulerPod is the static pod these tests write, schedulerUpImage
// the image up records for it, schedulerSwapped one a swap put in.
var (
	schedulerPod     = StaticPod{Name: "kube-scheduler", Component: "scheduler"}
	schedulerUpImage = "127.0.0.1:5000/kube-scheduler@sha256:" + strings.Repeat("1", 64)
	schedulerSwapped = "127.0.0.1:5000/kube-scheduler@sha256:" + strings.Repeat("2", 64)
)

// swapIn swaps image into sp's manifest on node 0 as `devk swap` writes
// it (its steps on the files, without a node).
func swapIn(t *testing.T, c *Cluster, sp StaticPod, image string) swap.Manifest {
	t.Helper()
	m := swap.ManifestFor(c.FirstNode().Files.Manifests(), sp.Name)
	if _, err := m.Begin(sp.Name, image); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteImage(sp.Name, image); err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUpKeepsSwappedImages: after `devk swap`, running `devk up` again
// changes nothing: the manifest keeps the swapped-in image and is not
// rewritten (a rewrite would restart the pod).
func TestUpKeepsSwappedImages(t *testing.T) {
	ctx := context.Background()
	c, sp := newTestCluster(t), schedulerPod
	c.Config.Images["scheduler"] = schedulerUpImage
	if out, err := c.writeManifest(ctx, c.FirstNode(), sp); err != nil || !out.Changed {
		t.Fatalf("first write: %v, %+v; want a change", err, out)
	}
	m := swapIn(t, c, sp, schedulerSwapped)
	before, _ := os.ReadFile(m.Path)
	out, err := c.writeManifest(ctx, c.FirstNode(), sp)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(m.Path)
	if string(after) != string(before) || out.Changed {
		t.Fatalf("up rewrote a swapped manifest (changed=%v): %s", out.Changed, out.Detail)
	}
	if img, _ := staticpod.Image(m.Path, sp.Name); img != schedulerSwapped {
		t.Fatalf("manifest names %s after up, want the swapped %s", img, schedulerSwapped)
	}
	if d := out.Detail; !strings.Contains(d, "swapped in") {
		t.Errorf("detail %q does not say the image was swapped in", d)
	}
	// A manifest devk up wrote itself (no swap stamp) follows the recorded image.
	os.Remove(m.Path)
	if _, err := c.writeManifest(ctx, c.FirstNode(), sp); err != nil {
		t.Fatal(err)
	}
	if img, _ := staticpod.Image(m.Path, sp.Name); img != schedulerUpImage {
		t.Fatalf("a fresh manifest names %s, want %s", img, schedulerUpImage)
	}
}

// TestUpPutsBackAnInterruptedRun: a `devk run` killed with its static pod
// taken out leaves the manifest out of the manifests dir; `devk up`
// puts that manifest back (with the image it named, a swapped-in one
// here), drops the run's journal and waits for the pod.
func TestUpPutsBackAnInterruptedRun(t *testing.T) {
	ctx := context.Background()
	c, sp := newTestCluster(t), schedulerPod
	c.Config.Images["scheduler"] = schedulerUpImage
	if _, err := c.writeManifest(ctx, c.FirstNode(), sp); err != nil {
		t.Fatal(err)
	}
	m := swapIn(t, c, sp, schedulerSwapped)
	if _, err := m.BeginRun(sp.Name, []string{"kube-scheduler"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Vacate(); err != nil {
		t.Fatal(err)
	}
	out, err := c.writeManifest(ctx, c.FirstNode(), sp)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Changed || !strings.Contains(out.Detail, "devk run") {
		t.Errorf("outcome %+v does not say the manifest was put back", out)
	}
	if img, _ := staticpod.Image(m.Path, sp.Name); img != schedulerSwapped {
		t.Errorf("manifest names %s after up, want the swapped-in %s it named before the run", img, schedulerSwapped)
	}
	if j, _ := m.InProgress(); j != nil {
		t.Errorf("the run's journal is still there: %+v", j)
	}
	if _, ok := c.manifestsWritten[m.Path]; !ok {
		t.Error("wait-control-plane is not told to wait for the pod put back")
	}
}
