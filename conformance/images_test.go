package conformance

import (
	"archive/tar"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
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
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: mtime %s", h.Name, h.ModTime)
		}
		names = append(names, h.Name)
	}
	want := "etc/ etc/group etc/passwd localhost.key uploads/"
	if strings.Join(names, " ") != want {
		t.Errorf("entries %q, want %q", strings.Join(names, " "), want)
	}
}
