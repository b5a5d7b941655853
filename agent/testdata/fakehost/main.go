// Command fakehost is the kubelet and the systemctl of the agent's kubelet
// tests (a fake host: this machine's PID 1 is no systemd): a static
// program the agent runs chrooted in the fake host's roots, as it runs the
// real ones. As kubelet it prints its version; as systemctl it writes its
// arguments to /systemctl.log in its root.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

var version = "v0.0.0"

func main() {
	switch filepath.Base(os.Args[0]) {
	case "kubelet":
		if len(os.Args) == 2 && os.Args[1] == "--version" {
			fmt.Println("Kubernetes " + version)
			return
		}
	case "systemctl":
		f, err := os.OpenFile("/systemctl.log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, strings.Join(os.Args[1:], " "))
			err = f.Close()
		}
		if err == nil {
			return
		}
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(2)
}
