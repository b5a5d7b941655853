package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/interrupt"
)

// liveFailureKinds is how many distinct failures are printed on stderr
// as they first happen (all of them are counted in the summary).
const liveFailureKinds = 10

// pace starts one request per tick, 1/o.rate apart, from now until ctx is
// done, then waits for those in flight and summarizes the run. A request
// runs in its own goroutine under its own timeout, on a context that only
// a second interrupt cancels; when inFlightFactor×rate are in flight the
// tick is skipped.
func pace(ctx context.Context, o options, c *client) (*summary, error) {
	rec := newRecorder(time.Now(), o.ready, o.log)
	reqCtx := interrupt.Cleanup(ctx)
	slots := make(chan struct{}, inFlightFactor*o.rate)
	var wg sync.WaitGroup
	send := func() {
		select {
		case slots <- struct{}{}:
		default:
			rec.skip()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			sent := rec.send()
			rctx, cancel := context.WithTimeout(reqCtx, o.timeout)
			defer cancel()
			at := &attempts{}
			err := c.get(rctx, at)
			rec.done(sent, time.Since(sent), err, at)
		}()
	}

	interval := time.Second / time.Duration(o.rate)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	ticks := 1
	send()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-rec.readyFailed:
			break loop
		case <-ticker.C:
			ticks++
			send()
		}
	}
	// A ticker drops the ticks its reader is too late for: here, when
	// this process is starved of CPU. The schedule had one tick at the
	// start and one per interval since.
	scheduled := 1 + int(time.Since(rec.start)/interval)
	wg.Wait()
	if err := rec.readyErr(); err != nil {
		return nil, err
	}
	s := rec.summary(time.Now(), o, c)
	s.Ticks, s.MissedTicks = ticks, max(scheduled-ticks, 0)
	return s, nil
}

// recorder collects what each request did; every method is safe for the
// request goroutines.
type recorder struct {
	start     time.Time
	readyPath string
	log       io.Writer
	// readyFailed is closed when -ready could not be written: the bench
	// waiting for it would wait forever, so the run stops.
	readyFailed chan struct{}

	mu                  sync.Mutex
	ready               time.Time // the first success, zero before
	readyWriteErr       error
	sent, inFlight      int
	maxInFlight         int
	skipped             int
	succeeded, failed   int
	failedBeforeReady   int
	attempts            int
	retriedRequests     int
	succeededAfterRetry int
	latencies           []time.Duration // of the requests that succeeded
	lastSuccess         time.Time
	maxGap              time.Duration
	maxGapEnd           time.Time
	failures, retried   errorCounts
	protocols           map[string]int
	perSecond           []second
}

func newRecorder(start time.Time, readyPath string, log io.Writer) *recorder {
	return &recorder{
		start:       start,
		readyPath:   readyPath,
		log:         log,
		readyFailed: make(chan struct{}),
		failures:    errorCounts{},
		retried:     errorCounts{},
		protocols:   map[string]int{},
	}
}

// skip counts a tick that found every in-flight slot taken.
func (r *recorder) skip() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped++
}

// send counts a request about to be sent and returns when.
func (r *recorder) send() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.sent++
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	r.second(now).Sent++
	return now
}

// second is the per-second count of the second of the run t falls in.
func (r *recorder) second(t time.Time) *second {
	i := int(t.Sub(r.start) / time.Second)
	for len(r.perSecond) <= i {
		r.perSecond = append(r.perSecond, second{Second: len(r.perSecond)})
	}
	return &r.perSecond[i]
}

// done records the outcome of the request sent at sent, which took
// took: err is what client-go returned, at what its transport saw.
func (r *recorder) done(sent time.Time, took time.Duration, err error, at *attempts) {
	retried := at.retried()
	r.mu.Lock()
	now := time.Now()
	r.inFlight--
	r.attempts += at.count()
	if len(retried) > 0 {
		r.retriedRequests++
	}
	for _, e := range retried {
		r.retried.add(e, now)
	}
	at.mu.Lock()
	for _, p := range at.protos {
		r.protocols[p]++
	}
	at.mu.Unlock()
	sec := r.second(sent)
	first := false
	if err != nil {
		r.failed++
		sec.Failed++
		if r.ready.IsZero() {
			r.failedBeforeReady++
		}
		if kinds := len(r.failures); r.failures.add(err.Error(), now) && kinds < liveFailureKinds {
			fmt.Fprintf(r.log, "apiload: %.1fs: a new failure: %s\n", now.Sub(r.start).Seconds(), normalizeError(err.Error()))
		}
	} else {
		r.succeeded++
		sec.Succeeded++
		if len(retried) > 0 {
			r.succeededAfterRetry++
		}
		r.latencies = append(r.latencies, took)
		if !r.lastSuccess.IsZero() && now.Sub(r.lastSuccess) > r.maxGap {
			r.maxGap, r.maxGapEnd = now.Sub(r.lastSuccess), now
		}
		r.lastSuccess = now
		if r.ready.IsZero() {
			r.ready, first = now, true
		}
	}
	r.mu.Unlock()
	if first && r.readyPath != "" {
		r.touchReady(now)
	}
}

// touchReady writes -ready (the time of the first success in it), once.
func (r *recorder) touchReady(at time.Time) {
	err := atomicfile.Write(r.readyPath, []byte(at.UTC().Format(time.RFC3339Nano)+"\n"), 0o644, "")
	if err == nil {
		return
	}
	r.mu.Lock()
	r.readyWriteErr = fmt.Errorf("-ready: %w (give a file in a writable directory)", err)
	r.mu.Unlock()
	close(r.readyFailed)
}

func (r *recorder) readyErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readyWriteErr
}
