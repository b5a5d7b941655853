// Command etcd-bench measures `devk etcd diff` against a full
// dump-and-diff, and `devk etcd watch` latency, on an etcd holding
// protobuf objects encoded as kube-apiserver stores them. It prints a
// markdown table on stdout; bench/etcd/run wraps it with the machine
// header.
//
// etcd runs in a child process (this program with -serve), so that what
// is measured here is the client side only, as a user's devk would be.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/etcdwatch/etcdtest"
)

func main() {
	var (
		serve    = flag.String("serve", "", "internal: run etcd with its data in this directory and print its endpoint")
		change   = flag.String("change", "", "internal: make the 2-key change on the etcd at this endpoint (the command `devk etcd diff` runs)")
		round    = flag.Int("round", 0, "internal: with -change, which change")
		preload  = flag.Int("preload", 0, "with -serve, load this many objects first (to try devk etcd by hand)")
		work     = flag.String("work", os.TempDir(), "directory for etcd's data")
		devk     = flag.String("devk", os.Getenv("DEVK_BIN"), "devk binary, to time the CLI as well")
		sizes    = flag.String("sizes", "1000,10000", "database sizes (objects) to measure diff at")
		runs     = flag.Int("runs", 5, "runs per diff measure (median reported)")
		rate     = flag.Int("rate", 1000, "watch events per second")
		duration = flag.Duration("duration", 5*time.Second, "how long to write at that rate")
	)
	flag.Parse()
	if *change != "" {
		cli, err := newClient(*change)
		if err == nil {
			_, err = changeTwoKeys(context.Background(), cli, *round)
			cli.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "etcd-bench:", err)
			os.Exit(1)
		}
		return
	}
	if *serve != "" {
		if err := serveEtcd(*serve, *preload); err != nil {
			fmt.Fprintln(os.Stderr, "etcd-bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*work, *devk, *sizes, *runs, *rate, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-bench:", err)
		os.Exit(1)
	}
}

// serveEtcd runs until stdin closes.
func serveEtcd(dir string, preload int) error {
	srv, err := etcdtest.Start(dir)
	if err != nil {
		return err
	}
	defer srv.Close()
	if preload > 0 {
		cli, err := newClient(srv.Endpoint)
		if err != nil {
			return err
		}
		err = etcdtest.Put(context.Background(), cli, etcdtest.Objects(preload))
		cli.Close()
		if err != nil {
			return err
		}
	}
	fmt.Println("ENDPOINT", srv.Endpoint)
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// server is etcd in a child process.
type server struct {
	endpoint string
	cmd      *exec.Cmd
	stdin    io.Closer
}

func startServer(dir string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-serve", dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ENDPOINT ") {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("etcd child did not start: %q %v", line, err)
	}
	return &server{endpoint: strings.TrimSpace(strings.TrimPrefix(line, "ENDPOINT ")), cmd: cmd, stdin: stdin}, nil
}

func (s *server) stop() {
	s.stdin.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// timeBin is GNU time (Debian package "time"), for the max RSS of the CLI.
const timeBin = "/usr/bin/time"

// sizeResult holds the diff measures at one database size.
type sizeResult struct {
	objects      int
	storedBytes  int64
	diff, dump   time.Duration // medians
	since        time.Duration // median of --since-rev (history) mode
	diffAlloc    uint64        // bytes allocated by one run
	dumpAlloc    uint64
	diffPeak     uint64 // peak heap growth during one run
	dumpPeak     uint64
	cli          time.Duration // median wall time of `devk etcd diff -- <change command>`
	cliChange    time.Duration // median wall time of the change command alone
	cliRSS       int64         // devk's max RSS (--since-rev runs), bytes
	changedFound int
}

func run(work, devk, sizes string, runs, rate int, duration time.Duration) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp(work, "etcd-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var results []sizeResult
	var watch watchResult
	for i, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-sizes: %w", err)
		}
		srv, err := startServer(filepath.Join(dir, fmt.Sprintf("etcd-%d", n)))
		if err != nil {
			return err
		}
		r, err := measureDiff(ctx, srv.endpoint, n, runs, devk)
		if err == nil && i == len(strings.Split(sizes, ","))-1 {
			watch, err = measureWatch(ctx, srv.endpoint, rate, duration)
		}
		srv.stop()
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	var baseRSS int64
	if devk != "" {
		if baseRSS, err = maxRSS(exec.Command(timeBin, "-f", "maxrss_kb=%M", devk, "version")); err != nil {
			return err
		}
	}
	report(os.Stdout, results, watch, runs, rate, duration, devk != "", baseRSS)
	return nil
}

