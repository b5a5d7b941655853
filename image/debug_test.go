package image

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/phase"
)

// TestDebugImage pushes the apiserver's image, then its debug image with
// the debugger to the in-process registry: the debug build's binary with
// dlv in a layer of its own on top, the component's entrypoint, under a
// tag of its own, recorded as a debug push; the normal image keeps its
// tag. dlv itself is built only in the e2e suite (it needs the module
// proxy): this test's own binary stands in for it, its build phase
// skipped.
func TestDebugImage(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	_, addr := newTestRegistry(t)
	root := testtree.New(t)
	o := opts(addr)
	o.Push = true
	normal, err := Run(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}

	bj, err := build.NewJob(buildOpts(root, build.Delve))
	if err != nil {
		t.Fatal(err)
	}
	dlvPath := bj.BinaryPath(bj.Components[0])
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dlvPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dlvPath, self, 0o755); err != nil {
		t.Fatal(err)
	}

	bo := buildOpts(root, "apiserver")
	bo.Debug, bo.DebugPackages = true, []string{build.DebugAll}
	o.Debugger = true
	j, err := Run(context.Background(), bo, o, phase.Options{Skip: []string{build.Delve}})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Images) != 1 {
		t.Fatalf("images %+v: want the apiserver's alone", j.Images)
	}
	r := j.Images[0]
	if r.Tag != "v1.34.0"+DebugTagSuffix || r.Digest == normal.Images[0].Digest {
		t.Fatalf("debug image %+v, normal %+v", r, normal.Images[0])
	}
	st, err := build.LoadState(root)
	if err != nil {
		t.Fatal(err)
	}
	cs := st.Components["apiserver"]
	if p := cs.DebugPushed; p == nil || p.Digest != r.Digest || !p.Debug || cs.Debug == nil || p.BinarySHA256 != cs.Debug.SHA256 || p.BinarySHA256 == cs.Binary.SHA256 {
		t.Fatalf("state.json: debug pushed %+v, debug %+v", cs.DebugPushed, cs.Debug)
	}
	if p := cs.Pushed; p == nil || p.Digest != normal.Images[0].Digest || p.Debug {
		t.Fatalf("state.json: pushed %+v, want the normal image's %s still (swap and digest verify read it)", p, normal.Images[0].Digest)
	}

	ref, _ := name.ParseReference(r.Ref)
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil || len(ls) != 2 {
		t.Fatalf("debug image: %d layers (%v), want the binary's and dlv's", len(ls), err)
	}
	if !layerHolds(t, img, strings.TrimPrefix(DebuggerPath, "/"), dlvPath) {
		t.Errorf("the last layer does not hold %s", DebuggerPath)
	}
	if ld, _ := ls[0].Digest(); ld.String() != r.Layer {
		t.Errorf("first layer %s, want the debug binary's %s", ld, r.Layer)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{BinDir + "/kube-apiserver"}) || len(cf.History) != 2 || !strings.Contains(cf.History[1].CreatedBy, DebuggerPath) {
		t.Errorf("entrypoint %q, history %+v", cf.Config.Entrypoint, cf.History)
	}

	normalRef, _ := name.ParseReference(addr + "/kube-apiserver:v1.34.0")
	if d, err := remote.Head(normalRef); err != nil || d.Digest.String() != normal.Images[0].Digest {
		t.Fatalf("the normal tag: %v, %v; want %s", d, err, normal.Images[0].Digest)
	}
}
