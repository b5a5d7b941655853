package debug

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/devk/devk/srcpath"
)

// breakAt is a --break checked against the tree.
type breakAt struct {
	// file is tree-relative (slashes); reported is the path the binary
	// reports for it, which Delve sets the breakpoint at.
	file, reported string
	line           int
	// pkg is the file's package's import path: compiled with -N -l, so
	// that the line keeps its code.
	pkg string
}

// nearestShown is how many lines with code a --break to a line without
// any names, on each side.
const nearestShown = 2

// parseBreaks checks each FILE:LINE: a Go file of one of the tree's
// modules, a line within it where a statement or a function begins (a
// blank line, a comment or a declaration has no code to stop at; the
// error names the nearest lines that do).
func parseBreaks(root string, m *srcpath.Map, specs []string) ([]breakAt, error) {
	var out []breakAt
	for _, spec := range specs {
		b, err := parseBreak(root, m, spec)
		if err != nil {
			return nil, fmt.Errorf("--break %s: %w (nothing was changed)", spec, err)
		}
		out = append(out, b)
	}
	return out, nil
}

func parseBreak(root string, m *srcpath.Map, spec string) (breakAt, error) {
	file, lineStr, ok := strings.Cut(spec, ":")
	line, err := strconv.Atoi(lineStr)
	if !ok || err != nil || line < 1 || !strings.HasSuffix(file, ".go") {
		return breakAt{}, fmt.Errorf("want FILE:LINE, a Go file of the tree and a line number, e.g. staging/src/k8s.io/apiserver/pkg/server/routes/version.go:40")
	}
	if filepath.IsAbs(file) {
		rel, err := filepath.Rel(root, file)
		if err != nil || !filepath.IsLocal(rel) {
			return breakAt{}, fmt.Errorf("%s is not in the tree %s", file, root)
		}
		file = rel
	}
	file = path.Clean(filepath.ToSlash(file))
	reported, ok := m.Reported(file)
	if !ok {
		return breakAt{}, fmt.Errorf("%s is in none of the tree's modules (give a path relative to the tree %s, such as staging/src/k8s.io/apiserver/...)", file, root)
	}
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return breakAt{}, fmt.Errorf("no such file in the tree: %w", err)
	}
	lines, total, err := codeLines(file, src)
	if err != nil {
		return breakAt{}, err
	}
	if line > total {
		return breakAt{}, fmt.Errorf("%s has %d lines", file, total)
	}
	if !slices.Contains(lines, line) {
		return breakAt{}, fmt.Errorf("line %d of %s has no code to stop at; the nearest lines that do: %s", line, file, nearest(lines, line))
	}
	return breakAt{file: file, reported: reported, line: line, pkg: path.Dir(reported)}, nil
}

// codeLines are the lines of a Go file where a statement or a function
// (its declaration, a literal) begins, sorted, and the file's length.
func codeLines(name string, src []byte) ([]int, int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, 0, fmt.Errorf("parse %s: %w", name, err)
	}
	var lines []int
	ast.Inspect(f, func(n ast.Node) bool {
		switch n.(type) {
		case *ast.BlockStmt, *ast.EmptyStmt:
		case ast.Stmt, *ast.FuncDecl, *ast.FuncLit:
			lines = append(lines, fset.Position(n.Pos()).Line)
		}
		return true
	})
	slices.Sort(lines)
	return slices.Compact(lines), fset.File(f.Pos()).LineCount(), nil
}

// nearest names up to nearestShown lines of lines before line and as
// many after it.
func nearest(lines []int, line int) string {
	i, _ := slices.BinarySearch(lines, line)
	var near []string
	for _, l := range lines[max(0, i-nearestShown):min(len(lines), i+nearestShown)] {
		near = append(near, strconv.Itoa(l))
	}
	if len(near) == 0 {
		return "none (the file has no functions)"
	}
	return strings.Join(near, ", ")
}
