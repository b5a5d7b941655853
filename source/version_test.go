package source

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
)

func TestSemverFromDescribe(t *testing.T) {
	tests := []struct {
		name     string
		describe string
		dirty    bool
		want     string
	}{
		{"on a tag", "v1.34.4", false, "v1.34.4"},
		{"on a tag, dirty", "v1.34.4", true, "v1.34.4-dirty"},
		{"past a tag", "v1.34.4-3-g0123456789abcd", false, "v1.34.4-3+0123456789abcd"},
		{"past a tag, dirty", "v1.34.4-3-g0123456789abcd", true, "v1.34.4-3+0123456789abcd-dirty"},
		{"past a pre-release", "v1.35.0-alpha.1-12-g0123456789abcd", false, "v1.35.0-alpha.1.12+0123456789abcd"},
		{"on a pre-release", "v1.35.0-rc.1", false, "v1.35.0-rc.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SemverFromDescribe(tc.describe, tc.dirty); got != tc.want {
				t.Fatalf("SemverFromDescribe(%q, %v) = %q, want %q", tc.describe, tc.dirty, got, tc.want)
			}
		})
	}
}

func TestMajorMinor(t *testing.T) {
	tests := []struct{ version, major, minor string }{
		{"v1.34.4", "1", "34"},
		{"v1.34.4-dirty", "1", "34+"},
		{"v1.34.4-3+0123456789abcd", "1", "34+"},
		{"v1.35.0-alpha.1.12+0123456789abcd", "1", "35+"},
		{"not-a-version", "", ""},
	}
	for _, tc := range tests {
		major, minor := MajorMinor(tc.version)
		if major != tc.major || minor != tc.minor {
			t.Errorf("MajorMinor(%q) = %q, %q; want %q, %q", tc.version, major, minor, tc.major, tc.minor)
		}
	}
}

func TestFind(t *testing.T) {
	root := testtree.Copy(t)
	for _, dir := range []string{root, filepath.Join(root, "staging", "src", "k8s.io", "client-go", "pkg")} {
		tr, err := Find(dir)
		if err != nil {
			t.Fatalf("Find(%s): %v", dir, err)
		}
		if tr.Root != root {
			t.Fatalf("Find(%s) = %s, want %s", dir, tr.Root, root)
		}
	}
	_, err := Find(t.TempDir())
	if !errors.Is(err, ErrNoTree) || !strings.Contains(err.Error(), "devk source get") {
		t.Fatalf("outside a tree: err = %v, want ErrNoTree saying how to get one", err)
	}
}

func TestVersion(t *testing.T) {
	ctx := context.Background()
	root := testtree.New(t)
	tr := &Tree{Root: root}
	t.Setenv("SOURCE_DATE_EPOCH", "")

	v, err := tr.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != testtree.Tag || v.GitTreeState != "clean" || v.GitMajor != "1" || v.GitMinor != "34" {
		t.Fatalf("clean tagged tree: %+v", v)
	}
	if v.BuildDate != testtree.CommitDate {
		t.Fatalf("buildDate = %s, want the commit time %s", v.BuildDate, testtree.CommitDate)
	}
	if len(v.GitCommit) != 40 {
		t.Fatalf("gitCommit = %q", v.GitCommit)
	}

	// An untracked file makes the tree dirty, as in hack/lib/version.sh.
	if err := os.WriteFile(filepath.Join(root, "new.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err = tr.Version(ctx); err != nil || v.GitVersion != "v1.34.0-dirty" || v.GitTreeState != "dirty" || v.GitMinor != "34+" {
		t.Fatalf("untracked file: %+v, %v", v, err)
	}

	// A commit past the tag gives -N+<14 hex>.
	testtree.Git(t, root, "add", "-A")
	testtree.Git(t, root, "commit", "-q", "-m", "more")
	if v, err = tr.Version(ctx); err != nil || !regexp.MustCompile(`^v1\.34\.0-1\+[0-9a-f]{14}$`).MatchString(v.GitVersion) {
		t.Fatalf("one commit past the tag: %+v, %v", v, err)
	}

	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if v, err = tr.Version(ctx); err != nil || v.BuildDate != "2023-11-14T22:13:20Z" {
		t.Fatalf("SOURCE_DATE_EPOCH: %+v, %v", v, err)
	}
}

func TestVersionWithoutGit(t *testing.T) {
	tr := &Tree{Root: testtree.Copy(t)}
	_, err := tr.Version(context.Background())
	if !errors.Is(err, ErrNoGit) {
		t.Fatalf("err = %v, want ErrNoGit", err)
	}
}

func TestGoVersionsAndEtcd(t *testing.T) {
	tr := &Tree{Root: testtree.Copy(t)}
	minimum, release, err := tr.GoVersions()
	if err != nil || minimum != "1.24.0" || release != "1.24.12" {
		t.Fatalf("GoVersions = %q, %q, %v", minimum, release, err)
	}
	if v, err := tr.EtcdVersion(); err != nil || v != "v3.6.5" {
		t.Fatalf("EtcdVersion = %q, %v", v, err)
	}
}
