// A stand-in for kubectl: it prints the client version it was stamped with.
package main

import (
	"encoding/json"
	"os"

	"k8s.io/client-go/pkg/version"
)

func main() {
	json.NewEncoder(os.Stdout).Encode(map[string]any{"clientVersion": version.Get()})
}
