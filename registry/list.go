package registry

import (
	"context"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/devk/devk/image"
)

// Repository is one repository of a registry with its tags.
type Repository struct {
	Name string `json:"name"`
	Tags []Tag  `json:"tags"`
}

// Tag is a tag and the manifest digest it points to now.
type Tag struct {
	Tag    string `json:"tag"`
	Digest string `json:"digest"`
}

// List asks a registry (any registry, through the distribution API) for
// its repositories, their tags and the digest of each tag. With a path
// prefix in the remote's address only repositories under it are listed.
func List(ctx context.Context, r *image.Remote) ([]Repository, error) {
	names, err := r.Catalog(ctx)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if _, p, ok := strings.Cut(r.Addr, "/"); ok {
		prefix = p + "/"
	}
	sort.Strings(names)
	var out []Repository
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		out = append(out, Repository{Name: n})
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range out {
		g.Go(func() error {
			repo, err := r.Repository(strings.TrimPrefix(out[i].Name, prefix))
			if err != nil {
				return err
			}
			tags, err := r.Tags(ctx, repo)
			if err != nil {
				return err
			}
			sort.Strings(tags)
			for _, t := range tags {
				d, err := r.Head(ctx, repo.Tag(t))
				if image.IsNotFound(err) {
					continue // deleted while we looked
				}
				if err != nil {
					return err
				}
				out[i].Tags = append(out[i].Tags, Tag{Tag: t, Digest: d.Digest.String()})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
