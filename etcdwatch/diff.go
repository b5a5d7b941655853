package etcdwatch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/output"
)

// DiffOptions are `devk etcd diff`.
type DiffOptions struct {
	Query
	// Command runs between the two revisions. Without one (or Action),
	// Diff waits for a line on Stdin, unless SinceRev is set.
	Command []string
	// Action, for library callers, is a change made in-process between
	// the two revisions, instead of Command.
	Action func(context.Context) error
	// SinceRev is the "before" revision; 0 means the revision when Diff
	// starts.
	SinceRev int64
	// UntilRev is the "after" revision; 0 means the revision once the
	// change is made (through the cluster, the client reads both
	// revisions around the change and the node's agent diffs between).
	UntilRev int64
	// Stdin is the command's stdin, or where Enter is awaited.
	Stdin io.Reader
	// CommandOut receives the command's stdout and stderr, so that Out
	// holds only the diff.
	CommandOut io.Writer
	// Exclude lists resources to leave out, unless Target names them.
	Exclude []string
}

// Validate checks what can be checked before connecting.
func (o DiffOptions) Validate() error {
	if err := validRev("--since-rev", o.SinceRev); err != nil {
		return err
	}
	if o.UntilRev != 0 && o.UntilRev < o.SinceRev {
		return fmt.Errorf("diff: revision %d is before %d", o.UntilRev, o.SinceRev)
	}
	if len(o.Command) == 0 && o.Action == nil && o.SinceRev == 0 && o.Stdin == nil {
		return fmt.Errorf("diff: give a command after --, or --since-rev, or a terminal to press Enter in")
	}
	if len(o.Command) > 0 && o.Action != nil {
		return fmt.Errorf("diff: a command or an action, not both")
	}
	return o.validate("diff", ResolvePrefix, o.Exclude)
}

// DiffResult is every key changed under Prefix between two revisions.
type DiffResult struct {
	Prefix       string   `json:"prefix"`
	FromRevision int64    `json:"fromRevision"`
	ToRevision   int64    `json:"toRevision"`
	Changes      []Change `json:"changes"`
	// Excluded counts the writes left out, per resource.
	Excluded map[string]int `json:"excluded,omitempty"`
}

// Diff records the revision, runs the command (or waits for Enter),
// records the revision again and prints each key changed in between,
// decoded, with a unified diff. It watches etcd from the first revision
// on instead of reading the database, so its cost follows the number of
// changes, not the size of the database.
func Diff(ctx context.Context, o DiffOptions) error {
	log := o.log()
	cli, t, exclude, err := o.connect(ctx, o.Validate, ResolvePrefix, o.Exclude)
	if err != nil {
		return err
	}
	defer cli.Close()
	from := o.SinceRev
	if from > 0 {
		if err := checkRevision(ctx, cli.Client, from); err != nil {
			return diffRevisionError(from, err)
		}
	} else {
		from = cli.Revision
	}

	b := o.changes(cli, nil)
	// Record from now on, while the command runs: etcd streams a watch
	// that starts at the next revision live, while one that starts in the
	// past waits for its next history sync (up to 100 ms).
	rec, err := startRecording(ctx, cli, t, from, exclude, b)
	if err != nil {
		return fmt.Errorf("diff: watch etcd's history from revision %d: %w", from+1, err)
	}
	defer rec.cancel()

	cmdErr, err := o.RunChange(ctx, from)
	if err != nil {
		return err
	}
	to := o.UntilRev
	if to == 0 {
		if to, err = currentRevision(ctx, cli.Client); err != nil {
			return err
		}
	}
	res, err := rec.stop(to)
	if err != nil {
		return diffRevisionError(from, err)
	}
	for _, r := range slices.Sorted(maps.Keys(res.Excluded)) {
		log.Infof("left out %d writes to %s (--exclude %s); --exclude '' shows them", res.Excluded[r], r, r)
	}
	if err := printDiff(o.Out, res, o.Format); err != nil {
		return err
	}
	return CommandFailed(cmdErr)
}

