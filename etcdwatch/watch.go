package etcdwatch

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultExclude are the resources watch and diff leave out unless asked:
// leader-election and node leases are renewed every few seconds and would
// bury the changes a person is looking for.
var DefaultExclude = []string{"leases"}

// DefaultIgnore are the fields watch and diff leave out of values unless
// asked: managedFields carry a timestamp that changes with every write.
var DefaultIgnore = []string{"metadata.managedFields"}

// watchCacheSize bounds the renderings a watch keeps to diff the next
// change of a key without decoding its previous value again.
const watchCacheSize = 1024

// WatchOptions are `devk etcd watch`.
type WatchOptions struct {
	Query
	// FromRev replays history from that revision (0: changes from now).
	FromRev int64
	// Exclude lists resources to leave out, unless Target names them.
	Exclude []string
}

// Validate checks what can be checked before connecting.
func (o WatchOptions) Validate() error {
	if err := validRev("--from-rev", o.FromRev); err != nil {
		return err
	}
	return o.validate("watch", ResolvePrefix, o.Exclude)
}

// excludeSet resolves --exclude names to resource names, dropping any the
// target names itself.
func excludeSet(names []string, t Target) (map[string]bool, error) {
	set := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		r, err := LookupResource(n)
		if err != nil {
			return nil, fmt.Errorf("--exclude: %w", err)
		}
		if t.Resource != nil && t.Resource.Name == r.Name {
			continue
		}
		set[r.Name] = true
	}
	return set, nil
}

// Watch prints every change under the target as it happens (or from
// FromRev): a header per event and a unified diff of the decoded values.
// The previous value comes from etcd (prev_kv); a bounded cache of recent
// renderings only saves decoding it a second time. It returns when ctx
// ends.
func Watch(ctx context.Context, o WatchOptions) error {
	cli, t, exclude, err := o.connect(ctx, o.Validate, ResolvePrefix, o.Exclude)
	if err != nil {
		return err
	}
	defer cli.Close()
	switch {
	case o.FromRev > cli.Revision+1:
		// etcd would wait for it; more likely a typo
		return fmt.Errorf("watch from revision %d: %w", o.FromRev, newRevisionError(ctx, cli.Client, o.FromRev, ErrFutureRevision))
	case o.FromRev > 0 && o.FromRev <= cli.Revision:
		if err := checkRevision(ctx, cli.Client, o.FromRev); err != nil {
			return fmt.Errorf("watch from revision %d: %w", o.FromRev, err)
		}
	}
	from := o.FromRev
	if from == 0 {
		from = cli.Revision + 1
	}
	log := o.log()
	log.Infof("watching %s from revision %d (Ctrl-C to stop)", t.Key, from)

	b := o.changes(cli, newRenderCache(watchCacheSize))
	wch, stop, err := cli.openWatch(ctx, t.Key, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(from))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watch %s: %w", t.Key, err)
	}
	defer stop()
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("watch %s: %w", t.Key, &RevisionError{Requested: from, Oldest: resp.CompactRevision, Current: resp.Header.Revision, Err: ErrCompacted})
		}
		if err := resp.Err(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s on etcd %s: %w", t.Key, strings.Join(cli.Endpoint.Endpoints, ","), err)
		}
		for _, ev := range resp.Events {
			info := ParseKey(cli.Endpoint.Prefix, string(ev.Kv.Key))
			if exclude[info.Resource] || (t.Namespace != "" && t.Resource == nil && info.Namespace != t.Namespace) {
				continue
			}
			if err := writeChange(o.Out, eventChange(b, ev), o.Format); err != nil {
				return err
			}
			from = ev.Kv.ModRevision + 1
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("etcd %s closed the watch of %s: restart it with --from-rev %d to miss nothing", strings.Join(cli.Endpoint.Endpoints, ","), t.Key, from)
}

// eventChange decodes one watch event.
func eventChange(b changeBuilder, ev *clientv3.Event) Change {
	var before, after *mvccpb.KeyValue
	if !ev.IsCreate() {
		before = ev.PrevKv
	}
	if ev.Type == mvccpb.PUT {
		after = ev.Kv
	}
	c := b.build(string(ev.Kv.Key), before, after, nil, ev.Kv.ModRevision, 1)
	if before == nil && !ev.IsCreate() {
		// etcd could not give the previous value (compacted meanwhile)
		c.Note = "the previous value is no longer in etcd's history"
		if ev.Type == mvccpb.DELETE {
			c.Type = Deleted
		} else {
			c.Type = Modified
		}
	}
	c.Writes = 0
	return c
}

// Follow calls fn with every write to the cluster's keys after revision
// from, one Change each, decoded and diffed against the key's previous
// value as Watch prints them (Secrets redacted unless decode says
// otherwise), leaving out the resources named in exclude. It returns
// nil when ctx ends, fn's error, or why etcd ended the watch.
func Follow(ctx context.Context, cli *Client, from int64, decode DecodeOptions, exclude []string, fn func(Change) error) error {
	skip, err := excludeSet(exclude, Target{})
	if err != nil {
		return err
	}
	prefix := cli.Endpoint.Prefix
	b := changeBuilder{prefix: prefix, decode: decode, format: YAML, cache: newRenderCache(watchCacheSize)}
	wch, stop, err := cli.openWatch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(from+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watch %s: %w", prefix, err)
	}
	defer stop()
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("watch %s: %w", prefix, &RevisionError{Requested: from + 1, Oldest: resp.CompactRevision, Current: resp.Header.Revision, Err: ErrCompacted})
		}
		if err := resp.Err(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s on etcd %s: %w", prefix, strings.Join(cli.Endpoint.Endpoints, ","), err)
		}
		for _, ev := range resp.Events {
			if skip[ParseKey(prefix, string(ev.Kv.Key)).Resource] {
				continue
			}
			if err := fn(eventChange(b, ev)); err != nil {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("etcd %s closed the watch of %s", strings.Join(cli.Endpoint.Endpoints, ","), prefix)
}