func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallRecvMsgSize: 256 << 20})
}

// the two keys each change touches: a pod's label and a service's port.
func changeTwoKeys(ctx context.Context, cli *clientv3.Client, round int) ([]string, error) {
	podKey := "/registry/pods/ns-0/obj-00000"
	svcKey := "/registry/services/specs/ns-1/obj-00001"
	pod := etcdtest.Pod("ns-0", "obj-00000", 0)
	pod.Labels["round"] = strconv.Itoa(round)
	svc := etcdtest.Service("ns-1", "obj-00001", 1)
	svc.Spec.Ports[0].Port = int32(1000 + round)
	_, err := cli.Txn(ctx).Then(
		clientv3.OpPut(podKey, string(etcdtest.MustEncode(pod))),
		clientv3.OpPut(svcKey, string(etcdtest.MustEncode(svc))),
	).Commit()
	return []string{podKey, svcKey}, err
}

func diffOptions(endpoint string, since int64, out io.Writer) etcdwatch.DiffOptions {
	ignore, _ := etcdwatch.ParseFieldPaths([]string{"metadata.managedFields"})
	return etcdwatch.DiffOptions{Query: etcdwatch.Query{Conn: etcdwatch.ConnOptions{Endpoints: []string{endpoint}, Home: "/nonexistent", KubeadmDir: "/nonexistent"}, Decode: etcdwatch.DecodeOptions{Ignore: ignore}, Out: out}, SinceRev: since, Exclude: etcdwatch.DefaultExclude}
}

