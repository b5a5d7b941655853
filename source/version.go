package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/devk/devk/internal/execx"
)

// Version is what hack/lib/version.sh computes for a tree, the values the
// binaries are stamped with.
type Version struct {
	GitVersion   string `json:"gitVersion"`
	GitMajor     string `json:"gitMajor"`
	GitMinor     string `json:"gitMinor"`
	GitCommit    string `json:"gitCommit"`
	GitTreeState string `json:"gitTreeState"`
	// BuildDate is SOURCE_DATE_EPOCH when set, else the commit time, so
	// that unchanged sources give byte-identical binaries.
	BuildDate string `json:"buildDate"`
	// CommitTime is HEAD's committer time.
	CommitTime time.Time `json:"commitTime"`
}

// ErrNoGit is returned for a tree without a git repository or tag.
var ErrNoGit = errors.New("cannot tell the tree's version")

// Version runs git the way hack/lib/version.sh does.
func (t *Tree) Version(ctx context.Context) (Version, error) {
	var describe, show, status []byte
	git := func(out *[]byte, args ...string) func() error {
		return func() error {
			b, err := execx.Output(ctx, execx.Cmd{Name: "git", Args: append([]string{"-C", t.Root}, args...)})
			*out = b
			return err
		}
	}
	if _, err := os.Stat(t.Root + "/.git"); err != nil {
		return Version{}, fmt.Errorf("%w: %s is not a git repository; `git init && git add -A && git commit -m init && git tag v1.X.Y` there, or use a tree from `devk source get`", ErrNoGit, t.Root)
	}
	var g errgroup.Group
	g.Go(git(&describe, "describe", "--tags", "--match=v*", "--abbrev=14", "HEAD^{commit}"))
	g.Go(git(&show, "show", "-s", "--format=%H %ct", "HEAD"))
	g.Go(git(&status, "status", "--porcelain"))
	if err := g.Wait(); err != nil {
		return Version{}, fmt.Errorf("%w: %v\nthe tree needs a commit and a v* tag (a tree from `devk source get` has both)", ErrNoGit, err)
	}
	commit, ct, _ := strings.Cut(strings.TrimSpace(string(show)), " ")
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return Version{}, fmt.Errorf("%w: git show printed %q", ErrNoGit, show)
	}
	v := Version{
		GitCommit:    commit,
		GitTreeState: "clean",
		CommitTime:   time.Unix(secs, 0).UTC(),
	}
	if len(strings.TrimSpace(string(status))) > 0 {
		v.GitTreeState = "dirty"
	}
	v.GitVersion = SemverFromDescribe(strings.TrimSpace(string(describe)), v.GitTreeState == "dirty")
	v.GitMajor, v.GitMinor = MajorMinor(v.GitVersion)
	date := v.CommitTime
	if sde := os.Getenv("SOURCE_DATE_EPOCH"); sde != "" {
		s, err := strconv.ParseInt(sde, 10, 64)
		if err != nil {
			return Version{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", sde)
		}
		date = time.Unix(s, 0).UTC()
	}
	v.BuildDate = date.Format("2006-01-02T15:04:05Z")
	return v, nil
}

var (
	distanceToSubversion = regexp.MustCompile(`-([0-9]+)-g([0-9a-f]{14})$`)
	distanceToTag        = regexp.MustCompile(`-g([0-9a-f]{14})$`)
	semverRE             = regexp.MustCompile(`^v([0-9]+)\.([0-9]+)(\.[0-9]+)?([-].*)?([+].*)?$`)
)

// SemverFromDescribe turns `git describe --abbrev=14` output into the
// semantic version hack/lib/version.sh makes of it:
//
//	v1.34.4                          -> v1.34.4
//	v1.34.4-3-g0123456789abcd        -> v1.34.4-3+0123456789abcd
//	v1.35.0-alpha.1-3-g0123456789abcd -> v1.35.0-alpha.1.3+0123456789abcd
//
// and appends -dirty for a dirty tree (untracked files count, as there).
func SemverFromDescribe(describe string, dirty bool) string {
	v := describe
	switch strings.Count(v, "-") {
	case 3:
		v = distanceToSubversion.ReplaceAllString(v, ".$1+$2")
	case 2:
		v = distanceToTag.ReplaceAllString(v, "+$1")
	}
	if dirty {
		v += DirtySuffix
	}
	return v
}

// DirtySuffix ends the version of a build of a tree with local changes.
const DirtySuffix = "-dirty"

// MajorMinor extracts gitMajor and gitMinor; the minor gets a "+" when the
// version has a pre-release or distance part, as version.sh does.
func MajorMinor(gitVersion string) (major, minor string) {
	m := semverRE.FindStringSubmatch(gitVersion)
	if m == nil {
		return "", ""
	}
	major, minor = m[1], m[2]
	if m[4] != "" {
		minor += "+"
	}
	return major, minor
}
