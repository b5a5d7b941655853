// Package digest resolves the digests that say which image a component is
// running, from several sources, and compares them: the digest devk last
// pushed (the tree's state.json) and what the registry has now under that
// tag; the cluster adds what the static-pod manifest names and what the
// container runtime runs, as further Sources.
package digest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/source"
)

// ErrMismatch says the sources do not agree on one digest for a component
// (or one of them has none).
var ErrMismatch = errors.New("digests do not match")

// Target is what sources are asked about: one component and what the
// tree's state file records of it.
type Target struct {
	Component build.Component
	// State is the component's entry of state.json; Binary and Pushed
	// may be nil.
	State build.ComponentState
	// Debug says the node runs the component's debug image (`devk
	// debug`): the pushed digest is State.DebugPushed's.
	Debug bool
}

// pushed is the push record t is compared with.
func (t Target) pushed() *build.PushRecord { return t.State.PushedOf(t.Debug) }

// Observation is what one source says about a component.
type Observation struct {
	Source string `json:"source"`
	// Ref is where the source looked (repo:tag, a manifest path, a
	// container id).
	Ref string `json:"ref,omitempty"`
	// Digest is sha256:…; empty when the source has none, and then Note
	// says why and what to do.
	Digest string `json:"digest,omitempty"`
	Note   string `json:"note,omitempty"`
	// NotApplicable marks a source that has no view of this component
	// (a CRI digest of kubectl); it does not count against agreement.
	NotApplicable bool `json:"notApplicable,omitempty"`
	// Absent marks a source whose object is not on the cluster (an addon
	// the cluster does not run); it is NotApplicable too.
	Absent bool `json:"absent,omitempty"`
}

// Source is one place a component's digest can be read from.
type Source interface {
	// Name is a short label: pushed, registry, manifest, cri.
	Name() string
	// Observe reads the digest. A missing digest is an Observation with
	// a Note, not an error; errors are failures to look (registry down).
	Observe(ctx context.Context, t Target) (Observation, error)
}

// Report is every source's observation of one component.
type Report struct {
	Component    string        `json:"component"`
	Observations []Observation `json:"observations"`
	Match        bool          `json:"match"`
	// Absent says the component is not on the cluster (an addon the
	// cluster does not run): not a mismatch, but nothing runs it.
	Absent bool `json:"absent,omitempty"`
	// Debug says the node runs the component's debug image (`devk
	// debug`), which the observations were compared with.
	Debug bool `json:"debug,omitempty"`
}

// Agree reports whether every observation has the same, non-empty digest.
func Agree(obs []Observation) bool {
	first := ""
	for _, o := range obs {
		if o.NotApplicable {
			continue
		}
		if first == "" {
			first = o.Digest
		}
		if o.Digest == "" || o.Digest != first {
			return false
		}
	}
	return first != ""
}

// MismatchError names the components whose sources disagree. It is
// ErrMismatch for errors.Is and exits with status 2.
type MismatchError struct {
	Components []string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s for %s", ErrMismatch, strings.Join(e.Components, ", "))
}

func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// ExitCode lets scripts tell a mismatch (2) from a failure to look (1).
func (e *MismatchError) ExitCode() int { return 2 }

// Options say what to compare.
type Options struct {
	TreeDir    string
	Components []string
	// Registry is used for components never pushed (their tag is derived
	// from the built binary's version); pushed ones are looked up where
	// they were pushed. Empty means image.DefaultRegistry().
	Registry string
	Remote   image.RemoteOptions
	// Extra sources are consulted after pushed and registry.
	Extra []Source
}

// Run observes every component through every source and compares. The
// reports are returned also when the error is a *MismatchError.
func Run(ctx context.Context, o Options) ([]Report, error) {
	comps, err := build.Resolve(o.Components)
	if err != nil {
		return nil, err
	}
	tree, err := source.Open(o.TreeDir)
	if err != nil {
		return nil, err
	}
	st, err := build.LoadState(tree.Root)
	if err != nil {
		return nil, err
	}
	if o.Registry == "" {
		o.Registry = image.DefaultRegistry()
	}
	r, err := image.NewRemote(o.Registry, o.Remote)
	if err != nil {
		return nil, err
	}
	sources := append([]Source{Pushed{}, &Registry{Remote: r}}, o.Extra...)
	return Compare(ctx, comps, st, sources)
}

