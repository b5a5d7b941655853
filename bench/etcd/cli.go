package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// timeBin is GNU time (Debian package "time"), for the max RSS of the CLI.
const timeBin = "/usr/bin/time"

// noDevkHome keeps the CLI from finding a devk cluster: it talks to the
// bench's etcd named by --endpoints only.
const noDevkHome = "DEVK_HOME=/nonexistent"

// measureCLI times the devk binary's `etcd diff -- <change command>`
// beside the change command alone, and takes the largest max RSS of its
// `etcd diff --since-rev` runs.
func measureCLI(ctx context.Context, cli *clientv3.Client, endpoint, devk string, runs int, round *int, r *sizeResult) error {
	if _, err := os.Stat(timeBin); err != nil {
		return fmt.Errorf("%s is missing: apt-get install time, or run without -devk", timeBin)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var clis, changes []time.Duration
	var rss int64
	for i := 0; i < runs; i++ {
		*round++
		change := []string{self, "-change", endpoint, "-round", strconv.Itoa(*round)}
		t0 := time.Now()
		if out, err := exec.Command(change[0], change[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(change, " "), err, out)
		}
		changes = append(changes, time.Since(t0))
		*round++
		change[len(change)-1] = strconv.Itoa(*round)
		d, err := cliDiff(devk, endpoint, change)
		if err != nil {
			return err
		}
		clis = append(clis, d)
		*round++
		b, err := cliDiffSinceRSS(ctx, cli, devk, endpoint, *round)
		if err != nil {
			return err
		}
		rss = max(rss, b)
	}
	r.cli, r.cliChange, r.cliRSS = median(clis), median(changes), rss
	return nil
}

// cliDiff times `devk etcd diff -- <change>`.
func cliDiff(devk, endpoint string, change []string) (time.Duration, error) {
	cmd := exec.Command(devk, append([]string{"etcd", "diff", "--endpoints", endpoint, "--"}, change...)...)
	cmd.Env = append(os.Environ(), noDevkHome)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, errb.String())
	}
	took := time.Since(t0)
	return took, checkTwoKeys(out.String())
}

// cliDiffSinceRSS is the memory of devk alone: a change made here, then
// `devk etcd diff --since-rev` without a child process (the rusage of a
// child includes its own children), through GNU time: the max RSS the
// kernel reports for a child counts the pages of the process that forked
// it, and this one is large after the dump-and-diff.
func cliDiffSinceRSS(ctx context.Context, cli *clientv3.Client, devk, endpoint string, round int) (int64, error) {
	since, err := currentRev(ctx, cli)
	if err != nil {
		return 0, err
	}
	if err := changeTwoKeys(ctx, cli, round); err != nil {
		return 0, err
	}
	cmd := exec.Command(timeBin, "-f", "maxrss_kb=%M", devk, "etcd", "diff", "--endpoints", endpoint, "--since-rev", strconv.FormatInt(since, 10))
	cmd.Env = append(os.Environ(), noDevkHome)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, errb.String())
	}
	if err := checkTwoKeys(out.String()); err != nil {
		return 0, err
	}
	return parseMaxRSS(errb.String())
}

// versionRSS is the max RSS of `devk version`: the floor of any devk run.
func versionRSS(devk string) (int64, error) {
	return maxRSS(exec.Command(timeBin, "-f", "maxrss_kb=%M", devk, "version"))
}

var maxRSSRE = regexp.MustCompile(`maxrss_kb=(\d+)`)

// parseMaxRSS reads what `time -f maxrss_kb=%M` printed, in bytes.
func parseMaxRSS(stderr string) (int64, error) {
	m := maxRSSRE.FindStringSubmatch(stderr)
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
