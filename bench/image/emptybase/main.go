// Command emptybase pushes a linux/amd64 image with no layers to a
// loopback registry, for ko to use as its base in the image benchmark (ko
// needs a base image; devk's images have none, and the benchmark sends
// nothing off the machine).
package main

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/image"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: emptybase 127.0.0.1:PORT/REPO:TAG")
		os.Exit(2)
	}
	if err := push(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "emptybase:", err)
		os.Exit(1)
	}
}

func push(s string) error {
	ref, err := name.ParseReference(s)
	if err != nil {
		return err
	}
	if !image.IsLoopback(ref.Context().RegistryStr()) {
		return fmt.Errorf("%s is not a loopback registry", ref.Context().RegistryStr())
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}})
	if err != nil {
		return err
	}
	return remote.Write(ref, img)
}
