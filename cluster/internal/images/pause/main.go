// Command pause is the pod sandbox's process: it holds the pod's
// namespaces and does nothing until told to stop. devk builds it
// (CGO_ENABLED=0, static), puts it in an image with no base layer and
// pushes it to the cluster's registry as the sandbox image. It uses the
// standard library only, so devk can build it from its embedded source
// anywhere Go is installed.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// -v prints a version and exits, as the project's pause does:
	// kubeadm's upgrade health check runs the pause image as a Job with
	// it and waits for the Job to complete.
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("devk pause")
		return
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of the sandbox it may inherit orphans: reap them.
	child := make(chan os.Signal, 8)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-child:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
