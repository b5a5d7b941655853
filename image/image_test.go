package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/phase"
)

// The helper process of TestSameBinarySameDigestAcrossProcesses: it
// prints the digest of the image of the binary named in the environment.
func TestMain(m *testing.M) {
	if bin := os.Getenv("DEVK_TEST_IMAGE_OF"); bin != "" {
		d, err := digestOf(bin, os.Getenv("DEVK_TEST_CACHE"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(d)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var fixedSpec = Spec{
	Binary: "kube-apiserver", Platform: "linux/amd64",
	Created: time.Date(2026, 2, 10, 12, 53, 36, 0, time.UTC),
	Version: "v1.34.0", Revision: "0123456789abcdef0123456789abcdef01234567",
}

// digestOf makes the image of bin with a fresh layer cache in dir.
func digestOf(bin, dir string) (string, error) {
	sum, err := build.FileSHA256(bin)
	if err != nil {
		return "", err
	}
	c := &LayerCache{Dir: dir, Compression: DefaultCompression, Keep: 3}
	l, _, err := c.Layer(bin, "kube-apiserver", sum, types.OCILayer)
	if err != nil {
		return "", err
	}
	img, err := Assemble(fixedSpec, l)
	if err != nil {
		return "", err
	}
	d, err := img.Digest()
	return d.String(), err
}

// builtTree is a fixture tree with the apiserver built by a real go build.
func builtTree(t *testing.T) (root string, bin string) {
	t.Helper()
	root = testtree.New(t)
	j, err := build.Run(context.Background(), build.Options{TreeDir: root, Components: []string{"apiserver"}, Platform: "linux/amd64"}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return root, j.Binaries[0].Path
}

func TestTag(t *testing.T) {
	tests := []struct{ name, version, want string }{
		{"release", "v1.34.4", "v1.34.4"},
		{"past a tag", "v1.34.4-3+0123456789abcd", "v1.34.4-3_0123456789abcd"},
		{"dirty", "v1.35.0-alpha.1.3+0123456789abcd-dirty", "v1.35.0-alpha.1.3_0123456789abcd-dirty"},
		{"odd characters", "v1.34/x y", "v1.34-x-y"},
		{"leading dash", "-x", "v-x"},
		{"empty", "", "latest"},
		{"long", "v" + strings.Repeat("1", 200), "v" + strings.Repeat("1", 127)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Tag(tc.version); got != tc.want {
				t.Fatalf("Tag(%q) = %q, want %q", tc.version, got, tc.want)
			}
			if _, err := name.NewTag("127.0.0.1:5000/kube-apiserver:"+Tag(tc.version), name.StrictValidation); err != nil {
				t.Fatalf("not a valid tag: %v", err)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.1.2.3": true, "localhost:5000": true, "[::1]:5000": true, "::1": true,
		"10.0.0.1:5000": false, "192.168.1.2": false, "registry.example:5000": false, "localhost.example": false,
	} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestSameBinarySameDigest builds the image of one binary with separate
// caches, in this process and in two others: one digest.
func TestSameBinarySameDigest(t *testing.T) {
	_, bin := builtTree(t)
	first, err := digestOf(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	second, err := digestOf(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatalf("two in-process builds gave %s and %s", first, second)
	}
	for i := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "DEVK_TEST_IMAGE_OF="+bin, "DEVK_TEST_CACHE="+t.TempDir())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper process %d: %v", i, err)
		}
		if got := strings.TrimSpace(string(out)); got != first {
			t.Fatalf("process %d gave %s, this process %s", i, got, first)
		}
	}
	// A different binary gives a different image.
	other := filepath.Join(t.TempDir(), "kube-apiserver")
	data, _ := os.ReadFile(bin)
	os.WriteFile(other, append(data, 0), 0o755)
	if d, err := digestOf(other, t.TempDir()); err != nil || d == first {
		t.Fatalf("a different binary gave %s (err %v), same as %s", d, err, first)
	}
}

// TestLayerContents checks the layer's tar: directories and the binary,
// owned by root, fixed modes, zero mtimes, the binary's bytes.
func TestLayerContents(t *testing.T) {
	_, bin := builtTree(t)
	sum, _ := build.FileSHA256(bin)
	c := &LayerCache{Dir: t.TempDir(), Compression: DefaultCompression, Keep: 3}
	l, hit, err := c.Layer(bin, "kube-apiserver", sum, types.OCILayer)
	if err != nil || hit {
		t.Fatalf("hit %v err %v", hit, err)
	}
	var names []string
	eachLayerEntry(t, l, func(h *tar.Header, body io.Reader) {
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) || h.Mode != 0o755 || h.Uname != "" {
			t.Errorf("%s: uid %d gid %d mtime %s mode %o uname %q", h.Name, h.Uid, h.Gid, h.ModTime, h.Mode, h.Uname)
		}
		if h.Typeflag == tar.TypeReg {
			got, _ := io.ReadAll(body)
			want, _ := os.ReadFile(bin)
			if !bytes.Equal(got, want) {
				t.Errorf("%s does not hold the binary", h.Name)
			}
		}
	})
	if strings.Join(names, " ") != "usr/ usr/local/ usr/local/bin/ usr/local/bin/kube-apiserver" {
		t.Fatalf("layer entries %v", names)
	}

	// The second time the cache answers, with the same digests, and the
	// blob is not written again.
	blob, _ := c.paths("kube-apiserver", sum)
	before, _ := os.Stat(blob)
	l2, hit, err := c.Layer(bin, "kube-apiserver", sum, types.OCILayer)
	if err != nil || !hit {
		t.Fatalf("second lookup: hit %v err %v", hit, err)
	}
	d1, _ := l.Digest()
	d2, _ := l2.Digest()
	after, _ := os.Stat(blob)
	if d1 != d2 || !before.ModTime().Equal(after.ModTime()) {
		t.Fatalf("cache hit changed the layer: %s -> %s", d1, d2)
	}
}

// TestUncompressedLayer: with NoCompression the blob is the tar itself
// (its digest is its diff ID), of OCI's uncompressed media type, cached
// apart from the gzipped layer of the same binary.
func TestUncompressedLayer(t *testing.T) {
	_, bin := builtTree(t)
	sum, _ := build.FileSHA256(bin)
	dir := t.TempDir()
	plain := &LayerCache{Dir: dir, Compression: NoCompression, Keep: 3}
	l, hit, err := plain.Layer(bin, "kube-apiserver", sum, types.OCILayer)
	if err != nil || hit {
		t.Fatalf("hit %v err %v", hit, err)
	}
	d, _ := l.Digest()
	diff, _ := l.DiffID()
	mt, _ := l.MediaType()
	size, _ := l.Size()
	if d != diff || mt != types.OCIUncompressedLayer {
		t.Fatalf("digest %s, diff ID %s, media type %s: want the tar's own digest and %s", d, diff, mt, types.OCIUncompressedLayer)
	}
	fi, _ := os.Stat(bin)
	if size <= fi.Size() {
		t.Errorf("the plain layer is %d bytes, no more than the binary's %d", size, fi.Size())
	}
	var names []string
	eachLayerEntry(t, l, func(h *tar.Header, _ io.Reader) { names = append(names, h.Name) })
	if strings.Join(names, " ") != "usr/ usr/local/ usr/local/bin/ usr/local/bin/kube-apiserver" {
		t.Fatalf("layer entries %v", names)
	}
	gz := &LayerCache{Dir: dir, Compression: DefaultCompression, Keep: 3}
	lz, hit, err := gz.Layer(bin, "kube-apiserver", sum, types.OCILayer)
	if err != nil || hit {
		t.Fatalf("the gzipped layer beside the plain one: hit %v err %v", hit, err)
	}
	dz, _ := lz.Digest()
	diffz, _ := lz.DiffID()
	if dz == d || diffz != diff {
		t.Fatalf("gzipped: digest %s, diff ID %s; plain: %s, %s: want other blobs of the same tar", dz, diffz, d, diff)
	}
	dl, _, err := plain.Layer(bin, "kube-apiserver", sum, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := dl.MediaType(); mt != types.DockerUncompressedLayer {
		t.Errorf("a Docker-flavoured plain layer is %s", mt)
	}
}

// eachLayerEntry calls fn with each entry of the layer's uncompressed tar
// and its contents.
func eachLayerEntry(t *testing.T, l v1.Layer, fn func(h *tar.Header, body io.Reader)) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	testutil.EachTarEntry(t, rc, fn)
}

// TestLayerAtRoot: a binary at the image's root (/coredns, /agnhost) is
// one tar entry, cached apart from the same binary under BinDir.
func TestLayerAtRoot(t *testing.T) {
	_, bin := builtTree(t)
	sum, _ := build.FileSHA256(bin)
	c := &LayerCache{Dir: t.TempDir(), Compression: DefaultCompression, Keep: 3}
	atRoot, hit, err := c.LayerAt(bin, "/kube-apiserver", sum, types.OCILayer)
	if err != nil || hit {
		t.Fatalf("hit %v err %v", hit, err)
	}
	var names []string
	eachLayerEntry(t, atRoot, func(h *tar.Header, _ io.Reader) {
		names = append(names, h.Name)
		if h.Mode != 0o755 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: mode %o mtime %s", h.Name, h.Mode, h.ModTime)
		}
	})
	if strings.Join(names, " ") != "kube-apiserver" {
		t.Fatalf("layer entries %v, want the binary alone", names)
	}
	underBin, hit, err := c.Layer(bin, "kube-apiserver", sum, types.OCILayer)
	if err != nil || hit {
		t.Fatalf("the BinDir layout came from the cache of the root one: hit %v err %v", hit, err)
	}
	d1, _ := atRoot.Digest()
	d2, _ := underBin.Digest()
	if d1 == d2 {
		t.Fatal("two layouts, one digest")
	}
	if _, hit, err := c.LayerAt(bin, "/kube-apiserver", sum, types.OCILayer); err != nil || !hit {
		t.Fatalf("second lookup at the root: hit %v err %v", hit, err)
	}
	for _, p := range []string{"kube-apiserver", "/../kube-apiserver", "/x/../../kube-apiserver", "/bin/Kube_Apiserver"} {
		if _, _, err := c.LayerAt(bin, p, sum, types.OCILayer); err == nil {
			t.Errorf("LayerAt(%q) accepted", p)
		}
	}
}

func TestLayerCachePrunes(t *testing.T) {
	dir := t.TempDir()
	c := &LayerCache{Dir: dir, Compression: DefaultCompression, Keep: 100}
	var blobs, metas, bins, sums []string
	for i := range 4 {
		bin := filepath.Join(t.TempDir(), "kubectl")
		os.WriteFile(bin, []byte(fmt.Sprintf("binary %d", i)), 0o755)
		sum, _ := build.FileSHA256(bin)
		if _, _, err := c.Layer(bin, "kubectl", sum, types.OCILayer); err != nil {
			t.Fatal(err)
		}
		blob, meta := c.paths("kubectl", sum)
		blobs, metas, bins, sums = append(blobs, blob), append(metas, meta), append(bins, bin), append(sums, sum)
	}
	// Used in the order 0, 1, 2, 3, an hour apart (file times are too
	// coarse to tell quick creations apart).
	for i, m := range metas {
		at := time.Now().Add(time.Duration(i-10) * time.Hour)
		os.Chtimes(m, at, at)
	}
	// Another binary whose name starts the same is left alone.
	other := filepath.Join(t.TempDir(), "kubectl-x")
	os.WriteFile(other, []byte("x"), 0o755)
	otherSum, _ := build.FileSHA256(other)
	c.Layer(other, "kubectl-x", otherSum, types.OCILayer)
	otherBlob, otherMeta := c.paths("kubectl-x", otherSum)
	old := time.Now().Add(-100 * time.Hour)
	os.Chtimes(otherMeta, old, old)

	// A cache hit makes layer 0 the most recently used.
	c.Keep = 2
	if _, hit, err := c.Layer(bins[0], "kubectl", sums[0], types.OCILayer); err != nil || !hit {
		t.Fatalf("hit %v err %v", hit, err)
	}
	c.prune("kubectl")
	var kept []bool
	for _, b := range blobs {
		kept = append(kept, exists(b))
	}
	if fmt.Sprint(kept) != "[true false false true]" {
		t.Fatalf("kept %v, want the two most recently used (0 and 3)", kept)
	}
	if !exists(otherBlob) {
		t.Fatal("pruning kubectl removed kubectl-x's layer")
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestAssembleConfig(t *testing.T) {
	l, err := random.Layer(100, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	spec := fixedSpec
	spec.Platform = "linux/arm/v7"
	img, err := Assemble(spec, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	mt, _ := img.MediaType()
	if mt != types.OCIManifestSchema1 || cf.OS != "linux" || cf.Architecture != "arm" || cf.Variant != "v7" ||
		!cf.Created.Equal(spec.Created) || fmt.Sprint(cf.Config.Entrypoint) != "[/usr/local/bin/kube-apiserver]" ||
		cf.Config.Labels[LabelVersion] != "v1.34.0" || cf.Config.Labels[LabelRevision] != spec.Revision || len(cf.History) != 1 {
		t.Fatalf("media type %s, config %+v", mt, cf)
	}
	if _, err := Assemble(Spec{Binary: "x", Platform: "amd64"}, l); err == nil {
		t.Fatal("platform without os accepted")
	}
}

func TestParsePlatform(t *testing.T) {
	tests := []struct {
		in      string
		want    v1.Platform
		wantErr bool
	}{
		{in: "linux/amd64", want: v1.Platform{OS: "linux", Architecture: "amd64"}},
		{in: "linux/arm/v7", want: v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}},
		{in: "windows/amd64:10.0.17763.1879", want: v1.Platform{OS: "windows", Architecture: "amd64", OSVersion: "10.0.17763.1879"}},
		{in: "amd64", wantErr: true},
		{in: "linux/", wantErr: true},
		{in: "/amd64", wantErr: true},
		{in: "", wantErr: true},
		{in: "linux/arm/v7/x", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParsePlatform(tc.in)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "use os/arch[/variant], e.g. linux/amd64") {
				t.Errorf("ParsePlatform(%q) = %+v, %v; want an error saying what to use", tc.in, got, err)
			}
			continue
		}
		if err != nil || !got.Equals(tc.want) {
			t.Errorf("ParsePlatform(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// testRegistry is pkg/registry behind a switch that makes it die: every
// request on a blob upload is then cut off mid-connection.
type testRegistry struct {
	inner       http.Handler
	dead        atomic.Bool
	mu          sync.Mutex
	blobUploads int
	manifestPut int
}

func (r *testRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	upload := strings.Contains(req.URL.Path, "/blobs/uploads")
	if upload && r.dead.Load() {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	r.mu.Lock()
	if upload && req.Method == http.MethodPost {
		r.blobUploads++
	}
	if strings.Contains(req.URL.Path, "/manifests/") && req.Method == http.MethodPut {
		r.manifestPut++
	}
	r.mu.Unlock()
	r.inner.ServeHTTP(w, req)
}

func newTestRegistry(t *testing.T) (*testRegistry, string) {
	t.Helper()
	reg := &testRegistry{inner: ggcr.New(ggcr.Logger(nopLogger()))}
	srv := httptest.NewServer(reg)
	t.Cleanup(srv.Close)
	return reg, strings.TrimPrefix(srv.URL, "http://")
}

func opts(addr string) Options {
	return Options{Registry: addr, Remote: RemoteOptions{Keychain: authn.NewMultiKeychain()}}
}

func buildOpts(root string, comps ...string) build.Options {
	return build.Options{TreeDir: root, Components: comps, Platform: "linux/amd64"}
}

// TestBuildPushThenUnchanged runs `devk build apiserver --push` twice on
// the fixture: the second time nothing is compressed or uploaded.
func TestBuildPushThenUnchanged(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	reg, addr := newTestRegistry(t)
	root := testtree.New(t)
	o := opts(addr)
	o.Push = true
	j, err := Run(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Images) != 1 {
		t.Fatalf("images %+v", j.Images)
	}
	r := j.Images[0]
	if r.Tag != "v1.34.0" || r.Ref != addr+"/kube-apiserver@"+r.Digest || r.LayerCached {
		t.Fatalf("result %+v", r)
	}
	st, err := build.LoadState(root)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Components["apiserver"].Pushed
	if p == nil || p.Digest != r.Digest || p.Ref != r.Ref || p.Tag != "v1.34.0" || p.Repository != addr+"/kube-apiserver" || p.BinarySHA256 != st.Components["apiserver"].Binary.SHA256 {
		t.Fatalf("state.json pushed = %+v", p)
	}

	// What the registry serves under the tag is that image, binary inside.
	ref, _ := name.ParseReference(addr + "/kube-apiserver:v1.34.0")
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := img.Digest(); d.String() != r.Digest {
		t.Fatalf("registry has %s, pushed %s", d, r.Digest)
	}
	cf, _ := img.ConfigFile()
	if !cf.Created.Equal(time.Date(2026, 2, 10, 12, 53, 36, 0, time.UTC)) || cf.Config.Labels[LabelRevision] != j.Version.GitCommit {
		t.Fatalf("created %s (want the commit time), labels %v", cf.Created, cf.Config.Labels)
	}
	if !layerHolds(t, img, "usr/local/bin/kube-apiserver", st.Components["apiserver"].Binary.Path) {
		t.Fatal("the pushed layer does not hold the binary")
	}
	if reg.blobUploads != 2 || reg.manifestPut != 1 {
		t.Fatalf("first push: %d blob uploads, %d manifest puts", reg.blobUploads, reg.manifestPut)
	}

	// Unchanged: the layer comes from the cache and nothing is uploaded.
	j2, err := Run(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r2 := j2.Images[0]; !r2.LayerCached || r2.Digest != r.Digest {
		t.Fatalf("second run %+v", r2)
	}
	if reg.blobUploads != 2 || reg.manifestPut != 1 {
		t.Fatalf("unchanged push uploaded: %d blob uploads, %d manifest puts", reg.blobUploads, reg.manifestPut)
	}

	// `devk push` of the built binary gives the same image; so does
	// SOURCE_DATE_EPOCH set to the commit time, while another epoch
	// changes only the created time.
	j3, err := RunPush(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{})
	if err != nil || j3.Images[0].Digest != r.Digest {
		t.Fatalf("devk push: %v, %+v", err, j3)
	}
	// `devk push phase push` alone remakes the image from the cache.
	j5, err := RunPush(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{Only: "push"})
	if err != nil || len(j5.Images) != 1 || j5.Images[0].Digest != r.Digest || !j5.Images[0].LayerCached {
		t.Fatalf("phase push alone: %v, %+v", err, j5)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "86400")
	j4, err := RunPush(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{})
	if err != nil || j4.Images[0].Digest == r.Digest || j4.Images[0].Layer != r.Layer {
		t.Fatalf("SOURCE_DATE_EPOCH: %v, %+v", err, j4.Images)
	}
	img4, _ := remote.Image(ref)
	if cf, _ := img4.ConfigFile(); !cf.Created.Equal(time.Unix(86400, 0)) {
		t.Fatalf("created %s, want SOURCE_DATE_EPOCH", cf.Created)
	}
}

func layerHolds(t *testing.T, img v1.Image, path, bin string) bool {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := ls[len(ls)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			return false
		}
		if h.Name == path {
			got, _ := io.ReadAll(tr)
			want, _ := os.ReadFile(bin)
			return bytes.Equal(got, want)
		}
	}
}

// TestPushRegistryDown: the error names the address and how to start a
// registry, and nothing is recorded as pushed.
func TestPushRegistryDown(t *testing.T) {
	root, _ := builtTree(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = RunPush(context.Background(), buildOpts(root, "apiserver"), opts(addr), phase.Options{})
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "devk registry serve") {
		t.Fatalf("err = %v", err)
	}
	st, _ := build.LoadState(root)
	if st.Components["apiserver"].Pushed != nil {
		t.Fatal("a failed push was recorded")
	}
}

// TestPushInterrupted: the registry dies during the blob upload; nothing
// appears under the tag, and running the push again completes it.
func TestPushInterrupted(t *testing.T) {
	root, _ := builtTree(t)
	reg, addr := newTestRegistry(t)
	reg.dead.Store(true)
	_, err := RunPush(context.Background(), buildOpts(root, "apiserver"), opts(addr), phase.Options{})
	if err == nil {
		t.Fatal("push to a dying registry succeeded")
	}
	head := func() int {
		rec := httptest.NewRecorder()
		reg.inner.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/v2/kube-apiserver/manifests/v1.34.0", nil))
		return rec.Code
	}
	if code := head(); code != http.StatusNotFound {
		t.Fatalf("after a failed push the tag answers %d", code)
	}
	if st, _ := build.LoadState(root); st.Components["apiserver"].Pushed != nil {
		t.Fatal("a failed push was recorded")
	}
	reg.dead.Store(false)
	j, err := RunPush(context.Background(), buildOpts(root, "apiserver"), opts(addr), phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if code := head(); code != http.StatusOK || !j.Images[0].LayerCached {
		t.Fatalf("re-run: tag answers %d, layer cached %v", code, j.Images[0].LayerCached)
	}
}

func TestPushBadInput(t *testing.T) {
	_, addr := newTestRegistry(t)
	root := testtree.New(t)
	tests := []struct {
		name    string
		comps   []string
		wantIs  error
		wantErr string
	}{
		{name: "unbuilt", comps: []string{"apiserver"}, wantIs: ErrNotBuilt, wantErr: "run `devk build apiserver` first"},
		{name: "unknown", comps: []string{"apiservr"}, wantIs: build.ErrUnknownComponent, wantErr: "use one of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RunPush(context.Background(), buildOpts(root, tc.comps...), opts(addr), phase.Options{})
			if !errors.Is(err, tc.wantIs) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %v with %q", err, tc.wantIs, tc.wantErr)
			}
		})
	}
	t.Run("binary replaced since the build", func(t *testing.T) {
		root, bin := builtTree(t)
		later := time.Now().Add(time.Hour)
		os.Chtimes(bin, later, later)
		_, err := RunPush(context.Background(), buildOpts(root, "apiserver"), opts(addr), phase.Options{})
		if err == nil || !strings.Contains(err.Error(), "changed since devk built it: run `devk build apiserver` again") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad registry", func(t *testing.T) {
		o := opts("bad registry!")
		if _, err := RunPush(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{}); err == nil || !strings.Contains(err.Error(), "--registry") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestBase puts the binary on a base image from the registry; a base that
// cannot be pulled is named in the error.
func TestBase(t *testing.T) {
	root, _ := builtTree(t)
	_, addr := newTestRegistry(t)
	base, err := random.Image(512, 2) // Docker media types, like most bases
	if err != nil {
		t.Fatal(err)
	}
	baseRef, _ := name.ParseReference(addr + "/base:1")
	if err := remote.Write(baseRef, base); err != nil {
		t.Fatal(err)
	}
	o := opts(addr)
	o.Base = baseRef.String()
	j, err := RunPush(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(j.Images[0].Ref)
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	mt, _ := img.MediaType()
	lmt, _ := ls[2].MediaType()
	cf, _ := img.ConfigFile()
	if len(ls) != 3 || mt != types.DockerManifestSchema2 || lmt != types.DockerLayer || cf.Config.Entrypoint[0] != "/usr/local/bin/kube-apiserver" {
		t.Fatalf("%d layers, manifest %s, our layer %s, entrypoint %v", len(ls), mt, lmt, cf.Config.Entrypoint)
	}

	o.Base = addr + "/nothing:here"
	_, err = RunPush(context.Background(), buildOpts(root, "apiserver"), o, phase.Options{})
	if err == nil || !strings.Contains(err.Error(), "base image "+addr+"/nothing:here cannot be pulled") || !strings.Contains(err.Error(), "MANIFEST_UNKNOWN") && !strings.Contains(err.Error(), "NAME_UNKNOWN") {
		t.Fatalf("err = %v", err)
	}
}

// TestPlainHTTPPolicy: plain HTTP only to loopback unless --insecure. The
// transport below never sends anything; it records what would be sent.
func TestPlainHTTPPolicy(t *testing.T) {
	tests := []struct {
		url      string
		insecure bool
		allowed  bool
	}{
		{"http://127.0.0.1:5000/v2/", false, true},
		{"http://localhost:5000/v2/", false, true},
		{"http://[::1]:5000/v2/", false, true},
		{"http://10.0.0.5:5000/v2/", false, false},
		{"http://10.0.0.5:5000/v2/", true, true},
		{"https://10.0.0.5:5000/v2/", false, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s insecure=%v", tc.url, tc.insecure), func(t *testing.T) {
			sent := false
			p := &plainHTTPPolicy{insecure: tc.insecure, next: roundTripFunc(func(*http.Request) (*http.Response, error) {
				sent = true
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(""))}, nil
			})}
			req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
			_, err := p.RoundTrip(req)
			if sent != tc.allowed || (err == nil) != tc.allowed {
				t.Fatalf("sent %v err %v, want allowed %v", sent, err, tc.allowed)
			}
			if err != nil && !strings.Contains(err.Error(), "--insecure") {
				t.Fatalf("err %v does not say what to do", err)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// TestBuildPushPackagePath runs `devk build ./test/images/agnhost --push`
// on the fixture: the image follows the package's Dockerfile (/agnhost,
// its entrypoint and cmd), is named after the directory, and `devk push`
// of the same package path gives the same digest.
func TestBuildPushPackagePath(t *testing.T) {
	_, addr := newTestRegistry(t)
	root := testtree.New(t)
	o := opts(addr)
	o.Push = true
	j, err := Run(context.Background(), buildOpts(root, "./test/images/agnhost"), o, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Images) != 1 {
		t.Fatalf("images %+v", j.Images)
	}
	r := j.Images[0]
	if r.Component != "agnhost" || r.Tag != "v1.34.0" || r.Ref != addr+"/agnhost@"+r.Digest {
		t.Fatalf("result %+v", r)
	}
	ref, _ := name.ParseReference(addr + "/agnhost:v1.34.0")
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	if fmt.Sprint(cf.Config.Entrypoint) != "[/agnhost]" || fmt.Sprint(cf.Config.Cmd) != "[pause]" || cf.Config.Labels[LabelRevision] != j.Version.GitCommit {
		t.Fatalf("config: entrypoint %q, cmd %q, labels %v", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Labels)
	}
	if !layerHolds(t, img, "agnhost", j.Binaries[0].Path) {
		t.Fatal("the pushed layer does not hold the binary at /agnhost")
	}
	j2, err := RunPush(context.Background(), buildOpts(root, filepath.Join(root, "test", "images", "agnhost")), o, phase.Options{})
	if err != nil || j2.Images[0].Digest != r.Digest || !j2.Images[0].LayerCached {
		t.Fatalf("devk push of the package path: %v, %+v", err, j2)
	}
}
