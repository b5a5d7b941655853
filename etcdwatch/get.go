package etcdwatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/devk/devk/internal/output"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// GetOptions are `devk etcd get`: Target is the object.
type GetOptions struct {
	Query
	// Rev reads the value as it was at that revision (0: now).
	Rev int64
}

// Validate checks what can be checked before connecting.
func (o GetOptions) Validate() error {
	if o.Target == "" {
		return fmt.Errorf("get: name a key or RESOURCE[/NAMESPACE]/NAME")
	}
	if err := validRev("--rev", o.Rev); err != nil {
		return err
	}
	return o.validate("get", ResolveObject, nil)
}

// GetResult is one decoded key of `get -o json`.
type GetResult struct {
	KeyInfo
	// Revision is the store revision the read was made at.
	Revision       int64 `json:"revision"`
	CreateRevision int64 `json:"createRevision"`
	ModRevision    int64 `json:"modRevision"`
	Version        int64 `json:"version"`
	Value          Value `json:"value"`
}

// Get reads one key, at a revision if asked, and prints it decoded.
func Get(ctx context.Context, o GetOptions) error {
	cli, t, _, err := o.connect(ctx, o.Validate, ResolveObject, nil)
	if err != nil {
		return err
	}
	defer cli.Close()
	var opts []clientv3.OpOption
	if o.Rev > 0 {
		opts = append(opts, clientv3.WithRev(o.Rev))
	}
	resp, err := cli.Get(ctx, t.Key, opts...)
	if err != nil {
		if o.Rev > 0 {
			err = explainRevision(ctx, cli.Client, o.Rev, err)
		}
		return fmt.Errorf("get %s: %w", t.Key, err)
	}
	if len(resp.Kvs) == 0 {
		return notFound(ctx, cli, t, resp.Header.Revision, o.Rev)
	}
	kv := resp.Kvs[0]
	info := ParseKey(cli.Endpoint.Prefix, t.Key)
	r := GetResult{
		KeyInfo:        info,
		Revision:       resp.Header.Revision,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Version:        kv.Version,
		Value:          DecodeKey(info, kv.Value, o.Decode),
	}
	if o.Rev > 0 {
		r.Revision = o.Rev
	}
	if o.Format.Structured() {
		return output.Write(o.Out, o.Format, r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n", t.Key)
	fmt.Fprintf(&b, "# written at revision %d (created at %d, version %d), read at %d: %s\n", kv.ModRevision, kv.CreateRevision, kv.Version, r.Revision, r.Value.Summary)
	if r.Value.Redacted > 0 {
		fmt.Fprintf(&b, "# %d secret values redacted: --show-secrets shows them\n", r.Value.Redacted)
	}
	if r.Value.Problem != "" {
		fmt.Fprintf(&b, "# not decoded: %s\n", r.Value.Problem)
	}
	if r.Value.HasDoc {
		b.WriteString(r.Value.Render(YAML))
	}
	_, err = io.WriteString(o.Out, b.String())
	return err
}

// notFound says a key does not exist, and where to look instead: the same
// name in other namespaces, or the keys under it when it is a prefix.
func notFound(ctx context.Context, cli *Client, t Target, rev, askedRev int64) error {
	at := fmt.Sprintf("at revision %d", rev)
	if askedRev > 0 {
		at = fmt.Sprintf("at revision %d (now %d)", askedRev, rev)
	}
	msg := fmt.Sprintf("%s %s", t.Key, at)
	if resp, err := cli.Get(ctx, strings.TrimSuffix(t.Key, "/")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil && resp.Count > 0 {
		return fmt.Errorf("%w: %s; it is a prefix of %d keys: list them with `devk etcd ls %s/`", ErrNotFound, msg, resp.Count, strings.TrimSuffix(t.Key, "/"))
	}
	if t.Resource != nil && t.Resource.Namespaced && t.Namespace != "" {
		name := t.Key[strings.LastIndex(t.Key, "/")+1:]
		base := strings.TrimSuffix(t.Key, t.Namespace+"/"+name)
		var others []string
		// keys only, stopped after a few matches: an error path should
		// stay cheap
		_, _ = rangeKeys(ctx, cli, base, rev, func(e KeyEntry) error {
			if e.Name == name {
				others = append(others, e.Namespace)
				if len(others) == maxOtherNamespaces {
					return errStop
				}
			}
			return nil
		}, cli.Endpoint.Prefix)
		if len(others) > 0 {
			return fmt.Errorf("%w: %s; %s named %q exist in namespace %s: name it as %s/%s/%s", ErrNotFound, msg, t.Resource.Name, name, strings.Join(others, ", "), t.Resource.Name, others[0], name)
		}
	}
	return fmt.Errorf("%w: %s; `devk etcd ls` lists the keys that exist", ErrNotFound, msg)
}

// maxOtherNamespaces bounds the namespaces a not-found error names.
const maxOtherNamespaces = 5

// errStop ends a rangeKeys walk early.
var errStop = errors.New("stop")