// RunChange makes the change a diff shows, after its "before" revision
// from: the command (whose failure is cmdErr: the diff still shows what
// it changed), the action, or, with neither and no SinceRev, a line on
// Stdin. err ends the diff: the command could not run, the action
// failed, or ctx ended.
func (o DiffOptions) RunChange(ctx context.Context, from int64) (cmdErr, err error) {
	log := o.log()
	switch {
	case len(o.Command) > 0:
		c := execx.Cmd{Name: o.Command[0], Args: o.Command[1:]}
		log.Infof("revision %d; running %s", from, c)
		cmdErr = runCommand(ctx, c, o.Stdin, o.CommandOut)
		var notRun *exec.Error
		if errors.As(cmdErr, &notRun) || ctx.Err() != nil {
			return nil, cmdErr
		}
		return cmdErr, nil
	case o.Action != nil:
		if err := o.Action(ctx); err != nil {
			return nil, fmt.Errorf("diff: the change failed: %w", err)
		}
	case o.SinceRev == 0:
		log.Infof("recorded revision %d: make your change, then press Enter", from)
		return nil, waitForLine(ctx, o.Stdin)
	}
	return nil, nil
}

// CommandFailed is a diff's error once its output is printed: the
// command's failure (RunChange's cmdErr), if it failed.
func CommandFailed(cmdErr error) error {
	if cmdErr != nil {
		return fmt.Errorf("%w; the diff above is what it changed before failing", cmdErr)
	}
	return nil
}

func diffRevisionError(from int64, err error) error {
	var re *RevisionError
	if errors.As(err, &re) && errors.Is(err, ErrCompacted) {
		return fmt.Errorf("diff from revision %d: %w; `devk etcd diff --since-rev %d` shows what changed since the oldest revision etcd still has", from, err, re.Oldest)
	}
	return fmt.Errorf("diff from revision %d: %w", from, err)
}

func runCommand(ctx context.Context, c execx.Cmd, stdin io.Reader, out io.Writer) error {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	cmd.Stdin = stdin
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", c, err)
	}
	return nil
}

