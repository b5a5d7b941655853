package trace

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/devk/devk/internal/output"
)

// followWindow is how long --follow keeps a request to attach etcd
// writes to that arrive after it.
const followWindow = 30 * time.Second

// FollowItem is one document of `devk trace --follow -o json|yaml`:
// exactly one of its fields is set.
type FollowItem struct {
	Request *Request   `json:"request,omitempty"`
	Etcd    *EtcdWrite `json:"etcd,omitempty"`
	Node    *NodeTrace `json:"node,omitempty"`
}

// follow prints what happens as it happens until ctx ends: each request
// (reads only with --reads) with the etcd writes it made, a write no
// request was found for once it waited one poll, each node's rule and
// container changes.
func (j *job) follow(ctx context.Context) error {
	j.log.Infof("following the cluster (Ctrl-C to stop)")
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var (
		recent  []Request
		pending []EtcdWrite
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-j.etcdDone:
			if j.etcdErr != nil {
				return j.etcdErr
			}
			j.etcdDone = nil
		case <-tick.C:
		}
		if err := j.pollAudit(); err != nil {
			return err
		}
		nodes := j.pollNodes(ctx)
		// take what came since the last poll: --follow keeps nothing else
		j.mu.Lock()
		newR, newW := j.requests, j.writes
		j.requests, j.writes = nil, nil
		j.mu.Unlock()

		now := time.Now()
		cut := 0
		for cut < len(recent) && now.Sub(recent[cut].Time) > followWindow {
			cut++
		}
		recent = recent[cut:]
		old := len(recent)
		recent = append(recent, newR...)
		for i := range recent {
			recent[i].Etcd = nil
		}
		writes := append(pending, newW...)
		join(recent, writes)
		pending = nil
		printedW := map[int64]bool{}
		byRev := map[int64]*EtcdWrite{}
		for i := range writes {
			byRev[writes[i].Revision] = &writes[i]
		}
		for _, r := range recent[old:] {
			if (r.Read() && !j.o.Reads) || !j.o.Filter.Request(r) {
				continue
			}
			if err := j.emit(FollowItem{Request: &r}); err != nil {
				return err
			}
			for _, rev := range r.Etcd {
				if w := byRev[rev]; w != nil && !printedW[rev] {
					printedW[rev] = true
					if err := j.emitWrite(w, &r); err != nil {
						return err
					}
				}
			}
		}
		for i := range writes {
			w := &writes[i]
			if printedW[w.Revision] {
				continue
			}
			if w.Request == "" && now.Sub(w.Time) < pollInterval {
				pending = append(pending, *w) // its request may be in the next lines
				continue
			}
			printedW[w.Revision] = true
			var by *Request
			for k := range recent {
				if recent[k].AuditID == w.Request && w.Request != "" {
					by = &recent[k]
				}
			}
			if err := j.emitWrite(w, by); err != nil {
				return err
			}
		}
		for _, n := range j.src.Nodes {
			if nt, ok := nodes[n.Name]; ok {
				if err := j.emit(FollowItem{Node: &nt}); err != nil {
					return err
				}
			}
		}
	}
}

func (j *job) emitWrite(w *EtcdWrite, by *Request) error {
	if !j.o.Filter.resource(w.Group, w.Resource) || !j.o.Filter.namespace(w.Namespace) || !j.o.Filter.agent(w.userAgent) {
		return nil
	}
	if j.o.Format.Structured() {
		return j.emit(FollowItem{Etcd: w})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s    %s", w.Time.Format(timeFormat), etcdLine(*w))
	if by != nil {
		fmt.Fprintf(&b, " by %s", by.Client)
	}
	b.WriteString("\n")
	writeDiff(&b, w.Diff, "      ")
	_, err := io.WriteString(j.o.Live, b.String())
	return err
}

func (j *job) emit(it FollowItem) error {
	if j.o.Format.Structured() {
		return output.Write(j.o.Live, j.o.Format, it)
	}
	var b strings.Builder
	switch {
	case it.Request != nil:
		writeRequest(&b, *it.Request)
	case it.Node != nil:
		writeNode(&b, *it.Node)
	}
	_, err := io.WriteString(j.o.Live, b.String())
	return err
}
