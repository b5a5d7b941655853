package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/build"
	"github.com/devk/devk/phase"
)

// Options say where images go and what they are built on.
type Options struct {
	// Registry is host[:port][/prefix]; empty means DefaultRegistry().
	Registry string
	// Base is the image the binary is put on; empty means no base layer.
	// A component that needs a base of its own (build.Component.Base:
	// kube-proxy's iptables) gets that one instead.
	Base string
	// BaseCache is where the bases devk makes from Debian packages are
	// cached; empty means DefaultBaseCacheDir().
	BaseCache string
	// Insecure allows plain HTTP to a registry not on loopback.
	Insecure bool
	// Push runs the image and push phases after the build phases
	// (`devk build --push`); `devk push` always runs them.
	Push bool
	// Remote, when set, overrides how registries are reached (tests set
	// the transport through it).
	Remote RemoteOptions
	// Compression, when set, overrides DefaultCompression.
	Compression *Compression
	// Debugger puts Delve (build.Delve, which the job then builds too)
	// on each component's image as a layer of its own, at DebuggerPath:
	// the images `devk debug` runs a component under dlv from.
	Debugger bool
}

// Job is the state of the build -> image -> push pipeline: the build job
// and what the image and push phases made of it.
type Job struct {
	*build.Job
	Image Options
	// Images are the results, one per component, in catalog order.
	Images []*Result
	// Bases are the bases devk made for them (kube-proxy's), pushed
	// before the images.
	Bases []*DebianBase

	remote *Remote
	cache  *LayerCache
	bases  map[string]v1.Image // pulled Options.Base, by platform
}

// Result is one component's image.
type Result struct {
	Component string `json:"component"`
	Binary    string `json:"binary"`
	// Version is the binary's stamped gitVersion; Tag is it made tag-safe.
	Version string `json:"version"`
	Tag     string `json:"tag"`
	// Repository is registry/name; Ref is repository@digest once pushed.
	Repository string `json:"repository"`
	Ref        string `json:"ref,omitempty"`
	Digest     string `json:"digest"`
	Platform   string `json:"platform"`
	// Layer is the binary layer's digest; LayerCached says it came from
	// the layer cache (the binary was not compressed again).
	Layer       string `json:"layer"`
	LayerCached bool   `json:"layerCached"`
	// Base is the image the binary was put on: Options.Base, or the
	// reference by digest of the base devk made (once pushed); empty
	// for none.
	Base      string        `json:"base,omitempty"`
	ImageTook time.Duration `json:"imageTook"`
	PushTook  time.Duration `json:"pushTook,omitempty"`

	binarySHA256 string
	debug        bool // the binary is a debug build's
	debugImage   bool // a debug image: a debug build's binary or the debugger in it (DebugTagSuffix)
	img          v1.Image
	debianBase   *DebianBase
}

// NewJob prepares the pipeline; nothing is built or pushed.
func NewJob(bo build.Options, o Options) (*Job, error) {
	if o.Debugger && len(bo.Components) > 0 && !slices.Contains(bo.Components, build.Delve) {
		// Built with the rest, at its pinned version.
		bo.Components = append(slices.Clone(bo.Components), build.Delve)
	}
	bj, err := build.NewJob(bo)
	if err != nil {
		return nil, err
	}
	return newJob(bj, o)
}

func newJob(bj *build.Job, o Options) (*Job, error) {
	if o.Debugger && !slices.ContainsFunc(bj.Components, func(c build.Component) bool { return c.Debugger }) {
		dlv, err := build.Lookup(build.Delve)
		if err != nil {
			return nil, err
		}
		bj.Components = append(bj.Components, dlv)
	}
	if o.Push {
		for _, c := range bj.Components {
			if c.Tool && !debuggerLayer(o, c) {
				return nil, fmt.Errorf("%s runs beside the cluster and has no image: build it without --push (`devk build %s`)", c.File(), c.Name)
			}
		}
	}
	if o.Registry == "" {
		o.Registry = DefaultRegistry()
	}
	ro := o.Remote
	ro.Insecure = ro.Insecure || o.Insecure
	r, err := NewRemote(o.Registry, ro)
	if err != nil {
		return nil, err
	}
	cache := NewLayerCache(bj.Tree.OutputDir())
	if o.Compression != nil {
		cache.Compression = *o.Compression
	}
	return &Job{Job: bj, Image: o, remote: r, cache: cache, bases: map[string]v1.Image{}}, nil
}

func buildJob(j *Job) *build.Job { return j.Job }

// debuggerLayer says c is the debugger that o puts on the images: a layer of
// theirs, no image of its own.
func debuggerLayer(o Options, c build.Component) bool { return o.Debugger && c.Debugger }

