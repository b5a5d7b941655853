package etcdwatch

import (
	"context"
	"fmt"
	"io"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/devk/devk/internal/progress"
)

// DefaultExclude are the resources watch and diff leave out unless asked:
// leader-election and node leases are renewed every few seconds and would
// bury the changes a person is looking for.
var DefaultExclude = []string{"leases"}

// watchCacheSize bounds the renderings a watch keeps to diff the next
// change of a key without decoding its previous value again.
const watchCacheSize = 1024

// WatchOptions are `devk etcd watch`.
type WatchOptions struct {
	Conn ConnOptions
	// Target is "", RESOURCE, RESOURCE/NAMESPACE or a raw key prefix.
	Target    string
	Namespace string
	// FromRev replays history from that revision (0: changes from now).
	FromRev int64
	// Exclude lists resources to leave out, unless Target names them.
	Exclude []string
	Decode  DecodeOptions
	JSON    bool
	Out     io.Writer
	Log     progress.Reporter
}

// Validate checks what can be checked before connecting.
func (o WatchOptions) Validate() error {
	if o.FromRev < 0 {
		return fmt.Errorf("--from-rev %d: revisions start at 1", o.FromRev)
	}
	if o.Out == nil {
		return fmt.Errorf("watch: no output writer")
	}
	if _, err := excludeSet(o.Exclude, Target{}); err != nil {
		return err
	}
	_, err := ResolvePrefix(o.Conn.Prefix, o.Target, o.Namespace)
	return err
}

// connectTarget connects to etcd and resolves the target (and the
// --exclude names) against the cluster's key prefix.
func connectTarget(ctx context.Context, conn ConnOptions, target, namespace string, excl []string) (*Client, Target, map[string]bool, error) {
	cli, err := Connect(ctx, conn)
	if err != nil {
		return nil, Target{}, nil, err
	}
	t, err := ResolvePrefix(cli.Endpoint.Prefix, target, namespace)
	if err == nil {
		var exclude map[string]bool
		if exclude, err = excludeSet(excl, t); err == nil {
			return cli, t, exclude, nil
		}
	}
	cli.Close()
	return nil, Target{}, nil, err
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
	if err := o.Validate(); err != nil {
		return err
	}
	log := reporter(o.Log)
	cli, t, exclude, err := connectTarget(ctx, o.Conn, o.Target, o.Namespace, o.Exclude)
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
	log.Infof("watching %s from revision %d (Ctrl-C to stop)", t.Key, from)

	b := changeBuilder{prefix: cli.Endpoint.Prefix, decode: o.Decode, format: YAML, cache: newRenderCache(watchCacheSize)}
	if o.JSON {
		b.format = JSONFormat
	}
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
			if err := writeChange(o.Out, eventChange(b, ev), o.JSON); err != nil {
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
