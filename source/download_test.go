package source

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/devk/devk/internal/progress"
)

// statuses records the Progress a reporter receives, by step.
type statuses struct {
	progress.Reporter
	mu sync.Mutex
	by map[string][]progress.Status
}

func (s *statuses) Progress(step string, st progress.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.by[step] = append(s.by[step], st)
}

// TestDownloadProgress downloads a module with the real go command from
// a file:// proxy: the download reports bytes for its step, and what it
// measures is where go puts the zip. A zip being downloaded is a file
// <version>.zip<n>.tmp beside it (go's modfetch); one is planted for a
// module not downloaded yet.
func TestDownloadProgress(t *testing.T) {
	fileProxy(t)
	rep := &statuses{Reporter: progress.Discard(), by: map[string][]progress.Status{}}
	ctx := progress.WithStep(context.Background(), "download")
	res, err := goModDownload(ctx, rep, "k8s.io/kubernetes@v1.34.0")
	if err != nil || res["k8s.io/kubernetes"].Dir == "" {
		t.Fatalf("go mod download: %v %+v", err, res)
	}
	rep.mu.Lock()
	got := rep.by["download"]
	rep.mu.Unlock()
	if len(got) == 0 || got[0].Verb != "downloaded" || got[0].Unit != progress.Bytes {
		t.Fatalf("progress = %+v, want downloaded bytes for the download step", rep.by)
	}

	cache := os.Getenv("GOMODCACHE")
	zip, err := zipPath(cache, "k8s.io/kubernetes@v1.34.0")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(zip)
	if err != nil {
		t.Fatalf("the zip is not where watchDownload looks: %v", err)
	}
	partial, err := zipPath(cache, "k8s.io/client-go@v0.34.0")
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.MkdirAll(filepath.Dir(partial), 0o755))
	must(t, os.WriteFile(partial+"123456789.tmp", []byte(strings.Repeat("x", 5000)), 0o644))
	bytes, complete := downloaded([]string{zip, partial})
	if bytes != fi.Size()+5000 || complete != 1 {
		t.Fatalf("downloaded = %d bytes, %d complete; want %d, 1", bytes, complete, fi.Size()+5000)
	}
}
