package etcdwatch

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/devk/devk/internal/output"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pageSize bounds each ranged read, so that listing a large etcd keeps
// memory flat.
const pageSize = 1000

// LsOptions are `devk etcd ls`.
type LsOptions struct {
	Query
	// Count prints the number of keys per resource instead of the keys.
	Count bool
	// Rev lists the keys as they were at that revision (0: now).
	Rev int64
}

// Validate checks what can be checked before connecting.
func (o LsOptions) Validate() error {
	if err := validRev("--rev", o.Rev); err != nil {
		return err
	}
	return o.validate("ls", ResolvePrefix, nil)
}

// KeyEntry is one key of `ls -o json`.
type KeyEntry struct {
	KeyInfo
	CreateRevision int64 `json:"createRevision"`
	ModRevision    int64 `json:"modRevision"`
	Version        int64 `json:"version"`
}

// Ls lists keys (or counts them per resource) under a prefix, reading
// keys only, a page at a time, all pages at one revision.
func Ls(ctx context.Context, o LsOptions) error {
	log := o.log()
	cli, t, _, err := o.connect(ctx, o.Validate, ResolvePrefix, nil)
	if err != nil {
		return err
	}
	defer cli.Close()
	log.Debugf("etcd %s", cli.Endpoint)

	counts := map[string]int{}
	var entries []KeyEntry
	total := 0
	rev, err := rangeKeys(ctx, cli, t.Key, o.Rev, func(kv KeyEntry) error {
		if t.Namespace != "" && t.Resource == nil && kv.Namespace != t.Namespace {
			return nil
		}
		total++
		if o.Count {
			counts[resourceLabel(kv.KeyInfo)]++
			return nil
		}
		if o.Format.Structured() {
			entries = append(entries, kv)
			return nil
		}
		_, err := fmt.Fprintln(o.Out, kv.Key)
		return err
	}, cli.Endpoint.Prefix)
	if err != nil {
		return err
	}
	if total == 0 {
		log.Infof("no keys under %s at revision %d", t.Key, rev)
	}
	switch {
	case o.Count && o.Format.Structured():
		return output.Write(o.Out, o.Format, LsResult{Prefix: t.Key, Revision: rev, Total: total, Counts: counts})
	case o.Count:
		names := make([]string, 0, len(counts))
		for n := range counts {
			names = append(names, n)
		}
		sort.Strings(names)
		w, nw := len("RESOURCE"), len("KEYS")
		for _, n := range names {
			w = max(w, len(n))
		}
		nw = max(nw, len(fmt.Sprint(total)))
		var b strings.Builder
		fmt.Fprintf(&b, "%-*s  %*s\n", w, "RESOURCE", nw, "KEYS")
		for _, n := range names {
			fmt.Fprintf(&b, "%-*s  %*d\n", w, n, nw, counts[n])
		}
		fmt.Fprintf(&b, "%-*s  %*d\n", w, "total", nw, total)
		_, err := io.WriteString(o.Out, b.String())
		return err
	case o.Format.Structured():
		return output.Write(o.Out, o.Format, LsResult{Prefix: t.Key, Revision: rev, Total: total, Keys: entries})
	}
	return nil
}

// LsResult is what ls prints with -o json|yaml: the keys under Prefix at
// Revision, or with --count how many of each resource.
type LsResult struct {
	Prefix   string `json:"prefix"`
	Revision int64  `json:"revision"`
	Total    int    `json:"total"`
	// Keys are the keys (without --count).
	Keys []KeyEntry `json:"keys,omitempty"`
	// Counts are the keys per resource (with --count).
	Counts map[string]int `json:"counts,omitempty"`
}

// resourceLabel names a key's resource for counts: group-qualified for
// resources outside the core group that devk does not know.
func resourceLabel(k KeyInfo) string {
	switch {
	case k.Resource == "":
		return "(outside the prefix)"
	case k.Group != "":
		if r, err := LookupResource(k.Resource); err == nil && r.Group == k.Group {
			return k.Resource
		}
		return k.Resource + "." + k.Group
	}
	return k.Resource
}

// rangeKeys calls fn for every key under prefix (keys only), paging, all
// pages read at the revision of the first (or rev when set). It returns
// that revision.
func rangeKeys(ctx context.Context, cli *Client, prefix string, rev int64, fn func(KeyEntry) error, apiPrefix string) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	start := prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(pageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, start, opts...)
		if err != nil {
			if rev > 0 {
				return 0, explainRevision(ctx, cli.Client, rev, err)
			}
			return 0, fmt.Errorf("list keys under %s: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			e := KeyEntry{KeyInfo: ParseKey(apiPrefix, string(kv.Key)), CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version}
			if err := fn(e); err != nil {
				return rev, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
