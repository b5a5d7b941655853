// Command devk is a toolchain for hacking on Kubernetes itself: get a tree,
// build one component, push its image, hot-swap it into a throwaway
// cluster, verify the digest, and see what it wrote to etcd.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/cmd/devk/internal/systemctl"
	"github.com/devk/devk/internal/interrupt"
	"github.com/devk/devk/phase"
)

func main() {
	// client-go logs through klog errors it also returns (a stream's
	// end, a port-forward's refused connection): devk says what failed
	// itself.
	utilruntime.ErrorHandlers = nil
	ctx, stop := interrupt.Handle(context.Background())
	var code int
	if systemctl.Invoked(os.Args[0]) {
		// A node's init system (the systemctl link in its bin dir and
		// over the host's systemctl inside it), not the CLI.
		code = systemctl.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, version)
	} else {
		code = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}

// run runs devk with args and returns its exit status, having said on
// stderr why it is not 0.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := newRootCmd(stdout, stderr, args).ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if interrupt.Interrupted(ctx) {
		fmt.Fprintln(stderr, "devk: interrupted:", err)
		return cli.ExitInterrupted
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "devk:", msg)
		}
		return ec.ExitCode()
	}
	// A failed phase was shown by the reporter already (a compile error
	// can be many lines): name it, do not repeat it.
	var pf *phase.Failed
	if errors.As(err, &pf) && err == error(pf) {
		fmt.Fprintf(stderr, "devk: phase %s failed (see above)\n", pf.Path)
		return cli.ExitFailure
	}
	fmt.Fprintln(stderr, "devk:", err)
	return cli.ExitFailure
}

// version is set with -ldflags "-X main.version=..." by `make build`.
var version = cli.DevVersion
