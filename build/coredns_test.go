package build

import (
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestCoreDNSMain: the generated main parses, imports every plugin of
// the table once and CoreDNS's own main parts, and says it is generated.
func TestCoreDNSMain(t *testing.T) {
	src := coreDNSMain()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, parser.ParseComments)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	imports := map[string]int{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		imports[p]++
	}
	for _, p := range coreDNSPlugins {
		if imports["github.com/coredns/coredns/plugin/"+p.Package] != 1 {
			t.Errorf("plugin %s (%s): imported %d times", p.Directive, p.Package, imports["github.com/coredns/coredns/plugin/"+p.Package])
		}
	}
	for _, p := range []string{"github.com/coredns/coredns/coremain", "github.com/coredns/coredns/core/dnsserver", "github.com/coredns/caddy"} {
		if imports[p] != 1 {
			t.Errorf("%s not imported once", p)
		}
	}
	if imports["github.com/coredns/coredns/core/plugin"] != 0 {
		t.Error("imports core/plugin, which links every plugin")
	}
	if f.Name.Name != "main" || len(f.Comments) == 0 {
		t.Error("not a generated main package")
	}
	if string(coreDNSMain()) != string(src) {
		t.Error("two renderings differ: the build's inputs would change")
	}
}
