package images

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/source"
)

//go:embed pause/main.go
var pauseSource []byte

const (
	pauseRepo = "pause"
	pauseTag  = "devk"
)

// Pause builds the pause program from its embedded source (cached under
// cacheDir by the source's and Go's version) and makes its image,
// deterministic, and the reference containerd is configured with:
// <registry>/pause@sha256:….
func Pause(ctx context.Context, cacheDir, registry string) (v1.Image, string, error) {
	goVersion := runtime.Version()
	if out, err := execx.Output(ctx, source.SelfGo("env", "GOVERSION")); err == nil {
		goVersion = strings.TrimSpace(string(out))
	}
	sum := sha256.Sum256(append(append([]byte{}, pauseSource...), goVersion+runtime.GOARCH...))
	key := hex.EncodeToString(sum[:])[:16]
	dir := filepath.Join(cacheDir, key)
	bin := filepath.Join(dir, "pause")
	if _, err := os.Stat(bin); err != nil {
		src := filepath.Join(dir, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(filepath.Join(src, "main.go"), pauseSource, 0o644); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module devk.local/pause\n\ngo 1.21\n"), 0o644); err != nil {
			return nil, "", err
		}
		cmd := execx.Cmd{Name: "go", Args: []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", bin + ".tmp", "."},
			Dir: src, Env: []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH, "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local"}}
		if err := execx.Run(ctx, cmd); err != nil {
			return nil, "", fmt.Errorf("build the pause program (needs Go): %w", err)
		}
		if err := os.Rename(bin+".tmp", bin); err != nil {
			return nil, "", err
		}
	}
	binSHA, err := build.FileSHA256(bin)
	if err != nil {
		return nil, "", err
	}
	cache := image.NewLayerCache(dir)
	layer, _, err := cache.Layer(bin, "pause", binSHA, types.OCILayer)
	if err != nil {
		return nil, "", err
	}
	img, err := image.Assemble(image.Spec{Binary: "pause", Platform: "linux/" + runtime.GOARCH, Created: time.Unix(0, 0).UTC(), Version: "devk"}, layer)
	if err != nil {
		return nil, "", err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, "", err
	}
	return img, registry + "/" + pauseRepo + "@" + d.String(), nil
}

// PushPause pushes the pause image (Pause's) to registry as
// <registry>/pause:devk (the tag only names it for people; containerd
// pulls it by digest) and returns its reference by digest.
func PushPause(ctx context.Context, cacheDir, registry string, o image.RemoteOptions) (string, error) {
	img, _, err := Pause(ctx, cacheDir, registry)
	if err != nil {
		return "", err
	}
	r, err := image.NewRemote(registry, o)
	if err != nil {
		return "", err
	}
	ref, err := r.PushTagged(ctx, pauseRepo, pauseTag, img)
	if err != nil {
		return "", fmt.Errorf("push the pause image: %w", err)
	}
	return ref, nil
}
