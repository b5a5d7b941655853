package stacks

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/srcpath"
)

// parkedGoroutines is how many goroutines the live test parks in one
// place: they must come out as one group of this count.
const parkedGoroutines = 7

// parkHere blocks until release is closed; its goroutines share a stack.
func parkHere(release <-chan struct{}, started *sync.WaitGroup) {
	started.Done()
	<-release
}

// liveDump serves this process's profiling endpoints on 127.0.0.1, parks
// parkedGoroutines goroutines in parkHere and reads the dump through
// Fetch as `devk stacks` reads a component's: the kubeconfig names
// another server (as admin.conf names the cluster's endpoint, not a
// controller's port), the endpoint's host is this one.
func liveDump(t *testing.T) []byte {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(parkedGoroutines)
	for range parkedGoroutines {
		go parkHere(release, &started)
	}
	t.Cleanup(func() { close(release) })
	started.Wait()

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dump, err := Fetch(context.Background(), conn, Endpoint{Component: "test", Node: "here", Host: srv.URL, Path: GoroutinePath})
	if err != nil {
		t.Fatal(err)
	}
	return dump
}

// repoMap maps paths relative to devk's own repository, as if it were the
// tree: this test's file becomes stacks/stacks_test.go.
func repoMap(t *testing.T) *srcpath.Map {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return srcpath.NewMap(root, nil, t.TempDir(), runtime.GOROOT())
}

func TestLiveDump(t *testing.T) {
	dump := liveDump(t)
	gs, err := Parse(dump)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) < parkedGoroutines+1 {
		t.Fatalf("Parse found %d goroutines, want at least %d", len(gs), parkedGoroutines+1)
	}
	m := repoMap(t)
	groups := GroupStacks(MapPaths(gs, m))
	i := slices.IndexFunc(groups, func(g Group) bool { return g.Frames[0].Function != "" && hasFunction(g, "parkHere") })
	if i < 0 {
		t.Fatalf("no group through parkHere in %d groups:\n%s", len(groups), dump)
	}
	g := groups[i]
	if g.Count != parkedGoroutines || len(g.IDs) != parkedGoroutines || g.State != "chan receive" {
		t.Errorf("parkHere's group: %d goroutines (ids %v) in state %q, want %d in chan receive", g.Count, g.IDs, g.State, parkedGoroutines)
	}
	if g.CreatedBy == nil || !strings.HasSuffix(g.CreatedBy.Function, ".liveDump") || g.CreatedBy.Path != "stacks/stacks_test.go" {
		t.Errorf("parkHere's group was created by %+v, want liveDump in stacks/stacks_test.go", g.CreatedBy)
	}
	total := 0
	for _, g := range groups {
		total += g.Count
	}
	if total != len(gs) {
		t.Errorf("the groups hold %d goroutines, the dump %d", total, len(gs))
	}

	// Each frame line is one vim -q reads ("%f:%l:%m"): its file is
	// there (relative to the tree, or absolute), its line within it; no
	// other line looks like one.
	var out bytes.Buffer
	if err := WriteText(&out, &Result{Groups: groups}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	frameLine := regexp.MustCompile(`^([^:]+):(\d+): (\S.*)$`)
	sc := bufio.NewScanner(strings.NewReader(text))
	frames := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		fm := frameLine.FindStringSubmatch(line)
		if fm == nil {
			if !regexp.MustCompile(`^\d+ goroutines? \[[^]]+\] \(ids [\d …]+\)$`).MatchString(line) {
				t.Errorf("line %q is neither a frame nor a group's header", line)
			}
			continue
		}
		frames++
		file := fm[1]
		if file == "_testmain.go" {
			continue // go test's generated main, in no directory
		}
		if !filepath.IsAbs(file) {
			file = filepath.Join(m.Root, file)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("line %q: %v", line, err)
			continue
		}
		if n, _ := strconv.Atoi(fm[2]); n < 1 || n > bytes.Count(data, []byte("\n")) {
			t.Errorf("line %q: %s has no line %d", line, file, n)
		}
	}
	if frames == 0 {
		t.Errorf("WriteText printed no frame:\n%s", text)
	}
	if !strings.Contains(text, "\nstacks/stacks_test.go:") {
		t.Errorf("no frame in stacks/stacks_test.go (tree-relative):\n%s", text)
	}
}

func hasFunction(g Group, suffix string) bool {
	return slices.ContainsFunc(g.Frames, func(f Frame) bool { return strings.HasSuffix(f.Function, "."+suffix) })
}

// sample is a dump in the shapes a Go 1.21+ runtime writes, with what a
// -trimpath build reports.
const sample = `goroutine 1 [running]:
main.main()
	k8s.io/kubernetes/cmd/kube-apiserver/apiserver.go:33 +0x1d

goroutine 18 [chan receive, 5 minutes]:
k8s.io/apiserver/pkg/server.(*GenericAPIServer).Run(0xc000123456, {0x3a5b1c8, 0xc000010000})
	k8s.io/apiserver/pkg/server/genericapiserver.go:612 +0x25
created by k8s.io/apiserver/pkg/server.New in goroutine 1
	k8s.io/apiserver/pkg/server/config.go:800 +0x4f

goroutine 19 [chan receive, 9 minutes]:
k8s.io/apiserver/pkg/server.(*GenericAPIServer).Run(0xc000123999, {0x3a5b1c8, 0xc000010000})
	k8s.io/apiserver/pkg/server/genericapiserver.go:612 +0x25
created by k8s.io/apiserver/pkg/server.New in goroutine 1
	k8s.io/apiserver/pkg/server/config.go:800 +0x4f

goroutine 7 gp=0xc000003340 m=nil [IO wait, locked to thread]:
internal/poll.runtime_pollWait(0x7f, 0x72)
	runtime/netpoll.go:351 +0x85
golang.org/x/net/http2.(*serverConn).serve[...](...)
	golang.org/x/net@v0.38.0/http2/server.go:940
...additional frames elided...
`

