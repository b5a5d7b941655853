// Command apiload is the load client of the rolling API server swap
// bench: it sends GETs at a steady rate through the cluster's load
// balancer (HAProxy in front of the API servers) while `devk swap
// apiserver` replaces them one node at a time, and says how many
// failed, how many client-go retried, the latencies and the longest
// time without a successful response.
//
//	apiload -kubeconfig $DEVK_HOME/clusters/devk/admin.conf -rate 50 \
//	  -ready $WORK/load.ready -out $WORK/load.json &
//	until [ -e $WORK/load.ready ]; do sleep 0.1; done
//	devk swap apiserver ...
//	kill -INT $!; wait $!
//
// Every tick of a ticker (1/rate apart) starts one request, in its own
// goroutine, so a slow request does not hold back the schedule; at most
// inFlightFactor×rate are in flight, and a tick that finds them all busy
// is counted as skipped rather than queued. The first SIGINT or SIGTERM
// (or the end of -duration) stops the ticks; the requests in flight
// finish (each is bounded by -timeout) and the summary is written: JSON
// to -out (stdout without it) and one line on stderr. A second signal
// cancels the requests in flight, which then count as failed.
//
// The exit status is 0 when the run completed, whatever it counted (the
// bench reads the JSON), and 1 when it could not run or write its
// summary.
//
// The files: client.go makes the clientset (-mode) and watches its
// transport, load.go paces the requests and records each, summary.go
// turns the records into the summary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/devk/devk/internal/interrupt"
)

// The defaults of the flags, and their limits.
const (
	// defaultRate is the bench's 50 requests a second.
	defaultRate = 50
	// maxRate keeps the ticker's interval far above the scheduler's
	// granularity and the in-flight cap within reason for one process.
	maxRate = 10000
	// defaultTimeout bounds each request, client-go's retries included.
	defaultTimeout = 10 * time.Second
	// inFlightFactor×rate is the most requests in flight at once: a
	// whole 4 s of requests hanging on an unreachable server before
	// ticks are skipped.
	inFlightFactor = 4
	// qpsHeadroom×rate is client-go's token bucket rate (its burst is
	// the in-flight cap), so its rate limiter never delays a request the
	// ticker sends.
	qpsHeadroom = 2
)

// Modes of -mode.
const (
	// modeShared is one clientset for the whole run, as a controller
	// has: its HTTP/2 connection to the load balancer is reused by every
	// request until it breaks.
	modeShared = "shared"
	// modeFresh dials a new TCP connection and TLS session for every
	// request (keep-alives disabled), as a new kubectl would.
	modeFresh = "fresh"
)

// options are the flags of one run.
type options struct {
	kubeconfig string
	rate       int
	duration   time.Duration
	timeout    time.Duration
	out        string
	mode       string
	ready      string
	write      bool
	// url, when set, is a plain HTTP URL each request GETs instead of
	// the API (a Service's NodePort), on a new connection each time.
	url string
	// log gets the progress lines: the start, each new kind of failure.
	log io.Writer
}

func main() {
	o := options{log: os.Stderr}
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "the cluster's admin kubeconfig, whose server is the load balancer (required)")
	flag.IntVar(&o.rate, "rate", defaultRate, "requests per second, one per tick")
	flag.DurationVar(&o.duration, "duration", 0, "stop after this long (0: at SIGINT or SIGTERM)")
	flag.DurationVar(&o.timeout, "timeout", defaultTimeout, "bound on each request, client-go's retries included")
	flag.StringVar(&o.out, "out", "", "write the JSON summary to this file (default: stdout)")
	flag.StringVar(&o.mode, "mode", modeShared, "shared: one clientset and its HTTP/2 connection; fresh: a new TCP+TLS connection per request")
	flag.BoolVar(&o.write, "write", false, "send writes (a merge patch of PodTemplate default/apiload, which must exist) instead of GETs")
	flag.StringVar(&o.url, "url", "", "GET this plain HTTP URL (a Service's NodePort at a node address) instead of the API, a new connection per request; -kubeconfig is then not read")
	flag.StringVar(&o.ready, "ready", "", "create this file once the first request has succeeded (an old one is removed at start)")
	flag.Parse()
	if err := mainErr(o); err != nil {
		fmt.Fprintln(os.Stderr, "apiload:", err)
		os.Exit(1)
	}
}

func mainErr(o options) error {
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: every setting is a flag (-h lists them)", flag.Args())
	}
	if err := o.validate(); err != nil {
		return err
	}
	ctx, stop := interrupt.Handle(context.Background())
	defer stop()
	s, err := run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "apiload:", s.line())
	return writeSummary(s, o.out)
}

// validate checks the flags before anything connects.
func (o options) validate() error {
	switch {
	case o.url != "" && o.write:
		return errors.New("-url and -write: a plain HTTP GET has no write")
	case o.kubeconfig == "" && o.url == "":
		return errors.New("-kubeconfig is required: the cluster's admin.conf, whose server is the load balancer ($DEVK_HOME/clusters/<cluster>/admin.conf)")
	case o.rate < 1 || o.rate > maxRate:
		return fmt.Errorf("-rate %d: give requests per second from 1 to %d", o.rate, maxRate)
	case o.duration < 0:
		return fmt.Errorf("-duration %s: give a positive duration, or 0 to run until SIGINT or SIGTERM", o.duration)
	case o.timeout <= 0:
		return fmt.Errorf("-timeout %s: give a positive duration such as %s", o.timeout, defaultTimeout)
	case o.mode != modeShared && o.mode != modeFresh:
		return fmt.Errorf("-mode %q: give %s (one clientset) or %s (a connection per request)", o.mode, modeShared, modeFresh)
	}
	return nil
}

// run sends the load until ctx is done or o.duration has passed, and
// returns its summary. The requests in flight when it stops run on under
// interrupt.Cleanup(ctx): a second interrupt cancels them.
func run(ctx context.Context, o options) (*summary, error) {
	if o.ready != "" {
		if err := os.Remove(o.ready); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("-ready %s: remove the one of an earlier run: %w", o.ready, err)
		}
	}
	c, err := newClient(o)
	if err != nil {
		return nil, err
	}
	until := "until SIGINT or SIGTERM"
	if o.duration > 0 {
		until = "for " + o.duration.String()
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	fmt.Fprintf(o.log, "apiload: %s through %s, %d/s, %s mode, %s\n", c.request, c.server, o.rate, o.mode, until)
	return pace(ctx, o, c)
}
