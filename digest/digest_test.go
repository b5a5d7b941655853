package digest

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/testtree"
)

func registryAddr(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushRandom pushes a random image under ref and returns its digest.
func pushRandom(t *testing.T, ref string) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.String()
}

func record(t *testing.T, root, comp string, cs build.ComponentState) {
	t.Helper()
	if err := build.UpdateState(root, func(st *build.StateFile) error {
		st.Components[comp] = &cs
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestRun(t *testing.T) {
	addr := registryAddr(t)
	root := testtree.Copy(t)
	pushed := pushRandom(t, addr+"/kube-apiserver:v1.34.0")
	bin := &build.BinaryRecord{SHA256: "abc", Version: "v1.34.0+0123456789abcd"}
	record(t, root, "apiserver", build.ComponentState{Binary: bin, Pushed: &build.PushRecord{
		Ref: addr + "/kube-apiserver@" + pushed, Repository: addr + "/kube-apiserver", Tag: "v1.34.0", Digest: pushed,
		BinarySHA256: "abc", PushedAt: time.Now(),
	}})
	opts := Options{TreeDir: root, Registry: addr, Remote: authnNone()}

	t.Run("match", func(t *testing.T) {
		opts.Components = []string{"apiserver"}
		reps, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) != 1 || !reps[0].Match || len(reps[0].Observations) != 2 ||
			reps[0].Observations[0].Source != "pushed" || reps[0].Observations[1].Source != "registry" ||
			reps[0].Observations[1].Digest != pushed || reps[0].Observations[1].Ref != addr+"/kube-apiserver:v1.34.0" {
			t.Fatalf("reports %+v", reps)
		}
	})

	t.Run("tag moved", func(t *testing.T) {
		other := pushRandom(t, addr+"/kube-apiserver:v1.34.0")
		opts.Components = []string{"apiserver"}
		reps, err := Run(context.Background(), opts)
		var me *MismatchError
		if !errors.Is(err, ErrMismatch) || !errors.As(err, &me) || me.ExitCode() != 2 || me.Components[0] != "apiserver" {
			t.Fatalf("err = %v", err)
		}
		if reps[0].Match || reps[0].Observations[1].Digest != other {
			t.Fatalf("reports %+v", reps)
		}
		record(t, root, "apiserver", build.ComponentState{Binary: bin, Pushed: &build.PushRecord{
			Repository: addr + "/kube-apiserver", Tag: "gone", Digest: pushed,
		}})
	})

	t.Run("tag missing", func(t *testing.T) {
		opts.Components = []string{"apiserver"}
		reps, err := Run(context.Background(), opts)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(reps[0].Observations[1].Note, "devk push apiserver") {
			t.Fatalf("err = %v, reports %+v", err, reps)
		}
	})

	t.Run("never pushed uses the built version's tag", func(t *testing.T) {
		tagged := pushRandom(t, addr+"/kubectl:v1.34.0_0123456789abcd")
		record(t, root, "kubectl", build.ComponentState{Binary: bin})
		opts.Components = []string{"kubectl"}
		reps, err := Run(context.Background(), opts)
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("err = %v", err)
		}
		obs := reps[0].Observations
		if obs[0].Digest != "" || !strings.Contains(obs[0].Note, "never pushed") || obs[1].Digest != tagged {
			t.Fatalf("observations %+v", obs)
		}
	})

	t.Run("not built", func(t *testing.T) {
		opts.Components = []string{"scheduler"}
		reps, err := Run(context.Background(), opts)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(reps[0].Observations[1].Note, "devk build scheduler") {
			t.Fatalf("err = %v, reports %+v", err, reps)
		}
	})

	t.Run("registry down is not a mismatch", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		down := ln.Addr().String()
		ln.Close()
		record(t, root, "kube-proxy", build.ComponentState{Binary: bin})
		o := opts
		o.Registry = down
		o.Components = []string{"kube-proxy"}
		_, err := Run(context.Background(), o)
		if err == nil || errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), down) || !strings.Contains(err.Error(), "devk registry serve") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("extra sources", func(t *testing.T) {
		record(t, root, "apiserver", build.ComponentState{Binary: bin, Pushed: &build.PushRecord{
			Repository: addr + "/kube-apiserver", Tag: "v1.34.0", Digest: pushRandom(t, addr+"/kube-apiserver:v1.34.0"),
		}})
		o := opts
		o.Components = []string{"apiserver"}
		o.Extra = []Source{fixed{name: "manifest", digest: "sha256:" + strings.Repeat("1", 64)}}
		reps, err := Run(context.Background(), o)
		if !errors.Is(err, ErrMismatch) || len(reps[0].Observations) != 3 || reps[0].Observations[2].Source != "manifest" {
			t.Fatalf("err = %v, reports %+v", err, reps)
		}
	})
}

