package conformance

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
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
	"github.com/devk/devk/image/debbase"
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

// recipe is how devk makes one test image. Without Package, Webroot,
// Cluster or On it is the base itself (busybox, jessie-dnsutils).
type recipe struct {
	// Package is a main package of the tree put on Base (a Debian base
	// kind, build.BaseBusybox if empty) as its Dockerfile lays it out.
	Package string
	Base    string
	// Path is where the Dockerfile puts the binary when the layout devk
	// reads from the package's own Dockerfile does not say (nnp,
	// /sample-apiserver); Setuid is its `chmod +s`.
	Path   string
	Setuid bool
	// On is the recipe of the image this one is FROM (kitten and
	// nautilus are agnhost with pictures).
	On string
	// Webroot makes a web server stand-in: busybox's httpd serving an
	// index.html from this directory on port 80.
	Webroot string
	// Cluster names the cluster's own image used as it is (pause, etcd).
	Cluster string
	// Files are what the Dockerfile adds besides the binary: path in the
	// image -> file of the tree ("" for a directory).
	Files map[string]string
	// Links are the symlinks the Dockerfile makes: path in the image ->
	// target.
	Links map[string]string
	// Users are what the Dockerfile's adduser and addgroup write to
	// /etc/passwd and /etc/group, after root.
	Users, Groups []string
	// Config, when set, is the Dockerfile's ENTRYPOINT, CMD and USER,
	// replacing what the image would have.
	Config *imageConfig
}

// imageConfig is how an image starts its process.
type imageConfig struct {
	Entrypoint, Cmd []string
	User            string
}

// baseCmd is the cmd of a base used as an image (busybox's own).
var baseCmd = []string{"sh"}

// setuidMode is a binary's mode after the Dockerfile's `chmod +s`.
const setuidMode = 0o4755

// nonRootUser is the USER of nonroot's Dockerfile.
const nonRootUser = "1234"

// updateDemo is the kitten and nautilus images of the kubectl Update
// Demo specs: agnhost's test-webserver serving a picture and data.json
// from / (the Dockerfile copies them into agnhost's working directory).
func updateDemo(name string) recipe {
	dir := "test/images/" + name + "/html/"
	return recipe{On: "agnhost",
		Files:  map[string]string{"/" + name + ".jpg": dir + name + ".jpg", "/data.json": dir + "data.json"},
		Config: &imageConfig{Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}}}
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
		// RUN ln -s agnhost agnhost-2: the Containers specs override the
		// entrypoint with /agnhost-2.
		Links:  map[string]string{"/agnhost-2": "agnhost"},
		Users:  []string{"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh"},
		Groups: []string{"user-defined-in-image:x:1000:", "group-defined-in-image:x:50000:user-defined-in-image"}},
	"regression-issue-74839": {Package: "./test/images/regression-issue-74839"},
	"busybox":                {Base: build.BaseBusybox},
	"jessie-dnsutils":        {Base: build.BaseDNSUtils},
	"nonroot":                {Base: build.BaseBusybox, Config: &imageConfig{Cmd: baseCmd, User: nonRootUser}},
	"httpd":                  {Webroot: "/usr/local/apache2/htdocs"},
	"nginx":                  {Webroot: "/usr/share/nginx/html"},
	"pause":                  {Cluster: "pause"},
	"etcd":                   {Cluster: "etcd"},
	// Its entrypoint is the binary's path, as image.Assemble makes it.
	"sample-apiserver": {Package: "./staging/src/k8s.io/sample-apiserver", Path: "/sample-apiserver"},
	"nonewprivs": {Package: "./test/images/nonewprivs", Path: "/usr/local/bin/nnp", Setuid: true,
		Config: &imageConfig{Cmd: []string{"nnp"}}},
	"kitten":   updateDemo("kitten"),
	"nautilus": updateDemo("nautilus"),
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
	// home is devk's home, resolved.
	home   string
	tree   *source.Tree
	cfg    layout.Config
	paths  layout.ClusterFiles
	remote *image.Remote
	list   []TestImage
	build  *build.Job
	// bases are the Debian bases by kind.
	bases map[string]madeImage
	// built are the images made so far, by recipe name (On reuses them).
	built map[string]madeImage
	res   ImagesResult
}

