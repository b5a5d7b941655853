package etcdwatch

import (
	"context"
	"fmt"
	"io"

	"github.com/devk/devk/internal/output"
	"github.com/devk/devk/internal/progress"
)

// Query is what every `devk etcd` command shares: which etcd, which keys
// of it, how values are shown and where. GetOptions, LsOptions,
// WatchOptions and DiffOptions embed it.
type Query struct {
	Conn ConnOptions
	// Target names the keys: for get, a key (/registry/...),
	// RESOURCE/NAME or RESOURCE/NAMESPACE/NAME; for ls, watch and diff,
	// "", RESOURCE, RESOURCE/NAMESPACE or a raw key prefix.
	Target string
	// Namespace is -n: the namespace of a RESOURCE/NAME, or of the keys
	// to list, watch or diff.
	Namespace string
	// Decode says how values are shown (ls shows keys only).
	Decode DecodeOptions
	// Format is how results are printed: text, or one JSON or YAML
	// document per result.
	Format output.Format
	// Out receives the results.
	Out io.Writer
	// Log receives progress and notes; nil discards them.
	Log progress.Reporter
}

// resolver turns a query's Target into a key (ResolveObject, for get) or
// a key prefix (ResolvePrefix, for ls, watch and diff) under the API
// server's etcd prefix.
type resolver func(prefix, arg, namespace string) (Target, error)

// validate checks what the commands share, before connecting: verb names
// the command in messages, resolve is how it reads Target, exclude are
// its --exclude names (watch, diff).
func (q Query) validate(verb string, resolve resolver, exclude []string) error {
	if q.Out == nil {
		return fmt.Errorf("%s: no output writer", verb)
	}
	if _, err := excludeSet(exclude, Target{}); err != nil {
		return err
	}
	_, err := resolve(q.Conn.Prefix, q.Target, q.Namespace)
	return err
}

// connect checks the command's options (validate, its Validate method),
// connects to etcd and resolves Target (and the exclude names) against
// the cluster's key prefix.
func (q Query) connect(ctx context.Context, validate func() error, resolve resolver, exclude []string) (*Client, Target, map[string]bool, error) {
	if err := validate(); err != nil {
		return nil, Target{}, nil, err
	}
	cli, err := Connect(ctx, q.Conn)
	if err != nil {
		return nil, Target{}, nil, err
	}
	t, err := resolve(cli.Endpoint.Prefix, q.Target, q.Namespace)
	if err == nil {
		var set map[string]bool
		if set, err = excludeSet(exclude, t); err == nil {
			return cli, t, set, nil
		}
	}
	cli.Close()
	return nil, Target{}, nil, err
}

// changes renders the changes watch and diff print, under the cluster's
// key prefix; cache is nil for a diff.
func (q Query) changes(cli *Client, cache *renderCache) changeBuilder {
	b := changeBuilder{prefix: cli.Endpoint.Prefix, decode: q.Decode, format: YAML, cache: cache}
	if q.Format == output.JSON {
		b.format = JSONFormat
	}
	return b
}

// log is the query's reporter, never nil.
func (q Query) log() progress.Reporter {
	if q.Log == nil {
		return progress.Discard()
	}
	return q.Log
}
