package trace

import (
	"slices"
	"strconv"
	"time"

	"github.com/devk/devk/etcdwatch"
)

// EtcdWrite is one write to etcd in the window: a key put or deleted at
// a revision, decoded and diffed as `devk etcd watch` shows it.
type EtcdWrite struct {
	// Time is when devk saw it (etcd keeps no time).
	Time     time.Time `json:"time"`
	Key      string    `json:"key"`
	Revision int64     `json:"revision"`
	// Type is ADDED, MODIFIED or DELETED.
	Type      etcdwatch.ChangeType `json:"type"`
	Resource  string               `json:"resource,omitempty"`
	Group     string               `json:"group,omitempty"`
	Namespace string               `json:"namespace,omitempty"`
	Name      string               `json:"name,omitempty"`
	// FromRevision is the revision of the value it replaced.
	FromRevision int64 `json:"fromRevision,omitempty"`
	// Diff is the unified diff of the decoded values (Secrets redacted).
	Diff string `json:"diff,omitempty"`
	Note string `json:"note,omitempty"`
	// Request is the audit ID of the request that made it, when found.
	Request string `json:"request,omitempty"`

	userAgent string
}

// etcdWrite is a Change as trace keeps it, seen at t.
func etcdWrite(c etcdwatch.Change, t time.Time) EtcdWrite {
	return EtcdWrite{Time: t, Key: c.Key, Revision: c.ToRevision, Type: c.Type, Resource: c.Resource, Group: c.Group,
		Namespace: c.Namespace, Name: c.Name, FromRevision: c.FromRevision, Diff: c.Diff, Note: c.Note}
}

type objectKey struct{ group, resource, namespace, name string }

// join attaches each etcd write to the request that made it: first by
// the object and the resourceVersion the request's response carries (the
// write's revision), then, for a request whose response names no
// version (a binding, an eviction, a request logged at Metadata, a
// delete), by the object and the latest request on it no later than the
// write. A write is seen (its Time) after its request was received, on
// the same clock: a request after a write did not make it. reqs and
// writes are in time order.
func join(reqs []Request, writes []EtcdWrite) {
	byObject := map[objectKey][]int{}
	for i, r := range reqs {
		if r.Read() || r.resource == "" || r.Code >= 300 {
			continue
		}
		k := objectKey{r.group, r.resource, r.Namespace, r.Name}
		byObject[k] = append(byObject[k], i)
	}
	link := func(i int, w *EtcdWrite) {
		w.Request, w.userAgent = reqs[i].AuditID, reqs[i].UserAgent
		reqs[i].Etcd = append(reqs[i].Etcd, w.Revision)
	}
	for wi := range writes {
		w := &writes[wi]
		for _, i := range byObject[objectKey{w.Group, w.Resource, w.Namespace, w.Name}] {
			if w.Time.Before(reqs[i].Time) {
				// a delete answers with the object's last version, an
				// earlier write's revision
				break
			}
			if rv, err := strconv.ParseInt(reqs[i].ResourceVersion, 10, 64); err == nil && rv == w.Revision {
				link(i, w)
				break
			}
		}
	}
	for wi := range writes {
		w := &writes[wi]
		if w.Request != "" {
			continue
		}
		best := -1
		for _, i := range byObject[objectKey{w.Group, w.Resource, w.Namespace, w.Name}] {
			r := reqs[i]
			if w.Type == etcdwatch.Deleted && r.Verb != "delete" && r.Verb != "deletecollection" {
				continue
			}
			if r.Time.After(w.Time) {
				break // a request comes before its write
			}
			if r.ResourceVersion != "" && r.Verb != "delete" {
				continue // it names its own write
			}
			best = i
		}
		if best >= 0 {
			link(best, w)
		}
	}
	for i := range reqs {
		slices.Sort(reqs[i].Etcd)
	}
}