// ImagesPhases are `devk e2e images`: manifest, build, base, push.
func ImagesPhases() []*phase.Phase[*imagesJob] {
	return []*phase.Phase[*imagesJob]{
		{Name: "manifest", Short: "the cluster and its registry; the images " + ManifestFile + " names", Run: readImages},
		{Name: "build", Short: "go build the test images' programs from the tree (agnhost, …), version-stamped", Run: buildPrograms},
		{Name: "base", Short: "the busybox bases from Debian's busybox-static (and netcat-openbsd, curl, bind9-dnsutils) packages", Run: makeBases},
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
	cfg, paths, err := layout.Open(j.Home, j.Name)
	if err != nil {
		return phase.Done, err
	}
	j.cfg, j.paths = cfg, paths
	if j.tree, err = source.Open(j.TreeDir); err != nil {
		return phase.Done, err
	}
	if j.list, err = ReadManifest(j.tree.Root); err != nil {
		return phase.Done, err
	}
	home, err := layout.HomeDir(j.Home)
	if err != nil {
		return phase.Done, err
	}
	j.home = home
	if j.remote, err = image.NewRemote(cfg.Registry, image.RemoteOptions{Keychain: image.KeychainFor(home)}); err != nil {
		return phase.Done, err
	}
	j.res = ImagesResult{Cluster: cfg.Name, Registry: cfg.Registry}
	return phase.Unchanged("%d images named, registry %s", len(j.list), cfg.Registry), nil
}

// recipesOf are the recipes the listed images need, those they are
// built on included, in the list's order.
func recipesOf(list []TestImage) []recipe {
	var out []recipe
	for _, t := range list {
		if unpullable[t.ID] {
			continue
		}
		for name := t.Name; name != ""; name = recipes[name].On {
			if r, ok := recipes[name]; ok {
				out = append(out, r)
			}
		}
	}
	return out
}

func (j *imagesJob) packages() []string {
	var out []string
	for _, r := range recipesOf(j.list) {
		if r.Package != "" && !slices.Contains(out, r.Package) {
			out = append(out, r.Package)
		}
	}
	return out
}

// baseKinds are the Debian bases the listed images need: busybox's
// always (the stand-ins' and the default), then the others by name.
func (j *imagesJob) baseKinds() []string {
	out := []string{build.BaseBusybox}
	for _, r := range recipesOf(j.list) {
		if r.Base != "" && !slices.Contains(out, r.Base) {
			out = append(out, r.Base)
		}
	}
	slices.Sort(out[1:])
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
	j.bases = map[string]madeImage{}
	var tags []string
	for _, kind := range j.baseKinds() {
		b, err := image.MakeDebianBase(ctx, kind, j.build.Platform, "", nil)
		if err != nil {
			return phase.Done, err
		}
		j.bases[kind] = madeImage{img: b.Image(), from: debianFrom(kind, b.Packages)}
		tags = append(tags, kind+" "+b.Tag)
	}
	return phase.Unchanged("%s", strings.Join(tags, ", ")), nil
}

// madeImage is an image devk made (a Debian base, a recipe's image) and
// what it is made of.
type madeImage struct {
	img  v1.Image
	from string
}

// debianFrom says what a base kind is made of: the Debian packages it
// asks for, at the versions apt chose.
func debianFrom(kind string, pkgs []debbase.Package) string {
	var ids []string
	for _, name := range image.DebianBasePackages(kind) {
		for _, p := range pkgs {
			if p.Name == name {
				ids = append(ids, p.Name+" "+p.Version)
			}
		}
	}
	return "Debian " + strings.Join(ids, ", ")
}

func pushImages(ctx context.Context, j *imagesJob) (phase.Outcome, error) {
	usedBy, err := specFilesByImage(j.tree.Root)
	if err != nil {
		return phase.Done, err
	}
	j.built = map[string]madeImage{}
	pushed := 0
	record := PushedImages{Registry: j.cfg.Registry, Images: map[string]string{}}
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
		img, from, err := j.image(ctx, t.Name, r)
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
		record.Images[row.Ref] = row.Digest
		j.res.Images = append(j.res.Images, row)
		pushed++
		j.Reporter.Debugf("pushed %s@%s (%s)", row.Ref, d, from)
	}
	if err := record.write(layout.HomeFiles(j.home).E2EImages(j.cfg.Registry)); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%d of %d images pushed", pushed, len(j.list)), nil
}

// image makes the image of a recipe once per run; from says what it is
// made of.
func (j *imagesJob) image(ctx context.Context, name string, r recipe) (v1.Image, string, error) {
	if b, ok := j.built[name]; ok {
		return b.img, b.from, nil
	}
	img, from, err := j.assemble(ctx, r)
	if err != nil {
		return nil, "", err
	}
	if r.Config != nil {
		if img, err = withConfig(img, *r.Config); err != nil {
			return nil, "", err
		}
	}
	j.built[name] = madeImage{img: img, from: from}
	return img, from, nil
}

