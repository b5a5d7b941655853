package etcdwatch

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sentinel errors callers can test with errors.Is.
var (
	// ErrCompacted: the revision asked for is older than etcd keeps.
	ErrCompacted = errors.New("revision compacted")
	// ErrFutureRevision: the revision asked for does not exist yet.
	ErrFutureRevision = errors.New("revision in the future")
	// ErrNotFound: no such key.
	ErrNotFound = errors.New("key not found")
)

// RevisionError explains a revision etcd cannot serve, with the range it
// can.
type RevisionError struct {
	Requested int64
	// Oldest is the oldest revision still readable (the compaction
	// revision, or 1), Current the newest.
	Oldest, Current int64
	// Err is ErrCompacted or ErrFutureRevision.
	Err error
}

func (e *RevisionError) Error() string {
	if errors.Is(e.Err, ErrFutureRevision) {
		return fmt.Sprintf("revision %d is in the future: etcd is at revision %d; use a revision from %d to %d", e.Requested, e.Current, e.Oldest, e.Current)
	}
	return fmt.Sprintf("revision %d has been compacted: etcd keeps revisions %d to %d (the API server compacts history every 5 minutes by default, its --etcd-compaction-interval); use a revision in that range", e.Requested, e.Oldest, e.Current)
}

func (e *RevisionError) Unwrap() error { return e.Err }

// probeKey is read (count only) to learn revisions; it need not exist.
const probeKey = "\x00"

// currentRevision is the store's revision now.
func currentRevision(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, probeKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("read etcd's current revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// oldestRevision finds the oldest revision etcd can still read: after a
// compaction at C, reads at C and later work and earlier ones fail. etcd
// does not report C directly, so this searches: about log2(current)
// count-only reads of one key, all cheap.
func oldestRevision(ctx context.Context, cli *clientv3.Client, current int64) (int64, error) {
	readable := func(rev int64) (bool, error) {
		_, err := cli.Get(ctx, probeKey, clientv3.WithCountOnly(), clientv3.WithRev(rev))
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, rpctypes.ErrCompacted):
			return false, nil
		default:
			return false, err
		}
	}
	if ok, err := readable(1); err != nil || ok {
		return 1, err
	}
	lo, hi := int64(1), current // lo is compacted, hi readable
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := readable(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// explainRevision turns etcd's compacted / future revision errors into a
// RevisionError naming the revisions that exist; other errors pass through.
func explainRevision(ctx context.Context, cli *clientv3.Client, requested int64, err error) error {
	var sentinel error
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		sentinel = ErrCompacted
	case errors.Is(err, rpctypes.ErrFutureRev):
		sentinel = ErrFutureRevision
	default:
		return err
	}
	return newRevisionError(ctx, cli, requested, sentinel)
}

func newRevisionError(ctx context.Context, cli *clientv3.Client, requested int64, sentinel error) error {
	current, cerr := currentRevision(ctx, cli)
	if cerr != nil {
		return fmt.Errorf("revision %d: %w", requested, sentinel)
	}
	oldest, oerr := oldestRevision(ctx, cli, current)
	if oerr != nil {
		return fmt.Errorf("revision %d: %w", requested, sentinel)
	}
	return &RevisionError{Requested: requested, Oldest: oldest, Current: current, Err: sentinel}
}

// checkRevision fails early, with the range that exists, for a revision
// etcd cannot serve.
func checkRevision(ctx context.Context, cli *clientv3.Client, rev int64) error {
	if rev <= 0 {
		return nil
	}
	_, err := cli.Get(ctx, probeKey, clientv3.WithCountOnly(), clientv3.WithRev(rev))
	if err != nil {
		return explainRevision(ctx, cli, rev, err)
	}
	return nil
}

// validRev checks a revision flag before connecting: 0 means none, and
// etcd's revisions start at 1.
func validRev(flag string, rev int64) error {
	if rev < 0 {
		return fmt.Errorf("%s %d: revisions start at 1", flag, rev)
	}
	return nil
}
