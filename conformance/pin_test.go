package conformance

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/registry/registrytest"
)

// TestPinnedTags: against devk's own registry (in-process), only tags
// `devk e2e images` recorded, at the digest it recorded, are taken; a
// tag it did not push, or that moved, fails the run before any spec; a
// tag the registry lacks that devk pushed or can make is missing (the
// run builds it), one it cannot make is left to the spec.
func TestPinnedTags(t *testing.T) {
	addr, r := registrytest.Start(t)
	ctx := context.Background()
	pushAs := func(upstreamPath, tag string) string {
		t.Helper()
		img, err := random.Image(512, 1)
		if err != nil {
			t.Fatal(err)
		}
		repo, err := r.Repository(upstreamPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Push(ctx, repo.Tag(tag), img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d.String()
	}
	list := []TestImage{
		{ID: "Agnhost", Registry: "promoterE2eRegistry", Name: "agnhost", Tag: "2.56"},
		{ID: "Nfs", Registry: "promoterE2eRegistry", Name: "volume/nfs", Tag: "1.4"},
		{ID: "InvalidRegistryImage", Registry: "invalidRegistry", Name: "alpine", Tag: "3.1"},
	}
	agnhost := MirrorOf(addr, "registry.k8s.io/e2e-test-images/agnhost") + ":2.56"
	nfs := MirrorOf(addr, "registry.k8s.io/e2e-test-images/volume/nfs") + ":1.4"
	d := pushAs("registry.k8s.io/e2e-test-images/agnhost", "2.56")
	rec := PushedImages{Registry: addr, Images: map[string]string{agnhost: d}}

	got, missing, err := pinnedTags(ctx, r, addr, list, rec, "/home")
	if err != nil || len(got) != 1 || got[agnhost] != d || len(missing) != 0 {
		t.Fatalf("pinned %v, missing %v, %v; want agnhost at %s alone (nfs is not in the registry, and devk cannot make it)", got, missing, err, d)
	}
	// The record survives a write and a read.
	file := filepath.Join(t.TempDir(), "e2e-images.json")
	if err := rec.write(file); err != nil {
		t.Fatal(err)
	}
	if back, err := readPushed(file); err != nil || back.Images[agnhost] != d {
		t.Fatalf("read back %+v, %v", back, err)
	}
	if none, err := readPushed(filepath.Join(t.TempDir(), "none.json")); err != nil || len(none.Images) != 0 {
		t.Fatalf("no record: %+v, %v", none, err)
	}
	// The home's record of the registry serves every cluster of the
	// home; a cluster's own file (before) is read when the home has none.
	home := t.TempDir()
	cluster := layout.HomeFiles(home).Cluster("other")
	if err := rec.write(cluster.E2EImages()); err != nil {
		t.Fatal(err)
	}
	if back, err := pushedFor(home, cluster, addr); err != nil || back.Images[agnhost] != d {
		t.Fatalf("the cluster's record before the home had one: %+v, %v", back, err)
	}
	homeRec := PushedImages{Registry: addr, Images: map[string]string{agnhost: "sha256:home"}}
	if err := homeRec.write(layout.HomeFiles(home).E2EImages(addr)); err != nil {
		t.Fatal(err)
	}
	if back, err := pushedFor(home, layout.HomeFiles(home).Cluster("third"), addr); err != nil || back.Images[agnhost] != "sha256:home" {
		t.Fatalf("the home's record, for another cluster of the home: %+v, %v", back, err)
	}

	// A tag devk has no recipe for, in the registry: refused.
	nfsDigest := pushAs("registry.k8s.io/e2e-test-images/volume/nfs", "1.4")
	_, _, err = pinnedTags(ctx, r, addr, list, rec, "/home")
	if err == nil || !strings.Contains(err.Error(), nfs) || !strings.Contains(err.Error(), "did not push") || !strings.Contains(err.Error(), nfsDigest) ||
		!strings.Contains(err.Error(), "/home/registry/manifests/registry.k8s.io/e2e-test-images/volume/nfs/1.4") {
		t.Fatalf("a tag devk did not push: %v", err)
	}
	// A recorded tag that moved: refused.
	list = list[:1]
	moved := pushAs("registry.k8s.io/e2e-test-images/agnhost", "2.56")
	_, _, err = pinnedTags(ctx, r, addr, list, rec, "/home")
	if err == nil || !strings.Contains(err.Error(), moved) || !strings.Contains(err.Error(), "run `devk e2e images` again") {
		t.Fatalf("a tag that moved: %v", err)
	}
	// Tags the registry lacks that devk can make (busybox), recorded
	// (gone since) or not (never pushed: the spec would have waited on
	// its pull): missing, not pinned.
	busybox := MirrorOf(addr, "registry.k8s.io/e2e-test-images/busybox") + ":1.37.0-1"
	nonroot := MirrorOf(addr, "registry.k8s.io/e2e-test-images/nonroot") + ":1.4"
	rec.Images[busybox] = d
	list = []TestImage{
		{ID: "BusyBox", Registry: "promoterE2eRegistry", Name: "busybox", Tag: "1.37.0-1"},
		{ID: "NonRoot", Registry: "promoterE2eRegistry", Name: "nonroot", Tag: "1.4"},
	}
	got, missing, err = pinnedTags(ctx, r, addr, list, rec, "/home")
	if err != nil || len(got) != 0 || !slices.Equal(missing, []string{busybox, nonroot}) {
		t.Fatalf("pinned %v, missing %v, %v; want %s and %s missing", got, missing, err, busybox, nonroot)
	}
}