// imaged are the components that get an image of their own.
func (j *Job) imaged() []build.Component {
	var out []build.Component
	for _, c := range j.Components {
		if !debuggerLayer(j.Image, c) {
			out = append(out, c)
		}
	}
	return out
}

// BuildPhases are `devk build`: the build phases, then image and push when
// --push is given.
func BuildPhases() []*phase.Phase[*Job] {
	ps := phase.Map(build.Phases(), buildJob)
	for _, p := range imagePhases() {
		p.If = func(j *Job) (bool, string) { return j.Image.Push, "--push not given" }
		ps = append(ps, p)
	}
	return ps
}

// PushPhases are `devk push`: read the tree's version (for the created
// time and revision label), then image and push the binaries already
// built.
func PushPhases() []*phase.Phase[*Job] {
	var ps []*phase.Phase[*Job]
	for _, p := range phase.Map(build.Phases(), buildJob) {
		if p.Name == "resolve" {
			ps = append(ps, p)
		}
	}
	im := imagePhases()
	im[0].Needs = []string{"resolve"}
	return append(ps, im...)
}

func imagePhases() []*phase.Phase[*Job] {
	return []*phase.Phase[*Job]{
		{
			Name:  "image",
			Short: "make each binary's OCI image: one layer (cached by the binary's sha256) on its base (kube-proxy: iptables from Debian packages), entrypoint, labels, source time",
			IO: func(j *Job) ([]string, []string) {
				reads := []string{build.StatePath(j.Tree.Root)}
				for _, c := range j.Components {
					reads = append(reads, j.BinaryPath(c))
				}
				writes := []string{j.cache.Dir}
				for _, c := range j.imaged() {
					if c.Base != "" {
						reads = append(reads, "Debian packages of the "+c.Base+" base (apt)")
						writes = append(writes, j.baseCacheDir())
					} else if j.Image.Base != "" {
						reads = append(reads, j.Image.Base)
					}
				}
				return slices.Compact(reads), slices.Compact(writes)
			},
			Run: func(ctx context.Context, j *Job) (phase.Outcome, error) {
				if err := j.makeImages(ctx); err != nil {
					return phase.Done, err
				}
				var parts []string
				for _, b := range j.Bases {
					how := "layer compressed"
					if b.LayerCached {
						how = "layer cached"
					}
					parts = append(parts, fmt.Sprintf("%s %s (%d Debian packages, %s)", BaseRepository(b.Kind), short(b.Digest), len(b.Packages), how))
				}
				for _, r := range j.Images {
					how := "layer compressed"
					if r.LayerCached {
						how = "layer cached"
					}
					parts = append(parts, fmt.Sprintf("%s %s (%s)", r.Binary, short(r.Digest), how))
				}
				return phase.Unchanged("%s", strings.Join(parts, ", ")), nil
			},
		},
		{
			Name:  "push",
			Short: "push the bases devk made, then the images (blobs the registry lacks, then the manifest) and record the digests in _output/devk/state.json",
			IO: func(j *Job) ([]string, []string) {
				var writes []string
				for _, c := range j.imaged() {
					if c.Base != "" {
						writes = append(writes, j.remote.Addr+"/"+BaseRepository(c.Base)+":TAG")
					}
					writes = append(writes, j.remote.Addr+"/"+c.Image()+":TAG")
				}
				return nil, append(writes, build.StatePath(j.Tree.Root))
			},
			Run: func(ctx context.Context, j *Job) (phase.Outcome, error) {
				if err := j.push(ctx); err != nil {
					return phase.Done, err
				}
				var refs []string
				for _, b := range j.Bases {
					refs = append(refs, b.Ref)
				}
				for _, r := range j.Images {
					refs = append(refs, r.Ref)
				}
				return phase.Changed("%s", strings.Join(refs, ", ")), nil
			},
		},
	}
}

func short(digest string) string {
	d := strings.TrimPrefix(digest, "sha256:")
	return d[:min(12, len(d))]
}

// ErrNotBuilt is returned for a component with no built binary.
var ErrNotBuilt = errors.New("not built yet")

