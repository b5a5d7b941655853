package archtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxPackageLines is how many lines a package's Go files (its tests
// aside) may hold: a package past it holds more than one concern and is
// split, as cluster/ and cmd/devk were.
const maxPackageLines = 4000

// TestPackageSize checks that no package of devk's has more than
// maxPackageLines lines outside its tests (every .go file of its
// directory but *_test.go, whatever its build tags).
func TestPackageSize(t *testing.T) {
	largest, most := "", 0
	for _, line := range goList(t, moduleRoot(t), "{{.ImportPath}} {{.Dir}}") {
		pkg, dir, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("go list printed %q", line)
		}
		n := packageLines(t, dir)
		if n > maxPackageLines {
			t.Errorf("package %s has %d lines outside its tests, more than %d: split it by concern and map the new packages in ARCHITECTURE.md", strings.TrimPrefix(pkg, module), n, maxPackageLines)
		}
		if n > most {
			largest, most = strings.TrimPrefix(pkg, module), n
		}
	}
	if most == 0 {
		t.Fatal("go list found no package with Go files")
	}
	t.Logf("the largest package is %s, %d lines outside its tests (at most %d)", largest, most, maxPackageLines)
}

// packageLines counts the lines of dir's Go files but its tests.
func packageLines(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(data, []byte("\n"))
	}
	return n
}
