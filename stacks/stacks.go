// Package stacks is `devk stacks`: the goroutines of a running component
// of a devk cluster, read from its own profiling endpoint
// (/debug/pprof/goroutine?debug=2), each frame's file mapped to the tree
// (srcpath), identical stacks grouped with a count as panicparse does, and
// printed a frame a line as PATH:LINE: FUNCTION, which `vim -q` and a
// terminal's click-to-open read.
package stacks

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/pki"
	"github.com/devk/devk/source"
	"github.com/devk/devk/srcpath"
)

// Options are what `devk stacks` is asked.
type Options struct {
	// Name is the cluster's (default layout.DefaultName).
	Name string
	// Component is one of Components.
	Component string
	// Node is the node's name; "" is node 0.
	Node string
	// Match keeps the stacks with a frame whose function or file matches;
	// nil keeps every stack.
	Match *regexp.Regexp
	// TreeDir is the Kubernetes tree the component was built from ("":
	// the one around the working directory).
	TreeDir string
	// Cluster, when set, is a cluster reached only through its API (not
	// a devk cluster of this machine): the dump is read through it
	// (EndpointThrough), with its credentials.
	Cluster *rest.Config
}

// Result is the goroutines of one component.
type Result struct {
	Component string `json:"component"`
	Node      string `json:"node"`
	// URL is where the dump was read.
	URL string `json:"url"`
	// Tree is the tree the paths are relative to.
	Tree string `json:"tree"`
	// Goroutines counts every goroutine of the dump, Match or not.
	Goroutines int `json:"goroutines"`
	// Groups are the stacks kept, the largest group first.
	Groups []Group `json:"groups"`
}

// Get reads the component's goroutines and maps and groups them.
func Get(ctx context.Context, o Options) (*Result, error) {
	if err := CheckComponent(o.Component); err != nil {
		return nil, err
	}
	var e Endpoint
	var conn *rest.Config
	if o.Cluster != nil {
		var err error
		if e, err = EndpointThrough(ctx, o.Cluster, o.Component, o.Node); err != nil {
			return nil, err
		}
		conn = o.Cluster
	} else {
		cfg, files, err := layout.Open("", o.Name)
		if err != nil {
			return nil, err
		}
		n, err := nodeOf(cfg, o.Node)
		if err != nil {
			return nil, fmt.Errorf("--node: %w", err)
		}
		if e, err = EndpointOf(cfg, n, o.Component); err != nil {
			return nil, err
		}
		if e.Component == Etcd {
			nf, err := files.Node(cfg, n.Name)
			if err != nil {
				return nil, err
			}
			e.TLS = &rest.TLSClientConfig{CAFile: pki.CertPath(nf.PKI(), layout.EtcdCAName),
				CertFile: pki.CertPath(nf.PKI(), EtcdClientCert), KeyFile: pki.KeyPath(nf.PKI(), EtcdClientCert)}
		}
		if conn, err = clientcmd.BuildConfigFromFlags("", files.FirstNode().Kubeconfig("admin")); err != nil {
			return nil, err
		}
	}
	tree, err := source.Open(o.TreeDir)
	if err != nil {
		return nil, err
	}
	paths, err := srcpath.New(ctx, tree)
	if err != nil {
		return nil, err
	}
	dump, err := Fetch(ctx, conn, e)
	if err != nil {
		return nil, err
	}
	gs, err := Parse(dump)
	if err != nil {
		return nil, fmt.Errorf("the goroutines of %s on node %s (%s): %w", e.Component, e.Node, e.URL(), err)
	}
	return &Result{Component: e.Component, Node: e.Node, URL: e.URL(), Tree: tree.Root, Goroutines: len(gs),
		Groups: Keep(GroupStacks(MapPaths(gs, paths)), o.Match)}, nil
}

// EtcdClientCert is the certificate `devk stacks etcd` reads etcd's
// goroutines with: the node's etcd health-check client (kubeadm's).
const EtcdClientCert = "etcd/healthcheck-client"

// MapPaths sets each frame's Path: the file its reported path names here.
func MapPaths(gs []Goroutine, m *srcpath.Map) []Goroutine {
	mapFrame := func(f *Frame) { f.Path = m.File(f.Reported) }
	for i := range gs {
		for j := range gs[i].Frames {
			mapFrame(&gs[i].Frames[j])
		}
		if gs[i].CreatedBy != nil {
			mapFrame(gs[i].CreatedBy)
		}
	}
	return gs
}

// Keep is the groups with a frame (or creator) whose function, path or
// reported path match re; all of them when re is nil.
func Keep(groups []Group, re *regexp.Regexp) []Group {
	if re == nil {
		return groups
	}
	matches := func(f Frame) bool {
		return re.MatchString(f.Function) || re.MatchString(f.Path) || re.MatchString(f.Reported)
	}
	var out []Group
	for _, g := range groups {
		keep := g.CreatedBy != nil && matches(*g.CreatedBy)
		for _, f := range g.Frames {
			keep = keep || matches(f)
		}
		if keep {
			out = append(out, g)
		}
	}
	return out
}

// shownIDs is how many goroutine IDs a group's header names.
const shownIDs = 8

// WriteText prints the groups: per group a header line (count, state,
// wait, some IDs) that is no PATH:LINE, then a line per frame,
// "PATH:LINE: FUNCTION", and "PATH:LINE: created by FUNCTION", then a
// blank line.
func WriteText(w io.Writer, r *Result) error {
	for _, g := range r.Groups {
		if _, err := fmt.Fprintln(w, groupHeader(g)); err != nil {
			return err
		}
		for _, f := range g.Frames {
			fmt.Fprintf(w, "%s:%d: %s\n", f.Path, f.Line, f.Function)
		}
		if f := g.CreatedBy; f != nil {
			fmt.Fprintf(w, "%s:%d: created by %s\n", f.Path, f.Line, f.Function)
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	return nil
}

// groupHeader is "12 goroutines [select, 3-5 minutes, locked to thread]
// (ids 4 7 9 …)".
func groupHeader(g Group) string {
	state := []string{g.State}
	switch lo, hi := g.WaitMinutes[0], g.WaitMinutes[1]; {
	case hi == 0:
	case lo == hi:
		state = append(state, fmt.Sprintf("%d minutes", hi))
	default:
		state = append(state, fmt.Sprintf("%d-%d minutes", lo, hi))
	}
	if g.Locked {
		state = append(state, lockedToThread)
	}
	word := "goroutines"
	if g.Count == 1 {
		word = "goroutine"
	}
	ids := make([]string, 0, shownIDs+1)
	for i, id := range g.IDs {
		if i == shownIDs {
			ids = append(ids, "…")
			break
		}
		ids = append(ids, fmt.Sprint(id))
	}
	return fmt.Sprintf("%d %s [%s] (ids %s)", g.Count, word, strings.Join(state, ", "), strings.Join(ids, " "))
}
