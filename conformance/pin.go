package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// PushedImages is what `devk e2e images` pushed to a cluster's registry
// (layout.Paths.E2EImages): each reference the framework pulls, by tag,
// and the digest devk pushed under it.
type PushedImages struct {
	Registry string            `json:"registry"`
	Images   map[string]string `json:"images"`
}

func (p PushedImages) write(file string) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(file, append(data, '\n'), 0o644, "")
}

// readPushed reads the record; none is an empty one.
func readPushed(file string) (PushedImages, error) {
	var p PushedImages
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err == nil {
		err = json.Unmarshal(data, &p)
	}
	if err != nil {
		return p, fmt.Errorf("what `devk e2e images` pushed, %s: %w (run `devk e2e images` again)", file, err)
	}
	return p, nil
}

// pushedFor is what `devk e2e images` pushed to registry, recorded in
// the home (Home.E2EImages), else, from before, in the cluster's files.
func pushedFor(home string, paths layout.ClusterFiles, registry string) (PushedImages, error) {
	file := layout.HomeFiles(home).E2EImages(registry)
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		file = paths.E2EImages()
	}
	return readPushed(file)
}

// pinImages makes what the nodes run in the specs be what `devk e2e
// images` pushed.
//
// The framework names its images by tag: KUBE_TEST_REPO_LIST maps each of
// its registries to a prefix, and the framework appends name:tag, so a
// repo list cannot carry digests. So devk pins instead. Every tag of the
// cluster's registry the framework would pull must be one `devk e2e
// images` recorded, at the digest it recorded; a tag devk did not push
// (one it has no recipe for, filled before writes needed devk's
// credential) is refused, not run. Then each node's containerd pulls
// every recorded tag now, through CRI, and must hold the recorded digest
// under it. From here on a tag can change only by a write with devk's
// credential (the registry refuses any other, and the forwarder on the
// bridge takes no write at all), and the kubelet starts the specs' pods
// from the image the node holds (their pull policy is IfNotPresent).
func pinImages(ctx context.Context, j *Job) (phase.Outcome, error) {
	list, err := ReadManifest(j.tree.Root)
	if err != nil {
		return phase.Done, err
	}
	r, err := image.NewRemote(j.cfg.Registry, image.RemoteOptions{})
	if err != nil {
		return phase.Done, err
	}
	tags := func() (map[string]string, []string, error) {
		rec, err := pushedFor(j.home, j.paths, j.cfg.Registry)
		if err != nil {
			return nil, nil, err
		}
		return pinnedTags(ctx, r, j.cfg.Registry, list, rec, j.home)
	}
	pinned, missing, err := tags()
	if err != nil {
		return phase.Done, err
	}
	built := ""
	if len(missing) > 0 {
		// A spec would wait minutes on a pull that cannot succeed:
		// make them now, as `devk e2e images` does.
		j.Reporter.Infof("%d test images the specs may pull are not in the registry (%s): building them as `devk e2e images`", len(missing), strings.Join(missing[:min(3, len(missing))], ", "))
		if _, err := BuildImages(ctx, ImagesOptions{Home: j.Home, Name: j.Name, TreeDir: j.tree.Root, Reporter: progress.Under(j.Reporter, "images")}); err != nil {
			return phase.Done, fmt.Errorf("the registry lacks test images (%s); building them: %w", strings.Join(missing, ", "), err)
		}
		if pinned, missing, err = tags(); err != nil {
			return phase.Done, err
		}
		if len(missing) > 0 {
			return phase.Done, fmt.Errorf("`devk e2e images` ran, and the registry still lacks %s", strings.Join(missing, ", "))
		}
		built = "; the missing ones built and pushed first"
	}
	var paths []layout.NodeFiles
	for _, n := range j.cfg.Network.Nodes {
		p, err := j.paths.Node(j.cfg, n.Name)
		if err != nil {
			return phase.Done, err
		}
		paths = append(paths, p)
	}
	for _, p := range paths {
		if err := pinNode(ctx, p.ContainerdSocket(), pinned); err != nil {
			return phase.Done, err
		}
	}
	return phase.Changed("%d images pinned by digest on %d node(s)%s", len(pinned), len(paths), built), nil
}

// pinnedTags are the tags of the registry the framework pulls from (the
// manifest's images, with devk's repo list), each with the digest `devk
// e2e images` pushed under it; an error for a tag it did not push, or
// that moved since. missing are the tags the registry lacks that devk
// pushed or has a recipe for. home is devk's, for the advice.
func pinnedTags(ctx context.Context, r *image.Remote, registry string, list []TestImage, rec PushedImages, home string) (pinned map[string]string, missing []string, err error) {
	pinned = map[string]string{} // ref by tag: digest
	for _, t := range list {
		if unpullable[t.ID] {
			continue
		}
		tagged := MirrorOf(registry, path.Join(Registries[t.Registry], t.Name)) + ":" + t.Tag
		want, recorded := rec.Images[tagged]
		ref, err := r.ParseReference(tagged)
		if err != nil {
			return nil, nil, err
		}
		d, err := r.Head(ctx, ref)
		_, buildable := recipes[t.Name]
		switch {
		case image.IsNotFound(err) && (recorded || buildable):
			missing = append(missing, tagged)
			continue
		case image.IsNotFound(err):
			continue // devk cannot make it: a spec that needs it fails to pull it, "not found"
		case err != nil:
			return nil, nil, err
		case !recorded:
			return nil, nil, fmt.Errorf("the registry holds %s (%s), which `devk e2e images` did not push (devk has no recipe for it, or it was not run): devk runs only images it pushed: run `devk e2e images`, or remove the tag (devk's own registry keeps it as %s; restart the registry after: `devk down`, `devk up`)",
				tagged, d.Digest, filepath.Join(home, "registry", "manifests", ref.Context().RepositoryStr(), t.Tag))
		case d.Digest.String() != want:
			return nil, nil, fmt.Errorf("%s is %s in the registry, not %s, which `devk e2e images` pushed: run `devk e2e images` again", tagged, d.Digest, want)
		}
		pinned[tagged] = want
	}
	return pinned, missing, nil
}

// pinNode pulls every tag into the containerd at socket and checks that
// the digest it holds under the tag is the one devk pushed.
func pinNode(ctx context.Context, socket string, pinned map[string]string) error {
	rt, err := cri.Dial(socket)
	if err != nil {
		return err
	}
	defer rt.Close()
	for _, tagged := range slices.Sorted(maps.Keys(pinned)) {
		want := pinned[tagged]
		if _, err := rt.PullImage(ctx, tagged); err != nil {
			return fmt.Errorf("pin %s on the node: %w", tagged, err)
		}
		st, err := rt.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: tagged}})
		if err != nil {
			return fmt.Errorf("status of %s on the node (%s): %w", tagged, socket, err)
		}
		repo := tagged[:strings.LastIndex(tagged, ":")] // the tag follows the last '/'
		if st.Image == nil || !slices.Contains(st.Image.RepoDigests, repo+"@"+want) {
			var got []string
			if st.Image != nil {
				got = st.Image.RepoDigests
			}
			return fmt.Errorf("the node (%s) holds %s as %v, not %s@%s, which devk pushed: run `devk e2e images` again", socket, tagged, got, repo, want)
		}
	}
	return nil
}
