// Command rmp is the CRI calls `crictl rmp -f` makes (StopPodSandbox, then
// RemovePodSandbox) for the pod sandboxes whose name matches a regular
// expression: kubespray's restart of the control plane after renewing
// certificates (`crictl pods --name 'kube-scheduler-*|…' -q | xargs crictl
// rmp -f`), for bench/certs to time on machines without cri-tools.
//
//	rmp SOCKET REGEXP
package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/devk/devk/internal/cri"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: rmp SOCKET REGEXP")
		os.Exit(2)
	}
	re, err := regexp.Compile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmp:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := cri.Dial(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmp:", err)
		os.Exit(1)
	}
	defer rt.Close()
	sbs, err := rt.Sandboxes(ctx, "kube-system")
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmp:", err)
		os.Exit(1)
	}
	n := 0
	for _, s := range sbs {
		if !re.MatchString(s.PodName) {
			continue
		}
		if err := rt.RemoveSandbox(ctx, s.ID); err != nil {
			fmt.Fprintln(os.Stderr, "rmp:", err)
			os.Exit(1)
		}
		n++
	}
	fmt.Printf("removed %d pod sandboxes\n", n)
}
