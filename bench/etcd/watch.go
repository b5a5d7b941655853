package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/etcdwatch/etcdtest"
)

const (
	// watchSettle lets the watch connect before the writes start (it
	// starts at the next revision either way: nothing is missed, but
	// early events would count the connection time).
	watchSettle = 500 * time.Millisecond
	// watchWriters send the events, each at its scheduled time, so that
	// one slow write does not hold back the rate.
	watchWriters = 8
	// watchKeys are the configmaps written in turn: each write after the
	// first round is a MODIFIED event.
	watchKeys = 100
	// printedTimeout bounds the wait for the last events to be printed;
	// printedPoll is how often it looks.
	printedTimeout = 30 * time.Second
	printedPoll    = 10 * time.Millisecond
	// watchNamespace holds the configmaps written.
	watchNamespace = "bench-watch"
)

type watchResult struct {
	written, printed int
	rate             float64
	p50, p99, max    time.Duration
}

// printedAt records when the watch printer wrote each revision's event.
type printedAt struct {
	mu sync.Mutex
	at map[int64]time.Time
}

var revRE = regexp.MustCompile(`^(?:ADDED|MODIFIED|DELETED)\S* \S+ \S+ \(revision (?:\d+ -> )?(\d+)`)

func (p *printedAt) Write(b []byte) (int, error) {
	now := time.Now()
	// the printer writes one whole event per Write; its first line is
	// the header naming the revision
	line, _, _ := bytes.Cut(b, []byte("\n"))
	if m := revRE.FindSubmatch(line); m != nil {
		rev, _ := strconv.ParseInt(string(m[1]), 10, 64)
		p.mu.Lock()
		p.at[rev] = now
		p.mu.Unlock()
	}
	return len(b), nil
}

func (p *printedAt) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.at)
}

// measureWatch writes configmap updates at a steady rate while
// etcdwatch.Watch (the code `devk etcd watch` runs) prints them, and
// measures from just before each write to the moment its event is
// printed.
func measureWatch(ctx context.Context, endpoint string, rate int, duration time.Duration) (watchResult, error) {
	var res watchResult
	cli, err := newClient(endpoint)
	if err != nil {
		return res, err
	}
	defer cli.Close()
	from, err := currentRev(ctx, cli)
	if err != nil {
		return res, err
	}
	out := &printedAt{at: map[int64]time.Time{}}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- etcdwatch.Watch(wctx, watchOptions(endpoint, from+1, out)) }()
	time.Sleep(watchSettle)

	total := int(duration.Seconds() * float64(rate))
	writtenAt, elapsed, err := writeAtRate(ctx, cli, total, rate)
	if err != nil {
		return res, err
	}
	res.written = total
	res.rate = float64(total) / elapsed.Seconds()
	waitPrinted(ctx, out, total)
	cancel()
	if err := <-done; err != nil {
		return res, fmt.Errorf("watch: %w", err)
	}
	return latencies(res, writtenAt, out)
}

func watchOptions(endpoint string, from int64, out *printedAt) etcdwatch.WatchOptions {
	return etcdwatch.WatchOptions{Query: benchQuery(endpoint, out), FromRev: from, Exclude: etcdwatch.DefaultExclude}
}

// writeAtRate writes total configmap updates on a schedule of rate per
// second, and returns when each revision was written and how long the
// writing took.
func writeAtRate(ctx context.Context, cli *clientv3.Client, total, rate int) (map[int64]time.Time, time.Duration, error) {
	writtenAt := make(map[int64]time.Time, total)
	var mu sync.Mutex
	interval := time.Second / time.Duration(rate)
	jobs := make(chan int, 64)
	errs := make(chan error, watchWriters)
	var wg sync.WaitGroup
	for w := 0; w < watchWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				cm := etcdtest.ConfigMap(watchNamespace, fmt.Sprintf("cm-%02d", i%watchKeys), i)
				value := etcdtest.MustEncode(cm)
				t0 := time.Now()
				resp, err := cli.Put(ctx, "/registry/configmaps/"+watchNamespace+"/"+cm.Name, string(value))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				writtenAt[resp.Header.Revision] = t0
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	for i := 0; i < total; i++ {
		// a schedule, not a poll: each event goes at its own time
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, 0, err
	default:
	}
	return writtenAt, time.Since(start), nil
}

// waitPrinted waits until total events are printed, or printedTimeout
// passes: the events not printed by then count as lost.
func waitPrinted(ctx context.Context, out *printedAt, total int) {
	_ = wait.PollUntilContextTimeout(ctx, printedPoll, printedTimeout, true, func(context.Context) (bool, error) {
		return out.count() >= total, nil
	})
}

// latencies fills the percentiles of write-to-printed times.
func latencies(res watchResult, writtenAt map[int64]time.Time, out *printedAt) (watchResult, error) {
	out.mu.Lock()
	defer out.mu.Unlock()
	var lat []time.Duration
	for rev, t0 := range writtenAt {
		if t1, ok := out.at[rev]; ok {
			lat = append(lat, t1.Sub(t0))
		}
	}
	res.printed = len(lat)
	if len(lat) == 0 {
		return res, fmt.Errorf("no watch event printed")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.p50 = lat[len(lat)/2]
	res.p99 = lat[(len(lat)*99)/100]
	res.max = lat[len(lat)-1]
	return res, nil
}
