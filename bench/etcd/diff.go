package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/devk/devk/etcdwatch"
	"github.com/devk/devk/etcdwatch/etcdtest"
)

// dumpPageSize is the dump-and-diff's page, as `devk etcd ls` reads.
const dumpPageSize = 1000

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

// measureDiff fills an etcd with n objects, then times `devk etcd diff`
// against the dump-and-diff, weighs both, and (with a devk binary) runs
// the CLI. round numbers the changes, so that each differs from the last.
func measureDiff(ctx context.Context, endpoint string, n, runs int, devk string) (sizeResult, error) {
	r := sizeResult{objects: n}
	cli, err := newClient(endpoint)
	if err != nil {
		return r, err
	}
	defer cli.Close()
	if r.storedBytes, err = load(ctx, cli, n); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "etcd-bench: diff vs dump-and-diff at %d objects\n", n)
	round := 0
	if err := timeDiffs(ctx, cli, endpoint, n, runs, &round, &r); err != nil {
		return r, err
	}
	if err := weighDiffs(ctx, cli, endpoint, n, &round, &r); err != nil {
		return r, err
	}
	if devk != "" {
		if err := measureCLI(ctx, cli, endpoint, devk, runs, &round, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// load puts n objects into etcd and returns the bytes stored.
func load(ctx context.Context, cli *clientv3.Client, n int) (int64, error) {
	fmt.Fprintf(os.Stderr, "etcd-bench: loading %d objects\n", n)
	objs := etcdtest.Objects(n)
	var stored int64
	for _, v := range objs {
		stored += int64(len(v))
	}
	return stored, etcdtest.Put(ctx, cli, objs)
}

// timeDiffs runs each way of finding a change runs times: devk's diff
// around the change, devk's diff --since-rev after it, the dump-and-diff.
func timeDiffs(ctx context.Context, cli *clientv3.Client, endpoint string, n, runs int, round *int, r *sizeResult) error {
	var diffs, sinces, dumps []time.Duration
	for i := 0; i < runs; i++ {
		*round++
		d, out, err := devkDiff(ctx, endpoint, *round)
		if err == nil {
			err = checkTwoKeys(out)
		}
		if err != nil {
			return fmt.Errorf("devk diff: %w", err)
		}
		diffs = append(diffs, d)
		*round++
		d, out, err = devkDiffSince(ctx, cli, endpoint, *round)
		if err == nil {
			err = checkTwoKeys(out)
		}
		if err != nil {
			return fmt.Errorf("devk diff --since-rev: %w", err)
		}
		sinces = append(sinces, d)
		*round++
		d, changed, err := dumpAndDiff(ctx, cli, n, *round)
		if err != nil {
			return fmt.Errorf("dump and diff: %w", err)
		}
		if changed != 2 {
			return fmt.Errorf("dump and diff found %d changed keys, want 2", changed)
		}
		r.changedFound = changed
		dumps = append(dumps, d)
	}
	r.diff, r.since, r.dump = median(diffs), median(sinces), median(dumps)
	return nil
}

// weighDiffs measures the memory of one devk diff and one dump-and-diff.
func weighDiffs(ctx context.Context, cli *clientv3.Client, endpoint string, n int, round *int, r *sizeResult) error {
	var err error
	*round++
	if r.diffAlloc, r.diffPeak, err = measureMem(func() error { _, _, err := devkDiff(ctx, endpoint, *round); return err }); err != nil {
		return err
	}
	*round++
	r.dumpAlloc, r.dumpPeak, err = measureMem(func() error { _, _, err := dumpAndDiff(ctx, cli, n, *round); return err })
	return err
}

// noisyFields are left out of every decoded value, as devk's watch and
// diff do by default.
var noisyFields, _ = etcdwatch.ParseFieldPaths(etcdwatch.DefaultIgnore)

// benchQuery is what devk's diff and watch are asked in the benchmark:
// the bench's etcd only (no cluster or kubeadm node is looked for), with
// devk's default noise filter.
func benchQuery(endpoint string, out io.Writer) etcdwatch.Query {
	return etcdwatch.Query{
		Conn:   etcdwatch.ConnOptions{Endpoints: []string{endpoint}, Home: "/nonexistent", KubeadmDir: "/nonexistent"},
		Decode: etcdwatch.DecodeOptions{Ignore: noisyFields},
		Out:    out,
	}
}

func diffOptions(endpoint string, since int64, out io.Writer) etcdwatch.DiffOptions {
	return etcdwatch.DiffOptions{Query: benchQuery(endpoint, out), SinceRev: since, Exclude: etcdwatch.DefaultExclude}
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
		err = changeTwoKeys(ctx, cli, round)
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
	if err := changeTwoKeys(ctx, cli, round); err != nil {
		return 0, "", err
	}
	var out bytes.Buffer
	t0 := time.Now()
	err = etcdwatch.Diff(ctx, diffOptions(endpoint, since, &out))
	return time.Since(t0), out.String(), err
}

// dumpAndDiff is the naive alternative: read and decode every key before
// and after the change, and diff the ones that differ.
func dumpAndDiff(ctx context.Context, cli *clientv3.Client, n, round int) (time.Duration, int, error) {
	t0 := time.Now()
	before, err := dump(ctx, cli, n)
	if err != nil {
		return 0, 0, err
	}
	took := time.Since(t0)
	if err := changeTwoKeys(ctx, cli, round); err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	after, err := dump(ctx, cli, n)
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

// dump reads and decodes every key under /registry/, a page at a time.
func dump(ctx context.Context, cli *clientv3.Client, n int) (map[string]string, error) {
	dopts := etcdwatch.DecodeOptions{Ignore: noisyFields}
	m := make(map[string]string, n)
	start, end := "/registry/", clientv3.GetPrefixRangeEnd("/registry/")
	for {
		resp, err := cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(dumpPageSize))
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