// makeImages makes one image per component from the binaries the state
// file records.
func (j *Job) makeImages(ctx context.Context) error {
	if j.Version.GitCommit == "" {
		// Run alone (`phase image`): the resolve phase did not run now.
		v, err := j.Tree.Version(ctx)
		if err != nil {
			return err
		}
		j.Version = v
	}
	st, err := build.LoadState(j.Tree.Root)
	if err != nil {
		return err
	}
	j.Images, j.Bases = j.Images[:0], j.Bases[:0]
	for _, c := range j.imaged() {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		debug := j.DebugBuild(c)
		rec, binPath, err := j.recordedBinary(st, c, debug)
		if err != nil {
			return err
		}
		base, db, err := j.base(ctx, c, rec.Platform)
		if err != nil {
			return err
		}
		mt, err := layerMediaType(base)
		if err != nil {
			return fmt.Errorf("base image %s: %w", j.Image.Base, err)
		}
		baseName := j.Image.Base
		if db != nil {
			baseName = ""
		}
		spec := Spec{
			Binary: c.Binary, Path: c.Layout.Path, Entrypoint: c.Layout.Entrypoint, Cmd: c.Layout.Cmd,
			Platform: rec.Platform, Version: rec.Version, Base: base,
		}
		layer, hit, err := j.cache.LayerAt(binPath, spec.BinaryPath(), rec.SHA256, mt)
		if err != nil {
			return err
		}
		created, err := j.created()
		if err != nil {
			return err
		}
		spec.Created, spec.Revision = created, j.Version.GitCommit
		if c.External {
			spec.Revision = "" // etcd and CoreDNS are not built from the tree's commit
		}
		img, err := Assemble(spec, layer)
		if err != nil {
			return err
		}
		tagged := rec.Version
		if j.Image.Debugger {
			if img, err = j.addDebugger(st, img, rec.Platform, mt, created); err != nil {
				return err
			}
		}
		debugImage := debug || j.Image.Debugger
		if debugImage {
			tagged += DebugTagSuffix
		}
		d, err := img.Digest()
		if err != nil {
			return fmt.Errorf("image of %s: %w", c.Name, err)
		}
		ld, _ := layer.Digest()
		repo, err := j.remote.Repository(c.Image())
		if err != nil {
			return err
		}
		j.Images = append(j.Images, &Result{
			Component: c.Name, Binary: c.Binary, Version: rec.Version, Tag: Tag(tagged),
			Repository: repo.Name(), Digest: d.String(), Platform: rec.Platform,
			Layer: ld.String(), LayerCached: hit, Base: baseName, ImageTook: time.Since(t0),
			binarySHA256: rec.SHA256, debug: debug, debugImage: debugImage, img: img, debianBase: db,
		})
	}
	return nil
}

// recordedBinary is the record of c's last build (debug or not) and the
// binary's path, checked against it. state.json is a file in the tree:
// the binary is read from where build puts it for the recorded platform,
// never from a path the file names.
func (j *Job) recordedBinary(st *build.StateFile, c build.Component, debug bool) (*build.BinaryRecord, string, error) {
	rec := st.Component(c.Name).BinaryOf(debug)
	if rec == nil {
		return nil, "", fmt.Errorf("%s is %w: run `devk build %s` first", c.Name, ErrNotBuilt, c.BuildArg())
	}
	binDir, err := build.BinDirFor(j.Tree, rec.Platform, debug)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %s records platform %q: %w; run `devk build %s` again", c.Name, build.StatePath(j.Tree.Root), rec.Platform, err, c.BuildArg())
	}
	binPath := filepath.Join(binDir, c.Binary)
	fi, err := os.Stat(binPath)
	if err != nil {
		return nil, "", fmt.Errorf("%s is %w (%s is missing): run `devk build %s` first", c.Name, ErrNotBuilt, binPath, c.BuildArg())
	}
	if fi.Size() != rec.Size || !fi.ModTime().Equal(rec.ModTime) {
		return nil, "", fmt.Errorf("%s changed since devk built it: run `devk build %s` again", binPath, c.BuildArg())
	}
	return rec, binPath, nil
}

// addDebugger puts a layer holding the debugger the job built (dlv) at
// DebuggerPath on img, the component's image for platform.
func (j *Job) addDebugger(st *build.StateFile, img v1.Image, platform string, mt types.MediaType, created time.Time) (v1.Image, error) {
	dlv, err := build.Lookup(build.Delve)
	if err != nil {
		return nil, err
	}
	rec, binPath, err := j.recordedBinary(st, dlv, false)
	if err != nil {
		return nil, err
	}
	if rec.Platform != platform {
		return nil, fmt.Errorf("%s was built for %s, the image is for %s: run `devk build %s --platform %s`", dlv.Name, rec.Platform, platform, dlv.Name, platform)
	}
	layer, _, err := j.cache.LayerAt(binPath, DebuggerPath, rec.SHA256, mt)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: created.UTC()}, CreatedBy: "devk image: " + DebuggerPath, Comment: rec.Version},
	})
}

// created is SOURCE_DATE_EPOCH, else the commit time: build's BuildDate.
func (j *Job) created() (time.Time, error) {
	t, err := time.Parse("2006-01-02T15:04:05Z", j.Version.BuildDate)
	if err != nil {
		return time.Time{}, fmt.Errorf("build date %q: %w", j.Version.BuildDate, err)
	}
	return t, nil
}