func currentRev(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, "\x00", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// devkDiff times `devk etcd diff` around a change made in-process
// (DiffOptions.Action): connect, record the revision, start recording,
// make the change, read the revision, fold, decode and print. The change
// itself is not counted, as for the dump below.
func devkDiff(ctx context.Context, endpoint string, round int) (time.Duration, string, error) {
	var out bytes.Buffer
	var inChange time.Duration
	o := diffOptions(endpoint, 0, &out)
	o.Action = func(ctx context.Context) error {
		t0 := time.Now()
		cli, err := newClient(endpoint)
		if err != nil {
			return err
		}
		defer cli.Close()
		_, err = changeTwoKeys(ctx, cli, round)
		inChange = time.Since(t0)
		return err
	}
	t0 := time.Now()
	err := etcdwatch.Diff(ctx, o)
	return time.Since(t0) - inChange, out.String(), err
}

// devkDiffSince times `devk etcd diff --since-rev`: the change is already
// in etcd's history. etcd serves a watch that starts in the past on its
// next history sync, every 100 ms, which dominates this time.
func devkDiffSince(ctx context.Context, cli *clientv3.Client, endpoint string, round int) (time.Duration, string, error) {
	since, err := currentRev(ctx, cli)
	if err != nil {
		return 0, "", err
	}
	if _, err := changeTwoKeys(ctx, cli, round); err != nil {
		return 0, "", err
	}
	var out bytes.Buffer
	t0 := time.Now()
	err = etcdwatch.Diff(ctx, diffOptions(endpoint, since, &out))
	return time.Since(t0), out.String(), err
}

func checkTwoKeys(out string) error {
	if !strings.Contains(out, "# 2 keys changed") || !strings.Contains(out, "MODIFIED pods ns-0/obj-00000") || !strings.Contains(out, "MODIFIED services ns-1/obj-00001") {
		return fmt.Errorf("devk etcd diff found something else than the 2 changed keys:\n%s", out)
	}
	return nil
}

// dumpAndDiff is the naive alternative: read and decode every key before
// and after the change, and diff the ones that differ.
func dumpAndDiff(ctx context.Context, cli *clientv3.Client, n, round int) (time.Duration, int, error) {
	ignore, _ := etcdwatch.ParseFieldPaths([]string{"metadata.managedFields"})
	dopts := etcdwatch.DecodeOptions{Ignore: ignore}
	dump := func() (map[string]string, error) {
		m := make(map[string]string, n)
		start, end := "/registry/", clientv3.GetPrefixRangeEnd("/registry/")
		for {
			resp, err := cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(1000))
			if err != nil {
				return nil, err
			}
			for _, kv := range resp.Kvs {
				m[string(kv.Key)] = etcdwatch.Decode(kv.Value, dopts).Render(etcdwatch.YAML)
			}
			if !resp.More || len(resp.Kvs) == 0 {
				return m, nil
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	t0 := time.Now()
	before, err := dump()
	if err != nil {
		return 0, 0, err
	}
	took := time.Since(t0)
	if _, err := changeTwoKeys(ctx, cli, round); err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	after, err := dump()
	if err != nil {
		return 0, 0, err
	}
	changed := 0
	var sink int
	for k, a := range after {
		if b, ok := before[k]; !ok || a != b {
			changed++
			sink += len(etcdwatch.UnifiedDiff(k, k, b, a))
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			changed++
		}
	}
	_ = sink
	return took + time.Since(t1), changed, nil
}

// measureMem runs f once and reports bytes allocated and the peak growth
// of the live heap while it ran.
func measureMem(f func() error) (alloc, peak uint64, err error) {
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var maxHeap atomic.Uint64
	maxHeap.Store(m0.HeapAlloc)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > maxHeap.Load() {
					maxHeap.Store(m.HeapAlloc)
				}
			}
		}
	}()
	err = f()
	close(stop)
	wg.Wait()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	if m1.HeapAlloc > maxHeap.Load() {
		maxHeap.Store(m1.HeapAlloc)
	}
	return m1.TotalAlloc - m0.TotalAlloc, maxHeap.Load() - m0.HeapAlloc, err
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func measureDiff(ctx context.Context, endpoint string, n, runs int, devk string) (sizeResult, error) {
	r := sizeResult{objects: n}
	cli, err := newClient(endpoint)
	if err != nil {
		return r, err
	}
	defer cli.Close()
	fmt.Fprintf(os.Stderr, "etcd-bench: loading %d objects\n", n)
	objs := etcdtest.Objects(n)
	for _, v := range objs {
		r.storedBytes += int64(len(v))
	}
	if err := etcdtest.Put(ctx, cli, objs); err != nil {
		return r, err
	}
	objs = nil
	fmt.Fprintf(os.Stderr, "etcd-bench: diff vs dump-and-diff at %d objects\n", n)
	round := 0
	var diffs, sinces, dumps, clis, changes []time.Duration
	for i := 0; i < runs; i++ {
		round++
		d, out, err := devkDiff(ctx, endpoint, round)
		if err == nil {
			err = checkTwoKeys(out)
		}
		if err != nil {
			return r, fmt.Errorf("devk diff: %w", err)
		}
		diffs = append(diffs, d)
		round++
		d, out, err = devkDiffSince(ctx, cli, endpoint, round)
		if err == nil {
			err = checkTwoKeys(out)
		}
		if err != nil {
			return r, fmt.Errorf("devk diff --since-rev: %w", err)
		}
		sinces = append(sinces, d)
		round++
		d, changed, err := dumpAndDiff(ctx, cli, n, round)
		if err != nil {
			return r, fmt.Errorf("dump and diff: %w", err)
		}
		if changed != 2 {
			return r, fmt.Errorf("dump and diff found %d changed keys, want 2", changed)
		}
		r.changedFound = changed
		dumps = append(dumps, d)
	}
	r.diff, r.since, r.dump = median(diffs), median(sinces), median(dumps)

	round++
	if r.diffAlloc, r.diffPeak, err = measureMem(func() error { _, _, err := devkDiff(ctx, endpoint, round); return err }); err != nil {
		return r, err
	}
	round++
	if r.dumpAlloc, r.dumpPeak, err = measureMem(func() error { _, _, err := dumpAndDiff(ctx, cli, n, round); return err }); err != nil {
		return r, err
	}

	if devk != "" {
		if _, err := os.Stat(timeBin); err != nil {
			return r, fmt.Errorf("%s is missing: apt-get install time, or run without -devk", timeBin)
		}
		self, err := os.Executable()
		if err != nil {
			return r, err
		}
		var rss int64
		for i := 0; i < runs; i++ {
			round++
			change := []string{self, "-change", endpoint, "-round", strconv.Itoa(round)}
			t0 := time.Now()
			if out, err := exec.Command(change[0], change[1:]...).CombinedOutput(); err != nil {
				return r, fmt.Errorf("%s: %w: %s", strings.Join(change, " "), err, out)
			}
			changes = append(changes, time.Since(t0))
			round++
			change[len(change)-1] = strconv.Itoa(round)
			cmd := exec.Command(devk, append([]string{"etcd", "diff", "--endpoints", endpoint, "--"}, change...)...)
			cmd.Env = append(os.Environ(), "DEVK_HOME=/nonexistent")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			t0 = time.Now()
			if err := cmd.Run(); err != nil {
				return r, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, errb.String())
			}
			clis = append(clis, time.Since(t0))
			if err := checkTwoKeys(out.String()); err != nil {
				return r, err
			}
			// memory of devk alone: a run without a child process (the
			// rusage of a child includes its own children)
			round++
			since, err := currentRev(ctx, cli)
			if err != nil {
				return r, err
			}
			if _, err := changeTwoKeys(ctx, cli, round); err != nil {
				return r, err
			}
			// Through GNU time: the max RSS the kernel reports for a
			// child counts the pages of the process that forked it, and
			// this one is large after the dump-and-diff.
			cmd = exec.Command(timeBin, "-f", "maxrss_kb=%M", devk, "etcd", "diff", "--endpoints", endpoint, "--since-rev", strconv.FormatInt(since, 10))
			cmd.Env = append(os.Environ(), "DEVK_HOME=/nonexistent")
			out.Reset()
			errb.Reset()
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				return r, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, errb.String())
			}
			if err := checkTwoKeys(out.String()); err != nil {
				return r, err
			}
			b, err := parseMaxRSS(errb.String())
			if err != nil {
				return r, err
			}
			rss = max(rss, b)
		}
		r.cli, r.cliChange, r.cliRSS = median(clis), median(changes), rss
	}
	return r, nil
}

