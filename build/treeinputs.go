package build

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/source"
)

// treeInputs hashes what one go build of the tree's components reads
// that can change: the go toolchain's version, the command line and its
// environment, and every file of the tree by path, size, modification
// time and mode (a symbolic link by its target), _output and .git left
// out. The same inputs make the same binaries, so compile skips go build
// when each binary was built from them (unchangedBuild) — the check
// costs a walk of the tree's directories (~0.3 s for Kubernetes' ~25,000
// files) where go build's own takes seconds. "" (never the same) when
// the go version is unknown or when go.mod or go.work reaches outside
// the tree (a replace or use of a directory elsewhere), whose files the
// walk would not see, or a part of the tree cannot be read.
func treeInputs(goVersion string, t *source.Tree, cmd execx.Cmd) (string, error) {
	if goVersion == "" {
		return "", nil
	}
	if out, err := localModulesOutside(t.Root); err != nil || out {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n%q\n%q\n", goVersion, cmd.Args, cmd.Env, goEnviron())
	output := filepath.Join(t.Root, "_output")
	err := filepath.WalkDir(t.Root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == output || d.Name() == ".git") {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(t.Root, path)
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%s", rel, fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "\x00%s", target)
		}
		h.Write([]byte{'\n'})
		return nil
	})
	if err != nil {
		// A file devk may not read (a directory another user made
		// private): go build decides what it needs, every time.
		return "", nil
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// localModulesOutside says whether the tree's go.mod or go.work uses a
// module from a directory outside the tree (a replace to a local path, a
// workspace's use of one): a contributor hacking on a dependency there.
func localModulesOutside(root string) (bool, error) {
	outside := func(dir, p string) bool {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		rel, err := filepath.Rel(root, p)
		return err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	local := func(path string) bool { return modfile.IsDirectoryPath(path) }
	if data, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil {
		f, err := modfile.Parse("go.mod", data, nil)
		if err != nil {
			return true, nil // go build says what is wrong
		}
		for _, r := range f.Replace {
			if local(r.New.Path) && outside(root, r.New.Path) {
				return true, nil
			}
		}
	} else if !os.IsNotExist(err) {
		return false, err
	}
	if data, err := os.ReadFile(filepath.Join(root, "go.work")); err == nil {
		f, err := modfile.ParseWork("go.work", data, nil)
		if err != nil {
			return true, nil
		}
		for _, u := range f.Use {
			if outside(root, u.Path) {
				return true, nil
			}
		}
		for _, r := range f.Replace {
			if local(r.New.Path) && outside(root, r.New.Path) {
				return true, nil
			}
		}
	} else if !os.IsNotExist(err) {
		return false, err
	}
	return false, nil
}