// assemble makes the image of a recipe as its layers say; image applies
// the recipe's Config.
func (j *imagesJob) assemble(ctx context.Context, r recipe) (v1.Image, string, error) {
	kind := r.Base
	if kind == "" {
		kind = build.BaseBusybox
	}
	base, baseFrom := j.bases[kind].img, j.bases[kind].from
	switch {
	case r.Cluster != "":
		ref := j.cfg.Images[r.Cluster]
		if ref == "" {
			return nil, "", fmt.Errorf("cluster %s records no %s image: run `devk up --name %s` again", j.cfg.Name, r.Cluster, j.cfg.Name)
		}
		plat, err := image.ParsePlatform(j.build.Platform)
		if err != nil {
			return nil, "", err
		}
		img, err := j.remote.Image(ctx, ref, plat)
		return img, "the cluster's " + r.Cluster + " image (" + ref + ")", err
	case r.On != "":
		on, onFrom, err := j.image(ctx, r.On, recipes[r.On])
		if err != nil {
			return nil, "", err
		}
		cf, err := on.ConfigFile()
		if err != nil {
			return nil, "", err
		}
		img, err := withFiles(on, r, j.tree.Root, cf.Created.Time)
		return img, r.On + " (" + onFrom + ") with " + strings.Join(slices.Sorted(maps.Keys(r.Files)), ", "), err
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
		img, err = withConfig(img, imageConfig{Entrypoint: []string{"/usr/bin/httpd", "-f", "-v", "-p", "80", "-h", r.Webroot}})
		return img, "stand-in: " + baseFrom + " httpd serving " + r.Webroot + " on :80", err
	case r.Package == "":
		img, err := withConfig(base, imageConfig{Cmd: baseCmd})
		return img, baseFrom, err
	}
	for _, b := range j.build.Binaries {
		if b.Component.Package != r.Package {
			continue
		}
		c := b.Component
		spec := image.Spec{Binary: c.Binary, Path: c.Layout.Path, Entrypoint: c.Layout.Entrypoint, Cmd: c.Layout.Cmd,
			Platform: j.build.Platform, Version: j.build.Version.GitVersion, Revision: j.build.Version.GitCommit}
		if r.Path != "" {
			spec.Path = r.Path
		}
		created, err := time.Parse(time.RFC3339, j.build.Version.BuildDate)
		if err != nil {
			return nil, "", fmt.Errorf("the tree's build date %q: %w", j.build.Version.BuildDate, err)
		}
		spec.Created = created
		if spec.Base, err = withFiles(base, r, j.tree.Root, created); err != nil {
			return nil, "", err
		}
		layer, err := binaryLayer(j.tree.OutputDir(), b, spec.BinaryPath(), r.Setuid, created)
		if err != nil {
			return nil, "", err
		}
		img, err := image.Assemble(spec, layer)
		from := r.Package + " (" + spec.BinaryPath()
		if r.Setuid {
			from += ", setuid"
		}
		return img, from + ") on " + baseFrom, err
	}
	return nil, "", fmt.Errorf("%s was not built", r.Package)
}

// binaryLayer is the layer of a built binary at imagePath: from the
// tree's layer cache, or, setuid, a layer of its own (the cache's layers
// hold binaries 0755; the setuid test programs are small).
func binaryLayer(outputDir string, b build.Binary, imagePath string, setuid bool, created time.Time) (v1.Layer, error) {
	if !setuid {
		layer, _, err := image.NewLayerCache(outputDir).LayerAt(b.Path, imagePath, b.SHA256, types.OCILayer)
		return layer, err
	}
	data, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	return filesLayer([]layerFile{{name: imagePath, data: data, mode: setuidMode}}, created)
}

// withFiles is img with a layer of the recipe's files (extraFiles), if
// it has any.
func withFiles(img v1.Image, r recipe, treeRoot string, created time.Time) (v1.Image, error) {
	files, err := extraFiles(r, treeRoot)
	if err != nil || len(files) == 0 {
		return img, err
	}
	layer, err := filesLayer(files, created)
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(img, layer)
}

// withConfig sets an image's entrypoint, cmd and user.
func withConfig(img v1.Image, c imageConfig) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User = c.Entrypoint, c.Cmd, c.User
	return mutate.ConfigFile(img, cf)
}

// layerFile is one entry of a layer devk writes itself.
type layerFile struct {
	name string // absolute path in the image
	dir  bool
	// link, when set, makes the entry a symlink to it.
	link string
	data []byte
	// mode is a file's; 0 means fileMode.
	mode int64
}

// fileMode is the mode of the files devk adds to test images.
const fileMode = 0o644

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
		if f.link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(f.name, "/"), Linkname: f.link, Mode: 0o777, ModTime: created}); err != nil {
				return nil, err
			}
			continue
		}
		mode := f.mode
		if mode == 0 {
			mode = fileMode
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.name, "/"), Mode: mode, Size: int64(len(f.data)), ModTime: created}); err != nil {
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
// its symlinks, and its /etc/passwd and /etc/group.
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
	for name, target := range r.Links {
		out = append(out, layerFile{name: name, link: target})
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