// Compare asks each source about each component. A component debugged
// (`devk debug`) is compared with its debug image; on several nodes of
// which only some run it under the debugger (`devk debug --node`), each
// node's views are compared with the image it should run, and the
// sources of the tree's state (pushed, registry) are asked for both,
// the debug image's labelled "-debug".
func Compare(ctx context.Context, comps []build.Component, st *build.StateFile, sources []Source) ([]Report, error) {
	var reports []Report
	var bad []string
	for _, c := range comps {
		t := Target{Component: c}
		if cs := st.Components[c.Name]; cs != nil {
			t.State = *cs
		}
		debugged := map[string]bool{} // node -> runs the debug image
		nodes := map[string]bool{}
		for _, s := range sources {
			node, isNode := viewOf(s)
			if isNode {
				nodes[node] = true
			}
			if debugging(s, t) {
				debugged[node] = true
				t.Debug = true
			}
		}
		mixed := t.Debug && len(debugged) > 0 && len(debugged) < len(nodes)
		rep := Report{Component: c.Name, Debug: t.Debug}
		var normal, debug []Observation
		observe := func(s Source, t Target, label string) error {
			ob, err := s.Observe(ctx, t)
			if err != nil {
				return fmt.Errorf("%s: %s digest: %w", c.Name, s.Name(), err)
			}
			ob.Source = s.Name() + label
			rep.Observations = append(rep.Observations, ob)
			rep.Absent = rep.Absent || ob.Absent
			if t.Debug {
				debug = append(debug, ob)
			} else {
				normal = append(normal, ob)
			}
			return nil
		}
		for _, s := range sources {
			var err error
			node, isNode := viewOf(s)
			switch {
			case !mixed:
				err = observe(s, t, "")
			case isNode:
				nt := t
				nt.Debug = debugged[node]
				err = observe(s, nt, "")
			default:
				nt := t
				nt.Debug = false
				if err = observe(s, nt, ""); err == nil {
					err = observe(s, t, "-debug")
				}
			}
			if err != nil {
				return reports, err
			}
		}
		rep.Match = Agree(normal) && (len(debug) == 0 || Agree(debug))
		if !mixed {
			rep.Match = Agree(rep.Observations)
		}
		if !rep.Match {
			bad = append(bad, c.Name)
		}
		reports = append(reports, rep)
	}
	if len(bad) > 0 {
		return reports, &MismatchError{Components: bad}
	}
	return reports, nil
}

// viewOf says which node's view of what runs source s is: an OnNode's
// node, "" for the views of the first (or only) node; false for the
// tree's own records (pushed, registry).
func viewOf(s Source) (node string, isNode bool) {
	switch v := s.(type) {
	case Pushed, *Registry:
		return "", false
	case OnNode:
		return v.Node, true
	}
	return "", true
}

// debugging says source s sees the component run under a debugger
// (`devk debug`): a node's manifest does.
func debugging(s Source, t Target) bool {
	d, ok := s.(interface{ Debugging(Target) bool })
	return ok && d.Debugging(t)
}

// Pushed is the digest devk last pushed, from the tree's state.json.
type Pushed struct{}

func (Pushed) Name() string { return "pushed" }

func (Pushed) Observe(_ context.Context, t Target) (Observation, error) {
	p := t.pushed()
	if p == nil && t.Debug {
		return Observation{Note: fmt.Sprintf("no debug image pushed: run `devk debug %s`", t.Component.Name)}, nil
	}
	if p == nil {
		return Observation{Note: fmt.Sprintf("never pushed: run `devk push %s`", t.Component.Name)}, nil
	}
	ob := Observation{Ref: p.Repository + ":" + p.Tag, Digest: p.Digest}
	if b := t.State.BinaryOf(p.Debug); b != nil && b.SHA256 != p.BinarySHA256 {
		ob.Note = fmt.Sprintf("the binary was rebuilt since: run `devk push %s`", t.Component.Name)
	}
	return ob, nil
}

// Registry is what the registry has now under the pushed tag (or, for a
// component never pushed, under the tag its built binary would get).
type Registry struct {
	Remote *image.Remote
}

func (*Registry) Name() string { return "registry" }

func (s *Registry) Observe(ctx context.Context, t Target) (Observation, error) {
	var ref string
	switch p := t.pushed(); {
	case p != nil:
		ref = p.Repository + ":" + p.Tag
	case t.State.Binary != nil:
		repo, err := s.Remote.Repository(t.Component.Image())
		if err != nil {
			return Observation{}, err
		}
		ref = repo.Tag(image.Tag(t.State.Binary.Version)).String()
	default:
		return Observation{Note: fmt.Sprintf("not built: run `devk build %s --push`", t.Component.Name)}, nil
	}
	parsed, err := s.Remote.ParseReference(ref)
	if err != nil {
		return Observation{}, err
	}
	d, err := s.Remote.Head(ctx, parsed)
	if image.IsNotFound(err) {
		return Observation{Ref: ref, Note: fmt.Sprintf("the registry has no such tag: run `devk push %s`", t.Component.Name)}, nil
	}
	if err != nil {
		return Observation{}, err
	}
	return Observation{Ref: ref, Digest: d.Digest.String()}, nil
}