// parseMaxRSS reads what `time -f maxrss_kb=%M` printed, in bytes.
func parseMaxRSS(stderr string) (int64, error) {
	m := regexp.MustCompile(`maxrss_kb=(\d+)`).FindStringSubmatch(stderr)
	if m == nil {
		return 0, fmt.Errorf("%s printed no maxrss: %s", timeBin, stderr)
	}
	kb, err := strconv.ParseInt(m[1], 10, 64)
	return kb * 1024, err
}

// maxRSS runs a command under GNU time and returns its child's max RSS.
func maxRSS(cmd *exec.Cmd) (int64, error) {
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &errb
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, errb.String())
	}
	return parseMaxRSS(errb.String())
}

type watchResult struct {
	written, printed int
	rate             float64
	p50, p99, max    time.Duration
}

// printedAt records when the watch printer wrote each revision's event.
type printedAt struct {
	mu  sync.Mutex
	at  map[int64]time.Time
	buf []byte
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
	ignore, _ := etcdwatch.ParseFieldPaths([]string{"metadata.managedFields"})
	done := make(chan error, 1)
	go func() {
		done <- etcdwatch.Watch(wctx, etcdwatch.WatchOptions{Query: etcdwatch.Query{Conn: etcdwatch.ConnOptions{Endpoints: []string{endpoint}, Home: "/nonexistent", KubeadmDir: "/nonexistent"}, Decode: etcdwatch.DecodeOptions{Ignore: ignore}, Out: out}, FromRev: from + 1, Exclude: etcdwatch.DefaultExclude})
	}()
	// let the watch connect (it starts at from+1 either way: nothing is
	// missed, but early events would count the connection time)
	time.Sleep(500 * time.Millisecond)

	total := int(duration.Seconds() * float64(rate))
	writtenAt := make(map[int64]time.Time, total)
	var mu sync.Mutex
	interval := time.Second / time.Duration(rate)
	// a few writers, each event sent at its scheduled time, so that one
	// slow write does not hold back the rate
	jobs := make(chan int, 64)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				cm := etcdtest.ConfigMap("bench-watch", fmt.Sprintf("cm-%02d", i%100), i)
				value := etcdtest.MustEncode(cm)
				t0 := time.Now()
				resp, err := cli.Put(ctx, "/registry/configmaps/bench-watch/"+cm.Name, string(value))
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
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return res, err
	default:
	}
	elapsed := time.Since(start)
	res.written = total
	res.rate = float64(total) / elapsed.Seconds()
	deadline := time.Now().Add(30 * time.Second)
	for out.count() < total && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return res, fmt.Errorf("watch: %w", err)
	}
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

