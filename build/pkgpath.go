package build

import (
	"encoding/json"
	"errors"
	"fmt"
	gobuild "go/build"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/source"
)

// PackageExample is the package path devk's help and errors show.
const PackageExample = "./test/images/agnhost"

// IsPackagePath says whether a build argument names a package directory
// (./test/images/agnhost, test/images/agnhost, an absolute path) rather
// than a component: no component name holds a '/' or starts with '.'.
func IsPackagePath(arg string) bool {
	return strings.HasPrefix(arg, ".") || strings.ContainsRune(arg, '/') || strings.ContainsRune(arg, filepath.Separator)
}

// majorSuffix is a last path element go build does not name its binary
// after (it takes the element before a major version suffix).
var majorSuffix = regexp.MustCompile(`^v[0-9]+$`)

// resolvePackage turns a package path into a component of the tree.
// Relative paths are taken from dir, the directory the tree was found
// from, as `go build -C dir` takes them. The directory must lie inside
// the tree and hold a main package for goos/goarch; the component and its
// binary are named after the directory; its image follows the Dockerfile
// beside the package where that is simple (dockerfileLayout). A path to a
// catalog component's package is that component.
func resolvePackage(t *source.Tree, dir, arg, goos, goarch string) (Component, error) {
	fail := func(format string, a ...any) (Component, error) {
		return Component{}, fmt.Errorf("package path %q: %s", arg, fmt.Sprintf(format, a...))
	}
	p := arg
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	outside := func() (Component, error) {
		return fail("%s is not inside the tree at %s: name a directory of the tree holding a main package, e.g. %s", p, t.Root, PackageExample)
	}
	root, err := filepath.EvalSymlinks(t.Root)
	if err != nil {
		return fail("%v", err)
	}
	real, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		if !within(t.Root, p) && !within(root, p) {
			return outside()
		}
		return fail("%s does not exist: name a directory of the tree holding a main package, e.g. %s", p, PackageExample)
	}
	if err != nil {
		return fail("%v", err)
	}
	if !within(root, real) {
		return outside()
	}
	rel, _ := filepath.Rel(root, real)
	for _, e := range strings.Split(rel, string(filepath.Separator)) {
		// go itself skips these in patterns; devk's own output is one.
		if strings.HasPrefix(e, ".") || strings.HasPrefix(e, "_") || e == "testdata" {
			return fail("%s is inside %q, which Go ignores: name a package of the tree's source, e.g. %s", p, e, PackageExample)
		}
	}
	ctxt := gobuild.Default
	ctxt.GOOS, ctxt.GOARCH, ctxt.CgoEnabled = goos, goarch, false
	pkg, err := ctxt.ImportDir(real, 0)
	var noGo *gobuild.NoGoError
	switch {
	case errors.As(err, &noGo):
		return fail("%s has no Go files for %s/%s: name a directory holding a main package, e.g. %s", p, goos, goarch, PackageExample)
	case err != nil:
		return fail("%v", err)
	case pkg.Name != "main":
		return fail("%s holds package %s, not a main package: name a directory holding a package main, e.g. %s", p, pkg.Name, PackageExample)
	}
	pkgPath := "./" + filepath.ToSlash(rel)
	name := filepath.Base(real)
	for _, c := range Catalog {
		if c.Package == pkgPath {
			return c, nil
		}
		if name == c.Name || name == c.Binary {
			return fail("its binary would be named %s, which is devk's component %s (%s): build that by its name, or another package", name, c.Name, c.Package)
		}
	}
	if majorSuffix.MatchString(name) {
		return fail("go names the binary of a package in a major-version directory (%s) after the directory above it: name a package whose directory is its binary's name", name)
	}
	if err := validname.Component(name); err != nil {
		return fail("the directory's name becomes the binary's and the image's: %v", err)
	}
	layout, err := dockerfileLayout(real, name)
	if err != nil {
		return fail("%v", err)
	}
	return Component{Name: name, Binary: name, Package: pkgPath, Layout: layout}, nil
}

// within says whether p lies strictly inside dir, lexically.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && filepath.IsLocal(rel)
}

// dockerfileLayout reads the Dockerfile beside a package, if any, for
// where its image keeps the binary: the final stage's ENTRYPOINT in exec
// form, when its first element is an absolute path to a file named like
// the binary (agnhost: ["/agnhost"]). The final stage's CMD in exec form
// comes along. Anything else (no Dockerfile, the shell form, a binary
// of another name) gives the default layout. Base images and the files
// they add (agnhost's has a shell and tools) are not reproduced.
func dockerfileLayout(dir, binary string) (ImageLayout, error) {
	data, err := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	if errors.Is(err, fs.ErrNotExist) {
		return ImageLayout{}, nil
	}
	if err != nil {
		return ImageLayout{}, err
	}
	var entrypoint, cmd []string
	for _, line := range dockerfileInstructions(string(data)) {
		word, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "FROM": // a new stage: what came before is not the image's
			entrypoint, cmd = nil, nil
		case "ENTRYPOINT":
			entrypoint = execForm(rest)
		case "CMD":
			cmd = execForm(rest)
		}
	}
	if len(entrypoint) == 0 || !imagePathOf(entrypoint[0], binary) {
		return ImageLayout{}, nil
	}
	return ImageLayout{Path: entrypoint[0], Entrypoint: entrypoint, Cmd: cmd}, nil
}

// dockerfileInstructions are a Dockerfile's instructions, one a string:
// comments and blank lines dropped, continued lines joined.
func dockerfileInstructions(src string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, strings.Join(strings.Fields(cur.String()), " "))
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}

// execForm reads an instruction's exec form (a JSON array of strings);
// the shell form gives nil.
func execForm(s string) []string {
	var args []string
	if !strings.HasPrefix(strings.TrimSpace(s), "[") || json.Unmarshal([]byte(s), &args) != nil {
		return nil
	}
	return args
}

// imagePathOf says whether p is a path in an image (validname.ImagePath)
// to a file named binary.
func imagePathOf(p, binary string) bool {
	return validname.ImagePath(p) == nil && path.Base(p) == binary
}
