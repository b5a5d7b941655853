// A stand-in for kube-apiserver: it prints the version it was stamped with.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/component-base/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("Kubernetes " + version.Get().GitVersion)
		return
	}
	json.NewEncoder(os.Stdout).Encode(version.Get())
}
