// Package loop is `devk watch`: it runs build → push → swap → verify
// each time a source file the components depend on is saved. It watches
// only the directories of the Go packages the components import from the
// tree (go list -deps), not the tree's 100,000 files, debounces bursts of
// saves, and coalesces the saves made during a cycle into exactly one
// next cycle. (The name keeps it apart from etcdwatch, `devk etcd watch`.)
package loop

import (
	"bufio"
	"bytes"
	"context"
	"path/filepath"
	"sort"
	"strings"

	"github.com/devk/devk/internal/execx"
)

// DepDirs lists the directories, inside root, of every package that the
// main packages pkgs depend on (themselves included), plus the module
// roots whose go.mod, go.sum or go.work change what gets built. The go
// command runs in root, so workspace and staging modules resolve as they
// do for the build.
func DepDirs(ctx context.Context, root string, pkgs []string, env []string) ([]string, error) {
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}\t{{with .Module}}{{.Dir}}{{end}}{{end}}"}, pkgs...)
	out, err := execx.Output(ctx, execx.Cmd{Name: "go", Args: args, Dir: root, Env: env})
	if err != nil {
		return nil, err
	}
	root = filepath.Clean(root)
	seen := map[string]bool{root: true} // go.work lives at the root
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		dir, modDir, _ := strings.Cut(sc.Text(), "\t")
		for _, d := range []string{dir, modDir} {
			if d != "" && within(root, d) && !Ignored(root, d) {
				seen[filepath.Clean(d)] = true
			}
		}
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs, nil
}

func within(root, path string) bool {
	return path == root || strings.HasPrefix(path, root+string(filepath.Separator))
}

// Ignored reports whether a change to path (inside root) can be left
// alone: devk's and git's own directories, generated code, tests, and the
// temp and backup files editors write beside the real ones.
func Ignored(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return true
	}
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		switch part {
		case "_output", ".git", "testdata":
			return true
		}
	}
	base := filepath.Base(path)
	switch {
	case strings.HasPrefix(base, "zz_generated"),
		strings.HasSuffix(base, "_test.go"),
		strings.HasSuffix(base, "~"), // emacs, many others
		strings.HasPrefix(base, ".#"),
		strings.HasPrefix(base, "#") && strings.HasSuffix(base, "#"), // emacs autosave
		strings.HasPrefix(base, ".") && (strings.HasSuffix(base, ".swp") || strings.HasSuffix(base, ".swx") || strings.HasSuffix(base, ".swo")), // vim
		base == "4913", // vim's probe file
		strings.HasSuffix(base, ".tmp"),
		strings.HasSuffix(base, ".orig"),
		strings.HasSuffix(base, ".rej"),
		strings.HasPrefix(base, ".goutputstream-"), // gedit
		strings.Contains(base, "___jb_"),           // JetBrains safe write
		strings.HasSuffix(base, ".crswap"):         // browser editors
		return true
	}
	return false
}
