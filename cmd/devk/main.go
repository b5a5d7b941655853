// Command devk is a toolchain for hacking on Kubernetes itself: get a tree,
// build one component, push its image, hot-swap it into a throwaway
// cluster, verify the digest, and see what it wrote to etcd.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/phase"
	"github.com/spf13/cobra"
)

func main() {
	cobra.EnableCommandSorting = false // the help lists commands in the order of the loop
	ctx, stop := interrupt.Handle(context.Background())
	defer stop()
	err := newRootCmd(os.Stdout, os.Stderr, os.Args[1:]).ExecuteContext(ctx)
	if err == nil {
		return
	}
	if interrupt.Interrupted(ctx) {
		fmt.Fprintln(os.Stderr, "devk: interrupted:", err)
		os.Exit(ExitInterrupted)
	}
	var ec exitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "devk:", msg)
		}
		os.Exit(ec.ExitCode())
	}
	// A failed phase was shown by the reporter already (a compile error
	// can be many lines): name it, do not repeat it.
	var pf *phase.Failed
	if errors.As(err, &pf) && err == error(pf) {
		fmt.Fprintf(os.Stderr, "devk: phase %s failed (see above)\n", pf.Path)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "devk:", err)
	os.Exit(1)
}

// ExitInterrupted is the exit status after Ctrl-C (SIGINT or SIGTERM),
// as shells report a command killed by SIGINT.
const ExitInterrupted = 130

// exitCoder is an error that asks for a specific exit status.
type exitCoder interface {
	error
	ExitCode() int
}
