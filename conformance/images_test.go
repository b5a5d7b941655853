package conformance

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/source"
)

func TestParseManifest(t *testing.T) {
	src := []byte(`
func initImageConfigs(list RegistryList) (map[ImageID]Config, map[ImageID]Config) {
	configs := map[ImageID]Config{}
	configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.56"}
	configs[BusyBox] = Config{list.PromoterE2eRegistry, "busybox", "1.37.0-1"}
	configs[Pause] = Config{list.GcRegistry, "pause", "3.10.1"}
	configs[NodePerfNpbEp] = Config{list.PromoterE2eRegistry, "node-perf/npb-ep", "1.2"}
`)
	got, err := ParseManifest(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []TestImage{
		{ID: "Agnhost", Registry: "promoterE2eRegistry", Name: "agnhost", Tag: "2.56"},
		{ID: "BusyBox", Registry: "promoterE2eRegistry", Name: "busybox", Tag: "1.37.0-1"},
		{ID: "Pause", Registry: "gcRegistry", Name: "pause", Tag: "3.10.1"},
		{ID: "NodePerfNpbEp", Registry: "promoterE2eRegistry", Name: "node-perf/npb-ep", Tag: "1.2"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if u := got[0].Upstream(); u != "registry.k8s.io/e2e-test-images/agnhost:2.56" {
		t.Errorf("upstream %s", u)
	}
	for name, src := range map[string]string{
		"no image":         "package image\n",
		"unknown registry": `configs[X] = Config{list.SomeNewRegistry, "x", "1"}`,
	} {
		if _, err := ParseManifest([]byte(src)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestFilesLayer: the files and their parent directories, once each, in
// a stable order; the same files give the same digest.
func TestFilesLayer(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	files := func() []layerFile {
		return []layerFile{
			{name: "/uploads", dir: true},
			{name: "/localhost.key", data: []byte("key")},
			{name: "/etc/group", data: []byte("root:x:0:\n")},
			{name: "/etc/passwd", data: []byte("root:x:0:0:root:/root:/bin/sh\n")},
		}
	}
	l1, err := filesLayer(files(), created)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := filesLayer(files(), created)
	d1, _ := l1.Digest()
	d2, _ := l2.Digest()
	if d1 != d2 {
		t.Fatalf("digests differ: %s %s", d1, d2)
	}
	rc, err := l1.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var names []string
	testutil.EachTarEntry(t, rc, func(h *tar.Header, _ io.Reader) {
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: mtime %s", h.Name, h.ModTime)
		}
		names = append(names, h.Name)
	})
	want := "etc/ etc/group etc/passwd localhost.key uploads/"
	if strings.Join(names, " ") != want {
		t.Errorf("entries %q, want %q", strings.Join(names, " "), want)
	}
}

// testJob writes the tree files the recipes read (agnhost's porter
// certificate, the Update Demo pictures) and a fake program per package
// recipe (the layers hold bytes; nothing runs them), and returns a job
// with one plain base per kind, as pushImages sees it.
func testJob(t *testing.T) *imagesJob {
	t.Helper()
	root := t.TempDir()
	for _, f := range []string{
		"test/images/agnhost/porter/localhost.crt", "test/images/agnhost/porter/localhost.key",
		"test/images/kitten/html/kitten.jpg", "test/images/kitten/html/data.json",
		"test/images/nautilus/html/nautilus.jpg", "test/images/nautilus/html/data.json",
	} {
		p := filepath.Join(root, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	j := &imagesJob{tree: &source.Tree{Root: root}, bases: map[string]madeImage{}, built: map[string]madeImage{},
		build: &build.Job{Platform: "linux/amd64", Version: source.Version{GitVersion: "v1.34.4", GitCommit: "abc", BuildDate: "2025-01-02T03:04:05Z"}}}
	// What the build reads from the packages' Dockerfiles.
	layouts := map[string]build.ImageLayout{
		"./test/images/agnhost":                {Path: "/agnhost", Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}},
		"./test/images/regression-issue-74839": {Path: "/regression-issue-74839", Entrypoint: []string{"/regression-issue-74839"}},
	}
	for _, r := range recipes {
		if r.Package == "" || slices.ContainsFunc(j.build.Binaries, func(b build.Binary) bool { return b.Component.Package == r.Package }) {
			continue
		}
		name := path.Base(r.Package)
		bin := filepath.Join(root, name+".bin")
		if err := os.WriteFile(bin, []byte("program "+name), 0o755); err != nil {
			t.Fatal(err)
		}
		sum, err := build.FileSHA256(bin)
		if err != nil {
			t.Fatal(err)
		}
		c := build.Component{Name: name, Binary: name, Package: r.Package, Layout: layouts[r.Package]}
		j.build.Binaries = append(j.build.Binaries, build.Binary{Component: c, Name: name, Path: bin, SHA256: sum})
	}
	for _, kind := range []string{build.BaseBusybox, build.BaseBusyboxNet, build.BaseDNSUtils} {
		layer, err := filesLayer([]layerFile{{name: "/etc/base-kind", data: []byte(kind)}}, time.Unix(1e9, 0))
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
		if err != nil {
			t.Fatal(err)
		}
		j.bases[kind] = madeImage{img: img, from: "base " + kind}
	}
	return j
}

// imageFiles lists an image's flattened files with their tar modes.
func imageFiles(t *testing.T, img v1.Image) map[string]int64 {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]int64{}
	testutil.EachTarEntry(t, rc, func(h *tar.Header, _ io.Reader) {
		out["/"+strings.TrimSuffix(h.Name, "/")] = h.Mode
	})
	return out
}

// TestRecipeImages: each image is laid out as its Dockerfile lays it out
// (files, modes, entrypoint, cmd, user, base), and the same inputs give
// the same digest.
func TestRecipeImages(t *testing.T) {
	cases := []struct {
		name                  string
		base                  string
		files                 map[string]int64 // path -> mode (0: any)
		entrypoint, cmd, user string
	}{
		// /agnhost-2 is the symlink (mode 0777) the Containers specs run.
		{name: "agnhost", base: build.BaseBusyboxNet, files: map[string]int64{"/agnhost": 0o755, "/agnhost-2": 0o777, "/localhost.crt": 0o644, "/uploads": 0o755, "/etc/passwd": 0o644},
			entrypoint: "/agnhost", cmd: "pause"},
		{name: "kitten", base: build.BaseBusyboxNet, files: map[string]int64{"/agnhost": 0o755, "/kitten.jpg": 0o644, "/data.json": 0o644},
			entrypoint: "/agnhost", cmd: "test-webserver"},
		{name: "nautilus", base: build.BaseBusyboxNet, files: map[string]int64{"/agnhost": 0o755, "/nautilus.jpg": 0o644, "/data.json": 0o644},
			entrypoint: "/agnhost", cmd: "test-webserver"},
		{name: "nonewprivs", base: build.BaseBusybox, files: map[string]int64{"/usr/local/bin/nnp": setuidMode}, cmd: "nnp"},
		{name: "sample-apiserver", base: build.BaseBusybox, files: map[string]int64{"/sample-apiserver": 0o755}, entrypoint: "/sample-apiserver"},
		{name: "regression-issue-74839", base: build.BaseBusybox, files: map[string]int64{"/regression-issue-74839": 0o755}, entrypoint: "/regression-issue-74839"},
		{name: "jessie-dnsutils", base: build.BaseDNSUtils, cmd: "sh"},
		{name: "busybox", base: build.BaseBusybox, cmd: "sh"},
		{name: "nonroot", base: build.BaseBusybox, cmd: "sh", user: nonRootUser},
		{name: "httpd", base: build.BaseBusybox, files: map[string]int64{"/usr/local/apache2/htdocs/index.html": 0o644},
			entrypoint: "/usr/bin/httpd -f -v -p 80 -h /usr/local/apache2/htdocs"},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := testJob(t)
			img, from, err := j.image(ctx, c.name, recipes[c.name])
			if err != nil {
				t.Fatal(err)
			}
			if from == "" {
				t.Error("no built-from text")
			}
			files := imageFiles(t, img)
			if _, ok := files["/etc/base-kind"]; !ok {
				t.Errorf("not on a base: %v", files)
			}
			for p, mode := range c.files {
				if got, ok := files[p]; !ok || got != mode {
					t.Errorf("%s: mode %o (present %v), want %o", p, got, ok, mode)
				}
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			got := []string{strings.Join(cf.Config.Entrypoint, " "), strings.Join(cf.Config.Cmd, " "), cf.Config.User}
			if want := []string{c.entrypoint, c.cmd, c.user}; !slices.Equal(got, want) {
				t.Errorf("entrypoint, cmd, user %q, want %q", got, want)
			}
			// The base: its marker file names the kind.
			rc := mutate.Extract(img)
			defer rc.Close()
			tr := tar.NewReader(rc)
			for {
				h, err := tr.Next()
				if err != nil {
					t.Fatalf("no /etc/base-kind: %v", err)
				}
				if h.Name == "etc/base-kind" {
					data, _ := io.ReadAll(tr)
					if string(data) != c.base {
						t.Errorf("base %s, want %s", data, c.base)
					}
					break
				}
			}
			again, _, err := testJob(t).image(ctx, c.name, recipes[c.name])
			if err != nil {
				t.Fatal(err)
			}
			d1, _ := img.Digest()
			d2, _ := again.Digest()
			if d1 != d2 {
				t.Errorf("digests differ: %s %s", d1, d2)
			}
		})
	}
}

// TestRecipesOf: an image built on another brings that one's program to
// the build and its base to the bases.
func TestRecipesOf(t *testing.T) {
	j := &imagesJob{list: []TestImage{{ID: "Nautilus", Name: "nautilus"}, {ID: "JessieDnsutils", Name: "jessie-dnsutils"}, {ID: "NonRoot", Name: "nonroot"}}}
	if got := j.packages(); !slices.Equal(got, []string{"./test/images/agnhost"}) {
		t.Errorf("packages %q", got)
	}
	if got, want := j.baseKinds(), []string{build.BaseBusybox, build.BaseBusyboxNet, build.BaseDNSUtils}; !slices.Equal(got, want) {
		t.Errorf("bases %q, want %q", got, want)
	}
	for name, r := range recipes {
		if _, ok := recipes[r.On]; r.On != "" && !ok {
			t.Errorf("%s is on %s, which has no recipe", name, r.On)
		}
	}
}