// waitForLine returns after one line (or EOF) on r, or when ctx ends.
func waitForLine(ctx context.Context, r io.Reader) error {
	done := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(r).ReadString('\n')
		if errors.Is(err, io.EOF) {
			err = nil
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("waiting for Enter: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keyChanges folds the events of one key.
type keyChanges struct {
	firstRev int64
	before   *mvccpb.KeyValue // value at the "from" revision; nil if absent
	after    *mvccpb.KeyValue // value at the "to" revision; nil if absent
	lastPut  *mvccpb.KeyValue
	lastRev  int64
	writes   int
}

// progressAfter is how long a recording waits for events, once it knows
// the last revision, before asking etcd whether it has sent everything.
const progressAfter = time.Second

// recording folds etcd's history from a revision on, key by key, in a
// goroutine: one watch over the whole keyspace, from+1 onwards. Every
// revision holds at least one event, so having seen revision `to` means
// nothing before it is missing. prev_kv gives each key's value before its
// first change, so no other read is needed; keys outside the target are
// dropped as they come, and only changed keys are kept.
type recording struct {
	cancel context.CancelFunc
	to     chan int64
	done   chan recordResult
}

type recordResult struct {
	res DiffResult
	err error
}

func startRecording(ctx context.Context, cli *Client, t Target, from int64, exclude map[string]bool, b changeBuilder) (*recording, error) {
	wctx, cancel := context.WithCancel(ctx)
	wch, stop, err := cli.openWatch(wctx, "", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(from+1))
	if err != nil {
		cancel()
		return nil, err
	}
	r := &recording{cancel: func() { stop(); cancel() }, to: make(chan int64, 1), done: make(chan recordResult, 1)}
	go func() {
		res, err := record(wctx, cli, wch, r.to, t, from, exclude, b)
		r.done <- recordResult{res, err}
	}()
	return r, nil
}

// stop waits until the recording has seen revision to, and returns every
// change up to it.
func (r *recording) stop(to int64) (DiffResult, error) {
	r.to <- to
	out := <-r.done
	r.cancel()
	return out.res, out.err
}

func record(ctx context.Context, cli *Client, wch clientv3.WatchChan, toCh <-chan int64, t Target, from int64, exclude map[string]bool, b changeBuilder) (DiffResult, error) {
	res := DiffResult{Prefix: t.Key, FromRevision: from, Changes: []Change{}}
	keys := map[string]*keyChanges{}
	var (
		to      int64 = -1 // unknown until stop
		seen          = from
		timer   *time.Timer
		timerC  <-chan time.Time
		failure error
	)
	// An event received before `to` is known was committed before `to`
	// was read, so it belongs in the window.
	for to < 0 || seen < to {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case to = <-toCh:
			res.ToRevision = to
			if failure != nil {
				return res, failure
			}
			timer = time.NewTimer(progressAfter)
			defer timer.Stop()
			timerC = timer.C
		case <-timerC:
			// belt and braces: ask etcd to confirm it has sent
			// everything up to its current revision
			if err := cli.bounded(ctx, cli.RequestProgress); err != nil {
				return res, fmt.Errorf("ask etcd for watch progress: %w", err)
			}
			timer.Reset(progressAfter)
		case resp, ok := <-wch:
			if failure != nil {
				continue
			}
			switch {
			case !ok:
				failure = fmt.Errorf("etcd closed the watch of history at revision %d", seen)
			case resp.CompactRevision != 0:
				failure = &RevisionError{Requested: from, Oldest: resp.CompactRevision, Current: resp.Header.Revision, Err: ErrCompacted}
			case resp.Err() != nil:
				failure = fmt.Errorf("read etcd's history from revision %d: %w", from+1, resp.Err())
			}
			if failure != nil {
				if to >= 0 {
					return res, failure
				}
				wch = nil // wait for stop to hear about it
				continue
			}
			if to >= 0 && resp.IsProgressNotify() && resp.Header.Revision >= to {
				seen = to
				continue
			}
			for _, ev := range resp.Events {
				rev := ev.Kv.ModRevision
				if to >= 0 && rev > to {
					seen = to
					break
				}
				seen = rev
				fold(keys, ev, t, exclude, &res, b.prefix)
			}
			if timer != nil {
				timer.Reset(progressAfter)
			}
		}
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		a, c := keys[names[i]], keys[names[j]]
		if a.firstRev != c.firstRev {
			return a.firstRev < c.firstRev
		}
		return names[i] < names[j]
	})
	for _, n := range names {
		k := keys[n]
		res.Changes = append(res.Changes, b.build(n, k.before, k.after, k.lastPut, k.lastRev, k.writes))
	}
	return res, nil
}

// fold adds one event to its key's changes, unless the key is outside the
// target or excluded.
func fold(keys map[string]*keyChanges, ev *clientv3.Event, t Target, exclude map[string]bool, res *DiffResult, prefix string) {
	key := string(ev.Kv.Key)
	if !strings.HasPrefix(key, t.Key) {
		return
	}
	info := ParseKey(prefix, key)
	if t.Namespace != "" && t.Resource == nil && info.Namespace != t.Namespace {
		return
	}
	if exclude[info.Resource] {
		if res.Excluded == nil {
			res.Excluded = map[string]int{}
		}
		res.Excluded[info.Resource]++
		return
	}
	rev := ev.Kv.ModRevision
	k := keys[key]
	if k == nil {
		k = &keyChanges{firstRev: rev}
		if !ev.IsCreate() {
			k.before = ev.PrevKv
		}
		keys[key] = k
	}
	k.writes++
	k.lastRev = rev
	if ev.Type == mvccpb.PUT {
		k.after, k.lastPut = ev.Kv, ev.Kv
	} else {
		k.after = nil
		if ev.PrevKv != nil {
			k.lastPut = ev.PrevKv
		}
	}
}

func printDiff(w io.Writer, res DiffResult, f output.Format) error {
	if f.Structured() {
		return output.Write(w, f, res)
	}
	if len(res.Changes) == 0 {
		_, err := fmt.Fprintf(w, "# no keys changed under %s between revision %d and %d\n", res.Prefix, res.FromRevision, res.ToRevision)
		return err
	}
	keys := "keys"
	if len(res.Changes) == 1 {
		keys = "key"
	}
	if _, err := fmt.Fprintf(w, "# %d %s changed under %s between revision %d and %d\n", len(res.Changes), keys, res.Prefix, res.FromRevision, res.ToRevision); err != nil {
		return err
	}
	for _, c := range res.Changes {
		if err := writeChange(w, c, output.Text); err != nil {
			return err
		}
	}
	return nil
}
