package source

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
)

// The go.work and go.mod of k8s.io/kubernetes@v1.34.4, as the module
// proxy serves them.
func kubernetesFiles(t *testing.T) (gowork, gomod []byte) {
	t.Helper()
	gowork, err := os.ReadFile(filepath.Join("testdata", "kubernetes-v1.34.4.go.work"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err = os.ReadFile(filepath.Join("testdata", "kubernetes-v1.34.4.go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	return gowork, gomod
}

func TestWorkUses(t *testing.T) {
	gowork, _ := kubernetesFiles(t)
	names, err := workUses("go.work", gowork)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 31 || names[0] != "api" || !slices.Contains(names, "sample-controller") || slices.Contains(names, ".") {
		t.Fatalf("workUses = %q", names)
	}
	// a use written on one line, quoted, or as a path to climb is still
	// the name as written: the caller checks it
	names, err = workUses("go.work", []byte("go 1.24.0\nuse ./staging/src/k8s.io/api\nuse \"./staging/src/k8s.io/../../../x\"\nuse ./hack/tools\n"))
	if err != nil || !slices.Equal(names, []string{"api", "../../../x"}) {
		t.Fatalf("workUses of single-line uses = %q, %v", names, err)
	}
	if _, err := workUses("/tree/go.work", []byte("use (\n")); err == nil || !strings.Contains(err.Error(), "/tree/go.work:") {
		t.Fatalf("workUses of a broken go.work: %v; want the file and line", err)
	}
}

func TestDropUses(t *testing.T) {
	gowork, _ := kubernetesFiles(t)
	got, err := dropUses("go.work", gowork, []string{"sample-cli-plugin", "sample-controller"})
	if err != nil {
		t.Fatal(err)
	}
	// exactly the release's file without those two lines: comment, go
	// and godebug lines kept as they were
	want := strings.Replace(string(gowork), "\t./staging/src/k8s.io/sample-cli-plugin\n\t./staging/src/k8s.io/sample-controller\n", "", 1)
	if want == string(gowork) {
		t.Fatal("the fixture lacks the sample modules")
	}
	if string(got) != want {
		t.Fatalf("dropUses:\n%s\nwant:\n%s", got, want)
	}
	if names, err := workUses("go.work", got); err != nil || len(names) != 29 {
		t.Fatalf("after dropUses: %d uses, %v", len(names), err)
	}
}

func TestRequires(t *testing.T) {
	_, gomod := kubernetesFiles(t)
	for mod, want := range map[string]bool{
		"k8s.io/api":               true,  // required, replaced by its staging dir
		"k8s.io/sample-apiserver":  true,  // the same
		"k8s.io/sample-controller": false, // only replaced
		"github.com/spf13/cobra":   true,
		"k8s.io/nope":              false,
	} {
		if got, err := requires("go.mod", gomod, mod); err != nil || got != want {
			t.Errorf("requires(%s) = %v, %v; want %v", mod, got, err, want)
		}
	}
}

func TestGoDirective(t *testing.T) {
	gowork, gomod := kubernetesFiles(t)
	tests := []struct {
		name, path, data, want string
		wantErr                bool
	}{
		{name: "release go.work", path: "go.work", data: string(gowork), want: "1.24.0"},
		{name: "release go.mod", path: "go.mod", data: string(gomod), want: "1.24.0"},
		{name: "no go line", path: "go.work", data: "use .\n", want: ""},
		{name: "a go word in a comment is not the directive", path: "go.mod", data: "// go 1.1\nmodule x\n", want: ""},
		{name: "broken go.work", path: "go.work", data: "go 1.24.0\nuse (\n", wantErr: true},
		{name: "neither", path: "x.txt", data: "go 1.24.0\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := goDirective(tc.path, []byte(tc.data))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("goDirective = %q, %v; want %q (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestModules(t *testing.T) {
	tree := &Tree{Root: testtree.Copy(t)}
	got, err := tree.Modules()
	if err != nil {
		t.Fatal(err)
	}
	want := []Module{
		{Path: "k8s.io/kubernetes", Dir: "."},
		{Path: "k8s.io/client-go", Dir: "staging/src/k8s.io/client-go"},
		{Path: "k8s.io/component-base", Dir: "staging/src/k8s.io/component-base"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Modules() = %v, want %v", got, want)
	}

	t.Run("a use outside the tree", func(t *testing.T) {
		bad := &Tree{Root: testtree.Copy(t)}
		if err := os.WriteFile(filepath.Join(bad.Root, "go.work"), []byte("go 1.24.0\n\nuse ../elsewhere\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := bad.Modules(); err == nil || !strings.Contains(err.Error(), "not inside the tree") {
			t.Errorf("Modules() error = %v, want one saying ../elsewhere is not inside the tree", err)
		}
	})
}