// fixed is a source that always reports one digest, standing in for the
// cluster's sources (manifest, CRI) that this package does not have.
type fixed struct{ name, digest string }

func (f fixed) Name() string { return f.name }
func (f fixed) Observe(context.Context, Target) (Observation, error) {
	return Observation{Digest: f.digest, Ref: "test"}, nil
}

func TestAgree(t *testing.T) {
	a, b := "sha256:aa", "sha256:bb"
	for _, tc := range []struct {
		name string
		obs  []Observation
		want bool
	}{
		{"all equal", []Observation{{Digest: a}, {Digest: a}, {Digest: a}}, true},
		{"one differs", []Observation{{Digest: a}, {Digest: b}}, false},
		{"one missing", []Observation{{Digest: a}, {}}, false},
		{"all missing", []Observation{{}, {}}, false},
		{"none", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Agree(tc.obs); got != tc.want {
				t.Fatalf("Agree = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMismatchError(t *testing.T) {
	var err error = &MismatchError{Components: []string{"apiserver", "scheduler"}}
	if !errors.Is(err, ErrMismatch) || err.Error() != "digests do not match for apiserver, scheduler" {
		t.Fatalf("%v", err)
	}
	var ec interface{ ExitCode() int }
	if !errors.As(err, &ec) || ec.ExitCode() != 2 {
		t.Fatal("no exit code 2")
	}
}

func authnNone() image.RemoteOptions {
	return image.RemoteOptions{Keychain: authn.NewMultiKeychain()}
}

// nodeView is a node's view of a component in tests: the digest it
// sees and whether it runs it under the debugger.
type nodeView struct {
	digest    string
	debugging bool
}

func (nodeView) Name() string { return "view" }

func (v nodeView) Observe(context.Context, Target) (Observation, error) {
	return Observation{Digest: v.digest}, nil
}

func (v nodeView) Debugging(Target) bool { return v.debugging }

// TestCompareOneNodeDebugged: on several control planes with one of them
// under the debugger, each node is compared with the image it should
// run, and the state's pushes with both; a node running neither fails.
func TestCompareOneNodeDebugged(t *testing.T) {
	const normal, debug = "sha256:" + "aa", "sha256:" + "dd"
	st := &build.StateFile{Components: map[string]*build.ComponentState{"scheduler": {
		Pushed:      &build.PushRecord{Ref: "r/kube-scheduler@" + normal, Digest: normal},
		DebugPushed: &build.PushRecord{Ref: "r/kube-scheduler@" + debug, Digest: debug},
	}}}
	c, err := build.Lookup("scheduler")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		second string
		match  bool
	}{{debug, true}, {normal, false}} {
		// The first node's views are not labelled with it (as verify
		// makes them).
		sources := []Source{Pushed{}, nodeView{digest: normal}, OnNode{"cp2", nodeView{digest: tc.second, debugging: true}}, OnNode{"cp3", nodeView{digest: normal}}}
		reps, err := Compare(context.Background(), []build.Component{c}, st, sources)
		if got := len(reps) == 1 && reps[0].Match; got != tc.match || (err == nil) != tc.match {
			t.Fatalf("cp2 (debugged) at %s: match %v (%v), want %v: %+v", tc.second, got, err, tc.match, reps)
		}
		var labels []string
		for _, o := range reps[0].Observations {
			labels = append(labels, o.Source+"="+o.Digest)
		}
		if want := "pushed=" + normal + " pushed-debug=" + debug + " view=" + normal + " view@cp2=" + tc.second; strings.Join(labels[:4], " ") != want || len(labels) != 5 || !reps[0].Debug {
			t.Errorf("observations %v: want %s, then cp3's; debug reported", labels, want)
		}
	}
}
