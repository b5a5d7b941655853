// A stand-in for agnhost, a test image's program built from the tree: it
// prints the version it was stamped with.
package main

import (
	"encoding/json"
	"os"

	"k8s.io/component-base/version"
)

func main() {
	json.NewEncoder(os.Stdout).Encode(version.Get())
}
