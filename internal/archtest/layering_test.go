// Package archtest holds the checks that keep ARCHITECTURE.md true of the
// code: it has no code of its own.
package archtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module is devk's module path.
const module = "github.com/devk/devk/"

// outsideTheMap are the packages ARCHITECTURE.md's tree leaves out on
// purpose: programs of their own, not parts of devk.
var outsideTheMap = []string{"bench/", "e2e", "hack/"}

// TestLayering checks every import of one devk package by another against
// ARCHITECTURE.md's package tree, where dependencies point down: a package
// may import only packages the tree lists below it. Every package must be
// in the tree, so that the map cannot fall behind the code.
func TestLayering(t *testing.T) {
	root := moduleRoot(t)
	order := treeOrder(t, filepath.Join(root, "ARCHITECTURE.md"))
	rank := map[string]int{}
	for i, p := range order {
		rank[p] = i
	}
	edges, pkgs := 0, 0
	for _, line := range goList(t, root, `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`) {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok || outside(pkg) {
			continue
		}
		pkgs++
		from, listed := rank[pkg]
		if !listed {
			t.Errorf("package %s is not in ARCHITECTURE.md's package tree: add a line saying what it owns", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			edges++
			if to, listed := rank[dep]; listed && to <= from {
				t.Errorf("%s imports %s, which ARCHITECTURE.md's tree lists above it: move the code, or the line if the map is wrong", pkg, dep)
			}
		}
	}
	if pkgs == 0 || edges == 0 {
		t.Fatalf("checked %d packages and %d imports: go list found nothing to check", pkgs, edges)
	}
	verdict := "none points up"
	if t.Failed() {
		verdict = "some point up or are not mapped"
	}
	t.Logf("%d imports between %d packages checked against a tree of %d: %s", edges, pkgs, len(order), verdict)
}

// moduleRoot is devk's module directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// goList runs `go list -f format ./...` in root: a line per package.
func goList(t *testing.T, root, format string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", format, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func outside(pkg string) bool {
	for _, o := range outsideTheMap {
		if pkg == strings.TrimSuffix(o, "/") || strings.HasPrefix(pkg, o) {
			return true
		}
	}
	return false
}

// treeOrder reads the package tree (the first fenced block of
// ARCHITECTURE.md's "Packages" section): the packages top to bottom, each
// with its parent's path ("│    config" under "├─ cluster" is
// cluster/config; cmd/devk's children are top-level packages).
func treeOrder(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := bytes.Cut(data, []byte("\n## Packages\n"))
	if !ok {
		t.Fatalf("%s has no ## Packages section", path)
	}
	_, after, ok = bytes.Cut(after, []byte("```\n"))
	block, _, ok2 := bytes.Cut(after, []byte("```"))
	if !ok || !ok2 {
		t.Fatalf("%s: no fenced package tree under ## Packages", path)
	}
	type level struct {
		indent int
		path   string
	}
	var stack []level
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(block))
	for sc.Scan() {
		line := sc.Text()
		name := strings.TrimLeft(line, " │├└─")
		if name == "" {
			continue
		}
		indent := len([]rune(line)) - len([]rune(name))
		name = strings.TrimSuffix(strings.Fields(name)[0], "/")
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		full := name
		if len(stack) > 0 && stack[len(stack)-1].path != "cmd/devk" {
			full = stack[len(stack)-1].path + "/" + name
		}
		stack = append(stack, level{indent, full})
		order = append(order, full)
	}
	if len(order) < 2 {
		t.Fatalf("%s: the package tree lists %d packages", path, len(order))
	}
	return order
}
