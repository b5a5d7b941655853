package agent

import (
	"debug/elf"
	"fmt"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
)

const (
	// Repo is the agent image's repository in a registry.
	Repo = "devk-agent"
	// BinaryPath is where the agent image holds devk.
	BinaryPath = "/usr/local/bin/devk"
)

// RequireStatic refuses a devk binary that needs a dynamic loader: the
// agent image has no libc, only devk.
func RequireStatic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("the node agent runs this devk (%s): %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("the node agent runs this devk (%s) in an image without libc, and it is dynamically linked (built with cgo): build devk with CGO_ENABLED=0 (make build does)", bin)
		}
	}
	return nil
}

// Image is the agent image of devk binary bin: one layer holding it at
// BinaryPath, no base, created at time 0, so its digest is a function of
// the binary (and version, its label) alone. Layers are cached in
// cacheDir by the binary's sha256.
func Image(cacheDir, bin, version string) (v1.Image, error) {
	if err := RequireStatic(bin); err != nil {
		return nil, err
	}
	sum, err := build.FileSHA256(bin)
	if err != nil {
		return nil, err
	}
	layer, _, err := image.NewLayerCache(cacheDir).LayerAt(bin, BinaryPath, sum, types.OCILayer)
	if err != nil {
		return nil, fmt.Errorf("the node agent's image: %w", err)
	}
	return image.Assemble(image.Spec{Binary: "devk", Path: BinaryPath, Cmd: []string{"agent"}, Platform: "linux/" + runtime.GOARCH,
		Created: time.Unix(0, 0).UTC(), Version: version}, layer)
}
