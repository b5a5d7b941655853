package main

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// The targets the report judges against (the issue's).
const (
	speedupTarget = 20                    // devk etcd diff against the dump-and-diff
	watchP99Goal  = 50 * time.Millisecond // write-to-printed p99
)

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
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
	row(fmt.Sprintf("**speed-up** (target ≥ %d×)", speedupTarget), func(r sizeResult) string {
		x := float64(r.dump) / float64(r.diff)
		return fmt.Sprintf("**%.0f×** (%s)", x, verdict(x >= speedupTarget))
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
	fmt.Fprintf(w, "\nWatch (`etcdwatch.Watch`, as `devk etcd watch` runs it, everything under /registry, on the %d-object etcd): configmap updates (%d keys, each write a MODIFIED event after the first %d) written on a %d/s schedule for %s by %d writers; latency from just before each write to its decoded event (header + unified diff) being written by the printer.\n\n", last.objects, watchKeys, watchKeys, rate, duration, watchWriters)
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| events written / printed / lost | %d / %d / %d (%s) |\n", wr.written, wr.printed, wr.written-wr.printed, verdict(wr.printed == wr.written))
	fmt.Fprintf(w, "| achieved write rate | %.0f events/s |\n", wr.rate)
	fmt.Fprintf(w, "| write-to-printed p50 | %s |\n", ms(wr.p50))
	fmt.Fprintf(w, "| write-to-printed p99 (target ≤ %s) | %s (%s) |\n", ms(watchP99Goal), ms(wr.p99), verdict(wr.p99 <= watchP99Goal))
	fmt.Fprintf(w, "| write-to-printed max | %s |\n", ms(wr.max))
}
