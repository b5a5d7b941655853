package debug

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/devk/devk/internal/testtree"
	"github.com/devk/devk/source"
	"github.com/devk/devk/srcpath"
)

// TestParseBreaks: a breakpoint is a Go file of the tree's modules and a
// line where code begins; anything else is refused with what to do.
func TestParseBreaks(t *testing.T) {
	root := testtree.Copy(t)
	m, err := srcpath.New(context.Background(), &source.Tree{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	const main = "cmd/kube-apiserver/main.go"
	got, err := parseBreaks(root, m, []string{main + ":13", filepath.Join(root, main) + ":12", "staging/src/k8s.io/client-go/pkg/version/version.go:" + firstCodeLine(t, root, "staging/src/k8s.io/client-go/pkg/version/version.go")})
	if err != nil {
		t.Fatal(err)
	}
	want := []breakAt{
		{file: main, reported: "k8s.io/kubernetes/" + main, line: 13, pkg: "k8s.io/kubernetes/cmd/kube-apiserver"},
		{file: main, reported: "k8s.io/kubernetes/" + main, line: 12, pkg: "k8s.io/kubernetes/cmd/kube-apiserver"},
	}
	if !slices.Equal(got[:2], want) || got[2].pkg != "k8s.io/client-go/pkg/version" {
		t.Errorf("parseBreaks = %+v", got)
	}
	for _, c := range []struct{ spec, want string }{
		{main, "want FILE:LINE"},
		{main + ":x", "want FILE:LINE"},
		{"README.md:1", "want FILE:LINE"},
		{main + ":3", "the nearest lines that do: 12, 13"},
		{main + ":11", "the nearest lines that do: 12, 13"},
		{main + ":400", "has 18 lines"},
		{"cmd/nope/main.go:1", "no such file"},
		{"/etc/x.go:1", "not in the tree"},
		{"vendor/github.com/x/y.go:1", "none of the tree's modules"},
	} {
		_, err := parseBreaks(root, m, []string{c.spec})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("--break %s: %v, want %q", c.spec, err, c.want)
		}
	}
}

// firstCodeLine is the first line of a fixture file where a statement or
// function begins, as a string.
func firstCodeLine(t *testing.T, root, rel string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	lines, _, err := codeLines(rel, src)
	if err != nil || len(lines) == 0 {
		t.Fatalf("%s: %v, %v", rel, lines, err)
	}
	return strconv.Itoa(lines[0])
}

// TestCommand: the container runs under dlv on the node's address, its
// own command after `--`; the controllers of one control plane lose
// leader election, those of several keep it; --stop-at-start leaves out
// --continue.
func TestCommand(t *testing.T) {
	own := []string{"/usr/local/bin/kube-scheduler", "--bind-address=10.250.0.2", "--leader-elect=true"}
	for _, c := range []struct {
		comp    string
		ha      bool
		atStart bool
		want    []string
	}{
		{"scheduler", false, false, []string{"--bind-address=10.250.0.2", "--leader-elect=false"}},
		{"scheduler", true, false, own[1:]},
		{"scheduler", true, true, own[1:]},
		{"apiserver", false, false, append(own[1:], "--request-timeout=1h0m0s")},
		{"etcd", false, false, own[1:]},
	} {
		j := &job{Options: Options{Address: "10.250.0.2", Port: 2347, HA: c.ha, StopAtStart: c.atStart}}
		j.comp.Name = c.comp
		got, err := j.command(own)
		if err != nil {
			t.Fatal(err)
		}
		head := []string{"/usr/local/bin/dlv", "exec", "--headless", "--accept-multiclient", "--api-version=2", "--listen=10.250.0.2:2347", "--continue", own[0], "--"}
		if c.atStart {
			head = slices.DeleteFunc(head, func(a string) bool { return a == "--continue" })
		}
		if !slices.Equal(got[:len(head)], head) || !slices.Equal(got[len(head):], c.want) {
			t.Errorf("%s (HA %v): %q", c.comp, c.ha, got)
		}
	}
	// kubeadm's manifests name the binary alone: Delve gets its path in
	// devk's image.
	j := &job{Options: Options{Address: "10.250.0.2", Port: 2347}}
	j.comp.Name = "scheduler"
	if got, err := j.command([]string{"kube-scheduler", "--v=2"}); err != nil || !slices.Contains(got, "/usr/local/bin/kube-scheduler") || slices.Contains(got, "kube-scheduler") {
		t.Errorf("a command naming the binary alone: %q, %v; want its path in the image", got, err)
	}
}

// TestLaunchJSON: devk's configuration replaces its own of the same name
// and keeps the user's; VS Code's substitutePath runs local -> binary.
func TestLaunchJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "launch.json")
	user := `{"version": "0.2.0", "configurations": [{"name": "mine", "type": "go"}, {"name": "devk debug apiserver", "port": 1}]}`
	if err := os.WriteFile(path, []byte(user), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := launchJSON(path, "devk debug apiserver", "10.250.0.2", 2345, []srcpath.Rule{{From: "k8s.io/apiserver", To: "/tree/staging/src/k8s.io/apiserver"}})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Configurations []struct {
			Name, Host, Mode, Request string
			Port                      int
			SubstitutePath            []struct{ From, To string }
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Configurations) != 2 || doc.Configurations[0].Name != "mine" {
		t.Fatalf("configurations %+v", doc.Configurations)
	}
	c := doc.Configurations[1]
	if c.Port != 2345 || c.Host != "10.250.0.2" || c.Mode != "remote" || c.Request != "attach" || len(c.SubstitutePath) != 1 || c.SubstitutePath[0].From != "/tree/staging/src/k8s.io/apiserver" {
		t.Errorf("devk's configuration %+v", c)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := launchJSON(path, "x", "h", 1, nil); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("a broken launch.json: %v", err)
	}
}