func TestParse(t *testing.T) {
	gs, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 4 {
		t.Fatalf("Parse found %d goroutines, want 4: %+v", len(gs), gs)
	}
	if g := gs[1]; g.ID != 18 || g.State != "chan receive" || g.WaitMinutes != 5 || g.Locked ||
		len(g.Frames) != 1 || g.Frames[0] != (Frame{Function: "k8s.io/apiserver/pkg/server.(*GenericAPIServer).Run", Reported: "k8s.io/apiserver/pkg/server/genericapiserver.go", Line: 612}) ||
		g.CreatedBy == nil || *g.CreatedBy != (Frame{Function: "k8s.io/apiserver/pkg/server.New", Reported: "k8s.io/apiserver/pkg/server/config.go", Line: 800}) {
		t.Errorf("goroutine 18 = %+v", g)
	}
	if g := gs[3]; g.ID != 7 || g.State != "IO wait" || !g.Locked || len(g.Frames) != 2 ||
		g.Frames[1].Function != "golang.org/x/net/http2.(*serverConn).serve[...]" || g.Frames[1].Line != 940 {
		t.Errorf("goroutine 7 = %+v", g)
	}

	groups := GroupStacks(gs)
	if len(groups) != 3 || groups[0].Count != 2 || !slices.Equal(groups[0].IDs, []int{18, 19}) || groups[0].WaitMinutes != [2]int{5, 9} {
		t.Errorf("GroupStacks = %+v, want goroutines 18 and 19 first, together, waiting 5-9 minutes", groups)
	}
	var out bytes.Buffer
	if err := WriteText(&out, &Result{Groups: groups[:1]}); err != nil {
		t.Fatal(err)
	}
	if want := "2 goroutines [chan receive, 5-9 minutes] (ids 18 19)\n" +
		":612: k8s.io/apiserver/pkg/server.(*GenericAPIServer).Run\n" +
		":800: created by k8s.io/apiserver/pkg/server.New\n\n"; out.String() != want {
		t.Errorf("WriteText (paths not mapped) =\n%s\nwant\n%s", out.String(), want)
	}

	for _, bad := range []string{"", "hello\nworld\n", "goroutine 1 [running]:\n\tmain.go:3 +0x1\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) gave no error", bad)
		}
	}
}

func TestKeep(t *testing.T) {
	gs, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	m := srcpath.NewMap(root, nil, t.TempDir(), runtime.GOROOT())
	groups := GroupStacks(MapPaths(gs, m))
	for _, c := range []struct {
		name, re string
		want     []int // first IDs of the groups kept
	}{
		{"all", "", []int{18, 1, 7}},
		{"a function", `GenericAPIServer\)\.Run$`, []int{18}},
		{"the creator", `server\.New`, []int{18}},
		{"a reported path", `^k8s\.io/kubernetes/`, []int{1}},
		{"a mapped path", regexp.QuoteMeta(filepath.Join(runtime.GOROOT(), "src", "runtime")), []int{7}},
		{"nothing", `nowhere`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var re *regexp.Regexp
			if c.re != "" {
				re = regexp.MustCompile(c.re)
			}
			var got []int
			for _, g := range Keep(groups, re) {
				got = append(got, g.IDs[0])
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("Keep(%q) kept the groups of %v, want %v", c.re, got, c.want)
			}
		})
	}
}

func TestEndpointOf(t *testing.T) {
	cfg := layout.NewConfig("dev")
	cfg.Network.Nodes = []layout.NodeNet{
		{Name: "dev-control-plane", IP: "10.250.0.2", Role: layout.RoleControlPlane},
		{Name: "dev-worker", IP: "10.250.0.3", Role: layout.RoleWorker},
	}
	for _, c := range []struct {
		component, node, url, err string
	}{
		{APIServer, "dev-control-plane", "https://10.250.0.2:6443/debug/pprof/goroutine?debug=2", ""},
		{ControllerManager, "dev-control-plane", "https://10.250.0.2:10257/debug/pprof/goroutine?debug=2", ""},
		{Scheduler, "", "https://10.250.0.2:10259/debug/pprof/goroutine?debug=2", ""},
		{Kubelet, "dev-worker", cfg.APIServerURL() + "/api/v1/nodes/dev-worker/proxy/debug/pprof/goroutine?debug=2", ""},
		{Scheduler, "dev-worker", "", "node dev-worker is a worker: it runs no scheduler; pick a control-plane node with --node (dev-control-plane)"},
		{Etcd, "", "https://10.250.0.2:2379/debug/pprof/goroutine?debug=2", ""},
		{Etcd, "dev-worker", "", "node dev-worker is a worker: it runs no etcd"},
		{"coredns", "", "", `unknown component "coredns": want one of apiserver, controller-manager, scheduler, kubelet, etcd`},
		{APIServer, "dev-nope", "", `cluster dev has no node "dev-nope"`},
	} {
		t.Run(c.component+"@"+c.node, func(t *testing.T) {
			n, err := nodeOf(cfg, c.node)
			var e Endpoint
			if err == nil {
				e, err = EndpointOf(cfg, n, c.component)
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("error = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.URL() != c.url {
				t.Errorf("URL() = %s, want %s", e.URL(), c.url)
			}
		})
	}
}
