// Command etcd-bench measures `devk etcd diff` against a full
// dump-and-diff, and `devk etcd watch` latency, on an etcd holding
// protobuf objects encoded as kube-apiserver stores them. It prints a
// markdown table on stdout; bench/etcd/run wraps it with the machine
// header.
//
// etcd runs in a child process (this program with -serve), so that what
// is measured here is the client side only, as a user's devk would be.
//
// The steps, one file each: server.go starts and stops that etcd;
// change.go is the 2-key change every diff measure looks for; diff.go
// times and weighs `devk etcd diff` against the dump-and-diff, cli.go the
// devk binary doing the same; watch.go measures watch latency; report.go
// prints the tables.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// What a run measures unless told otherwise (bench/etcd/run passes its
// own).
const (
	defaultSizes    = "1000,10000"
	defaultRuns     = 5
	defaultRate     = 1000
	defaultDuration = 5 * time.Second
)

func main() {
	var (
		serve    = flag.String("serve", "", "internal: run etcd with its data in this directory and print its endpoint")
		change   = flag.String("change", "", "internal: make the 2-key change on the etcd at this endpoint (the command `devk etcd diff` runs)")
		round    = flag.Int("round", 0, "internal: with -change, which change")
		preload  = flag.Int("preload", 0, "with -serve, load this many objects first (to try devk etcd by hand)")
		work     = flag.String("work", os.TempDir(), "directory for etcd's data")
		devk     = flag.String("devk", os.Getenv("DEVK_BIN"), "devk binary, to time the CLI as well")
		sizes    = flag.String("sizes", defaultSizes, "database sizes (objects) to measure diff at")
		runs     = flag.Int("runs", defaultRuns, "runs per diff measure (median reported)")
		rate     = flag.Int("rate", defaultRate, "watch events per second")
		duration = flag.Duration("duration", defaultDuration, "how long to write at that rate")
	)
	flag.Parse()
	var err error
	switch {
	case *change != "":
		err = changeAt(*change, *round)
	case *serve != "":
		err = serveEtcd(*serve, *preload)
	default:
		err = run(*work, *devk, *sizes, *runs, *rate, *duration)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-bench:", err)
		os.Exit(1)
	}
}

// run measures diff at each size, with a fresh etcd per size, and watch
// on the last (largest) one, then prints the report.
func run(work, devk, sizes string, runs, rate int, duration time.Duration) error {
	ctx := context.Background()
	counts, err := parseSizes(sizes)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(work, "etcd-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var results []sizeResult
	var watch watchResult
	for i, n := range counts {
		srv, err := startServer(filepath.Join(dir, fmt.Sprintf("etcd-%d", n)))
		if err != nil {
			return err
		}
		r, err := measureDiff(ctx, srv.endpoint, n, runs, devk)
		if err == nil && i == len(counts)-1 {
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
		if baseRSS, err = versionRSS(devk); err != nil {
			return err
		}
	}
	report(os.Stdout, results, watch, runs, rate, duration, devk != "", baseRSS)
	return nil
}

// parseSizes reads -sizes: object counts, comma separated.
func parseSizes(sizes string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("-sizes: %w", err)
		}
		out = append(out, n)
	}
	return out, nil
}
