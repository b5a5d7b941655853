package conformance

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devk/devk/build"
	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/source"
)

// ManifestFile is where the tree names the images its e2e specs use.
const ManifestFile = "test/utils/image/manifest.go"

// TestImage is one image of the framework's manifest.
type TestImage struct {
	// ID is the manifest's constant (Agnhost, BusyBox, Httpd).
	ID string `json:"id"`
	// Registry is the RegistryList key it is pulled from.
	Registry string `json:"registry"`
	Name     string `json:"name"`
	Tag      string `json:"tag"`
}

// Upstream is where the framework pulls it from by default.
func (t TestImage) Upstream() string { return Registries[t.Registry] + "/" + t.Name + ":" + t.Tag }

// manifestEntry is one `configs[ID] = Config{list.Registry, "name", "tag"}`.
var manifestEntry = regexp.MustCompile(`configs\[(\w+)\]\s*=\s*Config\{list\.(\w+),\s*"([^"]+)",\s*"([^"]+)"\}`)

// ReadManifest reads the images the tree's framework names, in the
// order the manifest gives them.
func ReadManifest(treeRoot string) ([]TestImage, error) {
	data, err := os.ReadFile(filepath.Join(treeRoot, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("the tree's e2e image manifest: %w", err)
	}
	return ParseManifest(data)
}

// ParseManifest finds the image configs in manifest.go's source.
func ParseManifest(src []byte) ([]TestImage, error) {
	var out []TestImage
	for _, m := range manifestEntry.FindAllSubmatch(src, -1) {
		key := strings.ToLower(string(m[2][:1])) + string(m[2][1:])
		if _, ok := Registries[key]; !ok {
			return nil, fmt.Errorf("%s: image %s comes from registry %s, which devk does not know: the tree's framework is newer than devk", ManifestFile, m[1], m[2])
		}
		out = append(out, TestImage{ID: string(m[1]), Registry: key, Name: string(m[3]), Tag: string(m[4])})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s names no image (configs[ID] = Config{list.…, \"name\", \"tag\"}): the tree's framework changed its shape", ManifestFile)
	}
	return out, nil
}

// recipe is how devk makes one test image.
type recipe struct {
	// Package is a main package of the tree put on Base (a Debian base
	// kind, build.BaseBusybox if empty) as its Dockerfile lays it out.
	Package string
	Base    string
	// Busybox is the busybox base itself (busybox's own image).
	Busybox bool
	// Webroot makes a web server stand-in: busybox's httpd serving an
	// index.html from this directory on port 80.
	Webroot string
	// Pause is the cluster's own pause image.
	Pause bool
	// Files are what the Dockerfile adds besides the binary: path in the
	// image -> file of the tree ("" for a directory).
	Files map[string]string
	// Users are what the Dockerfile's adduser and addgroup write to
	// /etc/passwd and /etc/group, after root.
	Users, Groups []string
}

// recipes are the images devk makes, by name. Everything else in the
// manifest is listed as not built, with the files of specs that use it.
var recipes = map[string]recipe{
	"agnhost": {Package: "./test/images/agnhost", Base: build.BaseBusyboxNet,
		Files: map[string]string{
			"/localhost.crt": "test/images/agnhost/porter/localhost.crt",
			"/localhost.key": "test/images/agnhost/porter/localhost.key",
			"/uploads":       "",
		},
		Users:  []string{"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh"},
		Groups: []string{"user-defined-in-image:x:1000:", "group-defined-in-image:x:50000:user-defined-in-image"}},
	"regression-issue-74839": {Package: "./test/images/regression-issue-74839"},
	"busybox":                {Busybox: true},
	"httpd":                  {Webroot: "/usr/local/apache2/htdocs"},
	"nginx":                  {Webroot: "/usr/share/nginx/html"},
	"pause":                  {Pause: true},
}

// unpullable are the manifest's images that specs expect not to pull.
var unpullable = map[string]bool{"InvalidRegistryImage": true, "AuthenticatedAlpine": true, "AgnhostPrivate": true}

// ImagesOptions say which cluster's registry the images go to.
type ImagesOptions struct {
	Home, Name, TreeDir string
	Reporter            progress.Reporter
}

// ImageRow is one image of the manifest: pushed, or why not.
type ImageRow struct {
	TestImage
	// Ref is where the framework pulls it with devk's repo list.
	Ref string `json:"ref"`
	// BuiltFrom says what it was made of; Digest is the pushed manifest's.
	BuiltFrom string `json:"builtFrom,omitempty"`
	Digest    string `json:"digest,omitempty"`
	// Missing says why it was not built, and UsedBy the spec files of
	// test/e2e that name it.
	Missing string   `json:"missing,omitempty"`
	UsedBy  []string `json:"usedBy,omitempty"`
}

// ImagesResult is `devk e2e images`.
type ImagesResult struct {
	Cluster  string     `json:"cluster"`
	Registry string     `json:"registry"`
	Images   []ImageRow `json:"images"`
}

type imagesJob struct {
	ImagesOptions
	tree   *source.Tree
	cfg    layout.Config
	remote *image.Remote
	list   []TestImage
	build  *build.Job
	// bases are the Debian bases by kind; base is the busybox one.
	bases map[string]*image.DebianBase
	base  *image.DebianBase
	res   ImagesResult
}

// ImagesPhases are `devk e2e images`: manifest, build, base, push.
func ImagesPhases() []*phase.Phase[*imagesJob] {
	return []*phase.Phase[*imagesJob]{
		{Name: "manifest", Short: "the cluster and its registry; the images " + ManifestFile + " names", Run: readImages},
		{Name: "build", Short: "go build the test images' programs from the tree (agnhost, …), version-stamped", Run: buildPrograms},
		{Name: "base", Short: "the busybox bases from Debian's busybox-static (and netcat-openbsd, curl) packages", Run: makeBases},
		{Name: "push", Short: "assemble each image and push it under the name and tag the framework expects", Run: pushImages},
	}
}

// BuildImages builds the test images devk can make and pushes them to
// the cluster's registry under the names KUBE_TEST_REPO_LIST gives.
func BuildImages(ctx context.Context, o ImagesOptions) (*ImagesResult, error) {
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	j := &imagesJob{ImagesOptions: o}
	if _, err := phase.Run(ctx, ImagesPhases(), j, phase.Options{Reporter: o.Reporter, Job: "e2e-images"}); err != nil {
		return nil, err
	}
	return &j.res, nil
}

func readImages(ctx context.Context, j *imagesJob) (phase.Outcome, error) {
	cfg, _, err := layout.Open(j.Home, j.Name)
	if err != nil {
		return phase.Done, err
	}
	j.cfg = cfg
	if j.tree, err = source.Open(j.TreeDir); err != nil {
		return phase.Done, err
	}
	if j.list, err = ReadManifest(j.tree.Root); err != nil {
		return phase.Done, err
	}
	if j.remote, err = image.NewRemote(cfg.Registry, image.RemoteOptions{}); err != nil {
		return phase.Done, err
	}
	j.res = ImagesResult{Cluster: cfg.Name, Registry: cfg.Registry}
	return phase.Unchanged("%d images named, registry %s", len(j.list), cfg.Registry), nil
}

func (j *imagesJob) packages() []string {
	var out []string
	for _, t := range j.list {
		if r, ok := recipes[t.Name]; ok && r.Package != "" && !unpullable[t.ID] && !slices.Contains(out, r.Package) {
			out = append(out, r.Package)
		}
	}
	return out
}

func buildPrograms(ctx context.Context, j *imagesJob) (phase.Outcome, error) {
	bj, err := build.Run(ctx, build.Options{TreeDir: j.tree.Root, Components: j.packages(), Reporter: progress.Discard()}, phase.Options{})
	if err != nil {
		return phase.Done, err
	}
	j.build = bj
	var names []string
	for _, b := range bj.Binaries {
		names = append(names, b.Name)
	}
	return phase.Unchanged("%s (%s)", strings.Join(names, ", "), bj.Version.GitVersion), nil
}

func makeBases(ctx context.Context, j *imagesJob) (phase.Outcome, error) {
	j.bases = map[string]*image.DebianBase{}
	var tags []string
	for _, kind := range []string{build.BaseBusybox, build.BaseBusyboxNet} {
		b, err := image.MakeDebianBase(ctx, kind, j.build.Platform, "", nil)
		if err != nil {
			return phase.Done, err
		}
		j.bases[kind] = b
		tags = append(tags, kind+" "+b.Tag)
	}
	j.base = j.bases[build.BaseBusybox]
	return phase.Unchanged("%s", strings.Join(tags, ", ")), nil
}

func (j *imagesJob) busyboxVersion() string {
	for _, p := range j.base.Packages {
		if p.Name == debbusybox {
			return p.Version
		}
	}
	return "?"
}

// debbusybox is the Debian package of the busybox base.
const debbusybox = "busybox-static"

func pushImages(ctx context.Context, j *imagesJob) (phase.Outcome, error) {
	usedBy, err := specFilesByImage(j.tree.Root)
	if err != nil {
		return phase.Done, err
	}
	bb := fmt.Sprintf("Debian %s %s", debbusybox, j.busyboxVersion())
	pushed := 0
	for _, t := range j.list {
		repoPath := path.Join(Registries[t.Registry], t.Name)
		row := ImageRow{TestImage: t, Ref: MirrorOf(j.cfg.Registry, repoPath) + ":" + t.Tag}
		r, ok := recipes[t.Name]
		switch {
		case unpullable[t.ID]:
			row.Missing = "specs expect it not to pull (private or invalid registry)"
		case !ok:
			row.Missing = "devk has no recipe for it"
		}
		if row.Missing != "" {
			row.UsedBy = usedBy[t.ID]
			j.res.Images = append(j.res.Images, row)
			continue
		}
		img, from, err := j.assemble(ctx, r, bb)
		if err != nil {
			return phase.Done, fmt.Errorf("image %s: %w", t.Upstream(), err)
		}
		repo, err := j.remote.Repository(repoPath)
		if err != nil {
			return phase.Done, err
		}
		if err := j.remote.Push(ctx, repo.Tag(t.Tag), img); err != nil {
			return phase.Done, fmt.Errorf("push %s: %w", row.Ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			return phase.Done, err
		}
		row.BuiltFrom, row.Digest = from, d.String()
		j.res.Images = append(j.res.Images, row)
		pushed++
		j.Reporter.Debugf("pushed %s@%s (%s)", row.Ref, d, from)
	}
	return phase.Changed("%d of %d images pushed", pushed, len(j.list)), nil
}

// assemble makes the image of a recipe; from says what it is made of.
func (j *imagesJob) assemble(ctx context.Context, r recipe, busybox string) (v1.Image, string, error) {
	base := j.base.Image()
	switch {
	case r.Pause:
		ref := j.cfg.Images["pause"]
		if ref == "" {
			return nil, "", fmt.Errorf("cluster %s records no pause image: run `devk up --name %s` again", j.cfg.Name, j.cfg.Name)
		}
		plat, err := image.ParsePlatform(j.build.Platform)
		if err != nil {
			return nil, "", err
		}
		img, err := j.remote.Image(ctx, ref, plat)
		return img, "the cluster's pause image (" + ref + ")", err
	case r.Busybox:
		img, err := withConfig(base, nil, []string{"sh"})
		return img, busybox, err
	case r.Webroot != "":
		cf, err := base.ConfigFile()
		if err != nil {
			return nil, "", err
		}
		index := []byte("<html><body><h1>It works!</h1></body></html>\n")
		layer, err := filesLayer([]layerFile{{name: path.Join(r.Webroot, "index.html"), data: index}}, cf.Created.Time)
		if err != nil {
			return nil, "", err
		}
		img, err := mutate.AppendLayers(base, layer)
		if err != nil {
			return nil, "", err
		}
		img, err = withConfig(img, []string{"/usr/bin/httpd", "-f", "-v", "-p", "80", "-h", r.Webroot}, nil)
		return img, "stand-in: " + busybox + " httpd serving " + r.Webroot + " on :80", err
	}
	for _, b := range j.build.Binaries {
		if b.Component.Package != r.Package {
			continue
		}
		c := b.Component
		from := busybox
		if r.Base != "" && r.Base != build.BaseBusybox {
			base = j.bases[r.Base].Image()
			from += " with netcat-openbsd, curl and dash"
		}
		spec := image.Spec{Binary: c.Binary, Path: c.Layout.Path, Entrypoint: c.Layout.Entrypoint, Cmd: c.Layout.Cmd,
			Platform: j.build.Platform, Version: j.build.Version.GitVersion, Revision: j.build.Version.GitCommit, Base: base}
		created, err := time.Parse(time.RFC3339, j.build.Version.BuildDate)
		if err != nil {
			return nil, "", fmt.Errorf("the tree's build date %q: %w", j.build.Version.BuildDate, err)
		}
		spec.Created = created
		if files, err := extraFiles(r, j.tree.Root); err != nil {
			return nil, "", err
		} else if len(files) > 0 {
			extra, err := filesLayer(files, created)
			if err != nil {
				return nil, "", err
			}
			if spec.Base, err = mutate.AppendLayers(base, extra); err != nil {
				return nil, "", err
			}
		}
		cache := image.NewLayerCache(j.tree.OutputDir())
		layer, _, err := cache.LayerAt(b.Path, spec.BinaryPath(), b.SHA256, types.OCILayer)
		if err != nil {
			return nil, "", err
		}
		img, err := image.Assemble(spec, layer)
		return img, r.Package + " (" + spec.BinaryPath() + ") on " + from, err
	}
	return nil, "", fmt.Errorf("%s was not built", r.Package)
}

// withConfig sets an image's entrypoint and cmd.
func withConfig(img v1.Image, entrypoint, cmd []string) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Config.Entrypoint, cf.Config.Cmd = entrypoint, cmd
	return mutate.ConfigFile(img, cf)
}

// layerFile is one entry of a layer devk writes itself.
type layerFile struct {
	name string // absolute path in the image
	dir  bool
	data []byte
}

// filesLayer is a layer of files and directories (their parents made),
// stamped with created (so the same files give the same digest).
func filesLayer(files []layerFile, created time.Time) (v1.Layer, error) {
	slices.SortFunc(files, func(a, b layerFile) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	made := map[string]bool{}
	mkdir := func(dir string) error {
		var parts []string
		for _, p := range strings.Split(strings.Trim(dir, "/"), "/") {
			parts = append(parts, p)
			name := strings.Join(parts, "/") + "/"
			if p == "" || made[name] {
				continue
			}
			made[name] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: created}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, f := range files {
		if f.dir {
			if err := mkdir(f.name); err != nil {
				return nil, err
			}
			continue
		}
		if err := mkdir(path.Dir(f.name)); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.name, "/"), Mode: 0o644, Size: int64(len(f.data)), ModTime: created}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, tarball.WithMediaType(types.OCILayer))
}

// extraFiles are a recipe's files besides the binary, read from the tree,
// and its /etc/passwd and /etc/group.
func extraFiles(r recipe, treeRoot string) ([]layerFile, error) {
	var out []layerFile
	for name, src := range r.Files {
		if src == "" {
			out = append(out, layerFile{name: name, dir: true})
			continue
		}
		data, err := os.ReadFile(filepath.Join(treeRoot, filepath.FromSlash(src)))
		if err != nil {
			return nil, err
		}
		out = append(out, layerFile{name: name, data: data})
	}
	if len(r.Users) > 0 || len(r.Groups) > 0 {
		passwd := append([]string{"root:x:0:0:root:/root:/bin/sh"}, r.Users...)
		group := append([]string{"root:x:0:"}, r.Groups...)
		out = append(out, layerFile{name: "/etc/passwd", data: []byte(strings.Join(passwd, "\n") + "\n")},
			layerFile{name: "/etc/group", data: []byte(strings.Join(group, "\n") + "\n")})
	}
	return out, nil
}

// imageUse is how a spec names a manifest image: imageutils.<ID>.
var imageUse = regexp.MustCompile(`imageutils\.(\w+)\b`)

// specFilesByImage lists, by image ID, the files under test/e2e that name
// it (imageutils.GetE2EImage(imageutils.Httpd), …), relative to the tree.
func specFilesByImage(treeRoot string) (map[string][]string, error) {
	out := map[string][]string{}
	root := filepath.Join(treeRoot, "test", "e2e")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(treeRoot, path)
		seen := map[string]bool{}
		for _, m := range imageUse.FindAllSubmatch(data, -1) {
			if id := string(m[1]); !seen[id] {
				seen[id] = true
				out[id] = append(out[id], filepath.ToSlash(rel))
			}
		}
		return nil
	})
	for _, files := range out {
		sort.Strings(files)
	}
	return out, err
}
