// Package testtree makes small Kubernetes-shaped source trees for tests: a
// go.work, a k8s.io/kubernetes module with cmd/kube-apiserver and
// cmd/kubectl mains that print their stamped versions, a test image's main
// with its Dockerfile (test/images/agnhost) and a library (test/utils),
// two staging modules, and kubeadm's constants naming etcd and CoreDNS
// versions. Builds of it are real go builds, with no downloads.
package testtree

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// CommitDate is the fixed date of the fixture's commits.
const CommitDate = "2026-02-10T12:53:36Z"

// Tag is the release tag the fixture's first commit carries.
const Tag = "v1.34.0"

// fixtureDir is testdata/tree beside this file.
func fixtureDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "tree")
}

// New copies the fixture into a temp dir, commits it and tags it Tag.
func New(t testing.TB) string {
	t.Helper()
	dir := Copy(t)
	Git(t, dir, "init", "-q")
	Git(t, dir, "add", "-A")
	Git(t, dir, "commit", "-q", "-m", "fixture")
	Git(t, dir, "tag", Tag)
	return dir
}

// Copy copies the fixture into a temp dir without git.
func Copy(t testing.TB) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "kubernetes")
	src := fixtureDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(string(data), "#!") {
			mode = 0o755
		}
		return os.WriteFile(target, data, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// Git runs git in dir with a fixed identity and date, failing the test on error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@localhost", "GIT_AUTHOR_DATE="+CommitDate,
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@localhost", "GIT_COMMITTER_DATE="+CommitDate,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// HashDir sums every path, mode, link target and file content under dir,
// so any write beneath it (a new file, a changed one, .git/index
// included) changes the sum.
func HashDir(t testing.TB, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		io.WriteString(h, rel+"\x00"+fi.Mode().String()+"\x00")
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			io.WriteString(h, target)
		case fi.Mode().IsRegular():
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		io.WriteString(h, "\x00")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