func ms(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func mib(b uint64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.0f KiB", float64(b)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func report(w io.Writer, rs []sizeResult, wr watchResult, runs, rate int, duration time.Duration, withCLI bool, baseRSS int64) {
	fmt.Fprintf(w, "An etcd (embedded, in its own process, fsync off) holding protobuf objects encoded as kube-apiserver stores them (pods, services, configmaps, secrets, endpointslices, leases in 10 namespaces). Each change touches 2 keys (a pod label, a service port) in one transaction. `devk etcd diff` = `etcdwatch.Diff`, the library call the command makes, with the change made in-process in place of the command (connect, record the revision, watch from the next one while the change is made, read the revision again, fold the events, decode, unified diff), minus the time of the change itself. Full dump-and-diff = read and decode every key under /registry before and after the change, compare, diff the changed ones. Times are medians of %d runs; memory is one run in-process (bytes allocated; peak live-heap growth).\n\n", runs)
	fmt.Fprint(w, "| measure |")
	for _, r := range rs {
		fmt.Fprintf(w, " %d objects |", r.objects)
	}
	fmt.Fprint(w, "\n|---|")
	for range rs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	row := func(name string, f func(r sizeResult) string) {
		fmt.Fprintf(w, "| %s |", name)
		for _, r := range rs {
			fmt.Fprintf(w, " %s |", f(r))
		}
		fmt.Fprintln(w)
	}
	row("protobuf values stored", func(r sizeResult) string { return mib(uint64(r.storedBytes)) })
	row("`devk etcd diff` of a 2-key change", func(r sizeResult) string { return ms(r.diff) })
	row("full dump-and-diff of the same change", func(r sizeResult) string { return ms(r.dump) })
	row("**speed-up** (target ≥ 20×)", func(r sizeResult) string {
		x := float64(r.dump) / float64(r.diff)
		return fmt.Sprintf("**%.0f×** (%s)", x, verdict(x >= 20))
	})
	row("`devk etcd diff --since-rev` of a past 2-key change (waits for etcd's 100 ms history sync)", func(r sizeResult) string {
		return fmt.Sprintf("%s (%.0f× faster than the dump)", ms(r.since), float64(r.dump)/float64(r.since))
	})
	row("`devk etcd diff` allocated / peak heap growth", func(r sizeResult) string { return mib(r.diffAlloc) + " / " + mib(r.diffPeak) })
	row("dump-and-diff allocated / peak heap growth", func(r sizeResult) string { return mib(r.dumpAlloc) + " / " + mib(r.dumpPeak) })
	if withCLI {
		row("CLI `devk etcd diff -- <change command>`, wall", func(r sizeResult) string { return ms(r.cli) })
		row("the change command alone (a Go program writing 2 keys), wall", func(r sizeResult) string { return ms(r.cliChange) })
		row(fmt.Sprintf("CLI `devk etcd diff --since-rev` max RSS (`devk version`: %s)", mib(uint64(baseRSS))), func(r sizeResult) string { return mib(uint64(r.cliRSS)) })
	}
	if len(rs) >= 2 {
		a, b := rs[0], rs[len(rs)-1]
		fmt.Fprintf(w, "\nMemory against database size (%d → %d objects, %.0f× more): `devk etcd diff` allocates %.2f× as much (%s → %s)",
			a.objects, b.objects, float64(b.objects)/float64(a.objects), float64(b.diffAlloc)/float64(a.diffAlloc), mib(a.diffAlloc), mib(b.diffAlloc))
		if withCLI {
			fmt.Fprintf(w, ", its process peaks at %.2f× the RSS (%s → %s)", float64(b.cliRSS)/float64(a.cliRSS), mib(uint64(a.cliRSS)), mib(uint64(b.cliRSS)))
		}
		fmt.Fprintf(w, "; the dump-and-diff allocates %.1f× as much (%s → %s).\n", float64(b.dumpAlloc)/float64(a.dumpAlloc), mib(a.dumpAlloc), mib(b.dumpAlloc))
	}
	last := rs[len(rs)-1]
	fmt.Fprintf(w, "\nWatch (`etcdwatch.Watch`, as `devk etcd watch` runs it, everything under /registry, on the %d-object etcd): configmap updates (100 keys, each write a MODIFIED event after the first 100) written on a %d/s schedule for %s by 8 writers; latency from just before each write to its decoded event (header + unified diff) being written by the printer.\n\n", last.objects, rate, duration)
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| events written / printed / lost | %d / %d / %d (%s) |\n", wr.written, wr.printed, wr.written-wr.printed, verdict(wr.printed == wr.written))
	fmt.Fprintf(w, "| achieved write rate | %.0f events/s |\n", wr.rate)
	fmt.Fprintf(w, "| write-to-printed p50 | %s |\n", ms(wr.p50))
	fmt.Fprintf(w, "| write-to-printed p99 (target ≤ 50 ms) | %s (%s) |\n", ms(wr.p99), verdict(wr.p99 <= 50*time.Millisecond))
	fmt.Fprintf(w, "| write-to-printed max | %s |\n", ms(wr.max))
}