// base is the image component c is put on: the Debian base its
// Base names (made or taken from the cache once per job and platform),
// else Options.Base pulled, else none.
func (j *Job) base(ctx context.Context, c build.Component, platform string) (v1.Image, *DebianBase, error) {
	if c.Base != "" {
		for _, b := range j.Bases {
			if b.Kind == c.Base && b.Platform == platform {
				return b.img, b, nil
			}
		}
		b, err := MakeDebianBase(ctx, c.Base, platform, j.Image.BaseCache, j.Image.Compression)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		j.Bases = append(j.Bases, b)
		return b.img, b, nil
	}
	if j.Image.Base == "" {
		return nil, nil, nil
	}
	if b, ok := j.bases[platform]; ok {
		return b, nil, nil
	}
	b, err := PullBase(ctx, j.Image.Base, platform, j.remote)
	if err != nil {
		return nil, nil, err
	}
	j.bases[platform] = b
	return b, nil, nil
}

// baseCacheDir is where the Debian bases are cached (for plans).
func (j *Job) baseCacheDir() string {
	if j.Image.BaseCache != "" {
		return j.Image.BaseCache
	}
	if d, err := DefaultBaseCacheDir(); err == nil {
		return d
	}
	return "$DEVK_HOME/cache/debian"
}

// push pushes every image (in parallel) and records what was pushed.
func (j *Job) push(ctx context.Context) error {
	if len(j.Images) == 0 {
		// `phase push` alone: remake the images, which the layer cache
		// makes cheap, rather than rely on memory of an earlier run.
		if err := j.makeImages(ctx); err != nil {
			return err
		}
	}
	// Bases first, one at a time: the images on them then find their
	// layer in the registry rather than upload it side by side.
	for _, b := range j.Bases {
		if err := PushDebianBase(ctx, j.remote, b); err != nil {
			return err
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, r := range j.Images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			err := j.pushOne(ctx, r)
			r.PushTook = time.Since(t0)
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", r.Binary, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return build.UpdateState(j.Tree.Root, func(st *build.StateFile) error {
		now := time.Now().UTC()
		for _, r := range j.Images {
			st.Component(r.Component).SetPushed(r.debugImage, &build.PushRecord{
				Ref: r.Ref, Repository: r.Repository, Tag: r.Tag, Digest: r.Digest,
				BinarySHA256: r.binarySHA256, Debug: r.debug, PushedAt: now,
			})
		}
		return nil
	})
}

func (j *Job) pushOne(ctx context.Context, r *Result) error {
	repo, err := j.remote.Repository(r.Binary)
	if err != nil {
		return err
	}
	tag := repo.Tag(r.Tag)
	if err := j.remote.Push(ctx, tag, r.img); err != nil {
		return err
	}
	r.Ref = repo.Name() + "@" + r.Digest
	if r.debianBase != nil {
		r.Base = r.debianBase.Ref
	}
	return nil
}

var tagUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Tag makes a gitVersion a valid image tag the way Kubernetes' release
// tooling does ('+' becomes '_'), replacing any other character a tag
// cannot hold with '-' and keeping at most 128 characters.
func Tag(version string) string {
	t := strings.ReplaceAll(version, "+", "_")
	t = tagUnsafe.ReplaceAllString(t, "-")
	if t == "" {
		return "latest"
	}
	if t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	return t[:min(len(t), 128)]
}

// Run runs `devk build [--push]` (phases BuildPhases).
func Run(ctx context.Context, bo build.Options, o Options, popts phase.Options) (*Job, error) {
	return run(ctx, BuildPhases(), bo, o, popts)
}

// RunPush runs `devk push` (phases PushPhases) on already built binaries.
func RunPush(ctx context.Context, bo build.Options, o Options, popts phase.Options) (*Job, error) {
	o.Push = true
	return run(ctx, PushPhases(), bo, o, popts)
}

// PushBuilt images and pushes the components (of those bj built) named
// in components: PushPhases after a build.Run, without reading the tree's
// version again.
func PushBuilt(ctx context.Context, bj *build.Job, components []string, o Options, popts phase.Options) (*Job, error) {
	pj := *bj
	pj.Components = slices.DeleteFunc(slices.Clone(bj.Components), func(c build.Component) bool { return !slices.Contains(components, c.Name) })
	o.Push = true
	j, err := newJob(&pj, o)
	if err != nil {
		return nil, err
	}
	popts.Reporter = j.Reporter
	_, err = phase.Run(ctx, imagePhases(), j, popts)
	return j, err
}

func run(ctx context.Context, phases []*phase.Phase[*Job], bo build.Options, o Options, popts phase.Options) (*Job, error) {
	j, err := NewJob(bo, o)
	if err != nil {
		return nil, err
	}
	popts.Reporter = j.Reporter
	_, err = phase.Run(ctx, phases, j, popts)
	return j, err
}
