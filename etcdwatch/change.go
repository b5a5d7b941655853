// Package etcdwatch reads a Kubernetes cluster's etcd the way a
// contributor wants to see it: values decoded (protobuf through the
// k8s.io/api scheme, JSON pretty-printed, encrypted values named, the rest
// summarised), keys mapped to resources, a decoded watch stream with a
// diff per modification, and the exact set of changes between two
// revisions, found from etcd's history rather than by dumping the
// database.
package etcdwatch

import (
	"bytes"
	"fmt"
	"io"

	"github.com/devk/devk/internal/output"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ChangeType is what happened to a key.
type ChangeType string

const (
	Added    ChangeType = "ADDED"
	Modified ChangeType = "MODIFIED"
	Deleted  ChangeType = "DELETED"
	// AddedDeleted is a key created and deleted within a diff's window.
	AddedDeleted ChangeType = "ADDED+DELETED"
)

// Change is what happened to one key: one watch event, or everything
// between two revisions for diff.
type Change struct {
	Type ChangeType `json:"type"`
	KeyInfo
	// FromRevision is the revision of the value before (0 when the key
	// did not exist), ToRevision the revision of the change.
	FromRevision int64 `json:"fromRevision,omitempty"`
	ToRevision   int64 `json:"toRevision"`
	// Writes counts the writes to the key folded into this change.
	Writes int    `json:"writes,omitempty"`
	Before *Value `json:"before,omitempty"`
	After  *Value `json:"after,omitempty"`
	// Diff is the unified diff of the rendered values.
	Diff string `json:"diff,omitempty"`
	// Note explains an empty or partial diff.
	Note string `json:"note,omitempty"`
}

// changeBuilder turns raw key-values into decoded Changes.
type changeBuilder struct {
	prefix string
	decode DecodeOptions
	format Format
	// cache, when set, keeps recent renderings so that a watch decodes
	// each value once: as the "after" of one event and the "before" of
	// the next on the same key.
	cache *renderCache
}

type rendered struct {
	rev   int64
	value Value
	text  string
}

// renderCache holds the latest rendering of up to max keys: bounded, so
// that a watch's memory does not grow with the number of keys it sees.
type renderCache struct {
	max     int
	entries map[string]rendered
}

func newRenderCache(max int) *renderCache {
	return &renderCache{max: max, entries: make(map[string]rendered, max)}
}

// render decodes and renders kv, or reuses the rendering of the same
// revision of the key.
func (b changeBuilder) render(kv *mvccpb.KeyValue) (Value, string) {
	key := string(kv.Key)
	if b.cache != nil {
		if r, ok := b.cache.entries[key]; ok && r.rev == kv.ModRevision {
			return r.value, r.text
		}
	}
	v := DecodeKey(ParseKey(b.prefix, key), kv.Value, b.decode)
	text := v.Render(b.format)
	if b.cache != nil {
		if _, ok := b.cache.entries[key]; !ok && len(b.cache.entries) >= b.cache.max {
			for k := range b.cache.entries { // evict one, any
				delete(b.cache.entries, k)
				break
			}
		}
		b.cache.entries[key] = rendered{kv.ModRevision, v, text}
	}
	return v, text
}

// forget drops a deleted key from the cache.
func (b changeBuilder) forget(key string) {
	if b.cache != nil {
		delete(b.cache.entries, key)
	}
}

// build decodes before and after and diffs them. before or after is nil
// when the key did not exist at that end; last is the final value of a
// key that was created and deleted in the window.
func (b changeBuilder) build(key string, before, after, last *mvccpb.KeyValue, toRev int64, writes int) Change {
	c := Change{KeyInfo: ParseKey(b.prefix, key), ToRevision: toRev, Writes: writes}
	var from, to string
	fromLabel, toLabel := key+" (absent)", key+" (absent)"
	if before != nil {
		v, text := b.render(before)
		c.Before = &v
		c.FromRevision = before.ModRevision
		from = text
		fromLabel = fmt.Sprintf("%s @%d", key, before.ModRevision)
	}
	if after != nil {
		v, text := b.render(after)
		c.After = &v
		to = text
		toLabel = fmt.Sprintf("%s @%d", key, toRev)
	} else {
		toLabel = fmt.Sprintf("%s @%d (deleted)", key, toRev)
		b.forget(key)
	}
	switch {
	case before == nil && after == nil:
		c.Type = AddedDeleted
		if last != nil {
			v, text := b.render(last)
			c.After = &v
			to = text
			c.Note = fmt.Sprintf("created and deleted between the two revisions; its last value was written at revision %d", last.ModRevision)
		}
	case before == nil:
		c.Type = Added
	case after == nil:
		c.Type = Deleted
	default:
		c.Type = Modified
	}
	c.Diff = UnifiedDiff(fromLabel, toLabel, from, to)
	if c.Type == Modified && c.Diff == "" {
		switch {
		case bytes.Equal(before.Value, after.Value):
			c.Note = "written with the same value"
		default:
			c.Note = "the value changed only where devk does not show it (ignored fields, redacted Secret data, or encrypted bytes)"
		}
	}
	return c
}

// writeChange prints one change: in text a header line, the note and the
// diff; in JSON or YAML one document.
func writeChange(w io.Writer, c Change, f output.Format) error {
	if f.Structured() {
		return output.Write(w, f, c)
	}
	var buf bytes.Buffer
	{
		buf.WriteString(c.header())
		buf.WriteString("\n")
		if c.Note != "" {
			fmt.Fprintf(&buf, "# %s\n", c.Note)
		}
		buf.WriteString(c.Diff)
	}
	// one Write per change, so that a reader sees whole events
	_, err := w.Write(buf.Bytes())
	return err
}

func (c Change) header() string {
	what := c.Key
	if c.Resource != "" && c.Name != "" {
		what = c.Resource + " " + c.Object()
	}
	revs := fmt.Sprintf("revision %d", c.ToRevision)
	if c.FromRevision != 0 {
		revs = fmt.Sprintf("revision %d -> %d", c.FromRevision, c.ToRevision)
	}
	writes := ""
	if c.Writes > 1 {
		writes = fmt.Sprintf(", %d writes", c.Writes)
	}
	return fmt.Sprintf("%s %s (%s%s)", c.Type, what, revs, writes)
}
