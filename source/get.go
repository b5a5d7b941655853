package source

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

// GetOptions say which tree to make where.
type GetOptions struct {
	// Version is a Kubernetes release tag such as v1.34.4.
	Version string
	// Dir is where the tree goes; it must be absent, empty, or a tree
	// that an earlier `get` of the same version made (or began).
	Dir      string
	Reporter progress.Reporter
	Phases   phase.Flags
	PlanOut  io.Writer
}

// GetResult says what Get made.
type GetResult struct {
	Root    string   `json:"root"`
	Version string   `json:"version"`
	Already bool     `json:"alreadyPresent"`
	Dropped []string `json:"droppedFromGoWork,omitempty"`
	Files   int      `json:"files"`
}

// ErrNotServed is returned when the module proxy does not have a version.
var ErrNotServed = errors.New("not served by the Go module proxy")

const (
	// completeMarker lives in .git so it does not make the tree dirty.
	completeMarker   = ".git/devk-source.json"
	incompleteMarker = ".devk-source-incomplete"
)

type sourceMarker struct {
	Version string    `json:"version"`
	Made    time.Time `json:"made"`
}

// getJob is the state the `source get` phases share.
type getJob struct {
	GetOptions
	res     GetResult
	kubeDir string    // k8s.io/kubernetes in the module cache
	modTime time.Time // the release's time as the proxy gives it
	staging []stagingModule
}

// stagingModule is a staging module go.work names and the proxy serves.
type stagingModule struct {
	from string // in the module cache
	to   string // <tree>/staging/src/k8s.io/<name>
}

// GetPhases are the phases of `devk source get`, for help and dry runs.
func GetPhases() []*phase.Phase[*getJob] {
	return []*phase.Phase[*getJob]{
		{
			Name:  "download",
			Short: "download k8s.io/kubernetes@VERSION through the Go module proxy",
			IO: func(j *getJob) ([]string, []string) {
				return []string{"k8s.io/kubernetes@" + j.Version + " (GOPROXY)"}, []string{"the Go module cache"}
			},
			Run: func(ctx context.Context, j *getJob) (phase.Outcome, error) { return phase.Done, download(ctx, j) },
		},
		{
			Name:  "staging",
			Short: "download the staging modules go.work names (k8s.io/<name>@v0.X.Y)",
			IO: func(j *getJob) ([]string, []string) {
				return []string{"go.work of the release", "k8s.io/<staging>@" + stagingVersion(j.Version) + " (GOPROXY)"}, []string{"the Go module cache"}
			},
			Run: func(ctx context.Context, j *getJob) (phase.Outcome, error) {
				return phase.Done, downloadStaging(ctx, j)
			},
		},
		{
			Name:  "extract",
			Short: "copy the release and staging modules into the tree, restoring exec bits",
			IO: func(j *getJob) ([]string, []string) {
				return []string{"the Go module cache"}, []string{j.Dir}
			},
			Run: func(ctx context.Context, j *getJob) (phase.Outcome, error) { return phase.Done, extract(ctx, j) },
		},
		{
			Name:  "fixup",
			Short: "drop unserved go.work entries and recreate the Makefile symlinks",
			IO: func(j *getJob) ([]string, []string) {
				return []string{j.Dir + "/go.work"}, []string{j.Dir + "/go.work", j.Dir + "/Makefile", j.Dir + "/Makefile.generated_files"}
			},
			Run: func(ctx context.Context, j *getJob) (phase.Outcome, error) { return phase.Done, fixup(ctx, j) },
		},
		{
			Name:  "git",
			Short: "git init, commit and tag VERSION so `git describe` stamps versions",
			IO: func(j *getJob) ([]string, []string) {
				return []string{j.Dir}, []string{j.Dir + "/.git"}
			},
			Run: func(ctx context.Context, j *getJob) (phase.Outcome, error) { return phase.Done, gitCommit(ctx, j) },
		},
	}
}

// Get makes a buildable Kubernetes tree of o.Version in o.Dir.
func Get(ctx context.Context, o GetOptions) (*GetResult, error) {
	if err := validname.KubeRelease(o.Version); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	if o.Reporter == nil {
		o.Reporter = progress.Discard()
	}
	j := &getJob{GetOptions: o, res: GetResult{Root: dir, Version: o.Version}}
	already, err := checkTarget(dir, o.Version)
	if err != nil {
		return nil, err
	}
	if already {
		j.res.Already = true
		return &j.res, nil
	}
	popts := o.Phases.Options()
	popts.Reporter = o.Reporter
	popts.PlanOut = o.PlanOut
	if _, err := phase.Run(ctx, GetPhases(), j, popts); err != nil {
		return nil, err
	}
	return &j.res, nil
}

// checkTarget decides whether dir may receive the tree: absent or empty,
// or begun/made by an earlier get of the same version. It touches nothing.
func checkTarget(dir, version string) (already bool, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return false, nil
	}
	var m sourceMarker
	if data, err := os.ReadFile(filepath.Join(dir, completeMarker)); err == nil && json.Unmarshal(data, &m) == nil {
		if m.Version == version && IsTree(dir) {
			return true, nil
		}
		return false, fmt.Errorf("%s already holds Kubernetes %s, not %s: nothing was changed; choose another directory (devk source get %s DIR)", dir, m.Version, version, version)
	}
	if data, err := os.ReadFile(filepath.Join(dir, incompleteMarker)); err == nil {
		if v := strings.TrimSpace(string(data)); v != version {
			return false, fmt.Errorf("%s holds an unfinished get of %s, not %s: nothing was changed; remove it or choose another directory", dir, v, version)
		}
		return false, nil // resume an interrupted get of the same version
	}
	return false, fmt.Errorf("%s is not empty and was not made by `devk source get %s`: nothing was changed; choose another directory (devk source get %s DIR)", dir, version, version)
}

// stagingVersion maps v1.34.4 to the staging modules' v0.34.4.
func stagingVersion(v string) string { return "v0." + strings.TrimPrefix(v, "v1.") }

// modDownload is one object of `go mod download -json`.
type modDownload struct {
	Path    string
	Version string
	Info    string
	Dir     string
	Error   string
}

// goModDownload downloads mods (path@version) into the module cache,
// reporting the bytes downloaded for the step ctx runs under.
func goModDownload(ctx context.Context, rep progress.Reporter, mods ...string) (map[string]modDownload, error) {
	stop := watchDownload(ctx, rep, mods)
	defer stop()
	// Outside any module (SelfGo's "/"): a go.mod planted in /tmp would
	// apply to a temporary directory beneath it.
	cmd := SelfGo(append([]string{"mod", "download", "-json"}, mods...)...)
	cmd.Env = append(cmd.Env, "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, runErr := execx.Output(ctx, cmd)
	res := map[string]modDownload{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m modDownload
		if err := dec.Decode(&m); err != nil {
			break
		}
		res[m.Path] = m
	}
	if len(res) == 0 && runErr != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("go mod download: %w", runErr)
	}
	return res, nil
}

func download(ctx context.Context, j *getJob) error {
	res, err := goModDownload(ctx, j.Reporter, "k8s.io/kubernetes@"+j.Version)
	if err != nil {
		return err
	}
	m := res["k8s.io/kubernetes"]
	if m.Error != "" || m.Dir == "" {
		return fmt.Errorf("k8s.io/kubernetes@%s: %w (GOPROXY=%s); check the release tag, e.g. v1.34.4\ngo said: %s",
			j.Version, ErrNotServed, goEnv(ctx, "GOPROXY"), m.Error)
	}
	j.kubeDir = m.Dir
	j.modTime = infoTime(m.Info)
	return nil
}

// SelfGo is the go command devk runs for itself (go env, its own
// programs), not for a tree: in "/", which only root can write, so no
// go.mod or go.work someone else planted above the working directory (a
// /tmp/go.mod with a toolchain line) applies, and with GOTOOLCHAIN=local,
// so go never downloads and runs another toolchain.
func SelfGo(args ...string) execx.Cmd {
	return execx.Cmd{Name: "go", Args: args, Dir: "/", Env: []string{"GOTOOLCHAIN=local", "GOWORK=off"}}
}

func goEnv(ctx context.Context, name string) string {
	out, err := execx.Output(ctx, SelfGo("env", name))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func infoTime(infoFile string) time.Time {
	var info struct{ Time time.Time }
	if data, err := os.ReadFile(infoFile); err == nil && json.Unmarshal(data, &info) == nil && !info.Time.IsZero() {
		return info.Time.UTC()
	}
	return time.Unix(0, 0).UTC()
}

func downloadStaging(ctx context.Context, j *getJob) error {
	workPath, modPath := filepath.Join(j.kubeDir, "go.work"), filepath.Join(j.kubeDir, "go.mod")
	gowork, err := os.ReadFile(workPath)
	if err != nil {
		return fmt.Errorf("the release has no go.work (only releases from v1.30 on have one): %w", err)
	}
	names, err := workUses(workPath, gowork)
	if err != nil {
		return fmt.Errorf("go.work of k8s.io/kubernetes@%s: %w", j.Version, err)
	}
	gomod, err := os.ReadFile(modPath)
	if err != nil {
		return err
	}
	sv := stagingVersion(j.Version)
	var mods []string
	for _, name := range names {
		mods = append(mods, "k8s.io/"+name+"@"+sv)
	}
	res, err := goModDownload(ctx, j.Reporter, mods...)
	if err != nil {
		return err
	}
	for _, name := range names {
		m := res["k8s.io/"+name]
		if m.Error == "" && m.Dir != "" {
			// The name comes from the release's go.work: it must stay a
			// directory beneath staging/src/k8s.io.
			to, err := validname.PathIn(j.Dir, "staging", "src", "k8s.io", name)
			if err != nil {
				return fmt.Errorf("go.work of k8s.io/kubernetes@%s names staging module %q: %w", j.Version, name, err)
			}
			j.staging = append(j.staging, stagingModule{from: m.Dir, to: to})
			continue
		}
		// sample-controller and sample-cli-plugin are not published as
		// modules; nothing the release builds needs them.
		needed, err := requires(modPath, gomod, "k8s.io/"+name)
		if err != nil {
			return fmt.Errorf("go.mod of k8s.io/kubernetes@%s: %w", j.Version, err)
		}
		if needed {
			return fmt.Errorf("staging module k8s.io/%s@%s: %w and k8s.io/kubernetes needs it; go said: %s", name, sv, ErrNotServed, m.Error)
		}
		j.res.Dropped = append(j.res.Dropped, name)
	}
	return nil
}

// Extracting copies files with at least minCopiers goroutines (two per
// CPU): a tree is ~30,000 small files, and the copies wait on the disk.
const (
	minCopiers     = 4
	copyBufferSize = 256 << 10
)

func extract(ctx context.Context, j *getJob) error {
	if err := os.MkdirAll(j.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(j.Dir, incompleteMarker), []byte(j.Version+"\n"), 0o644); err != nil {
		return err
	}
	type copyJob struct{ from, to string }
	var jobs []copyJob
	var dirs []string
	add := func(src, dst string) error {
		return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, path)
			target := filepath.Join(dst, rel)
			if d.IsDir() {
				dirs = append(dirs, target)
				return nil
			}
			if d.Type().IsRegular() {
				jobs = append(jobs, copyJob{path, target})
			}
			return nil
		})
	}
	if err := add(j.kubeDir, j.Dir); err != nil {
		return err
	}
	for _, m := range j.staging {
		if err := add(m.from, m.to); err != nil {
			return err
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		// The module cache is read-only; a resumed get meets its own dirs.
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	ch := make(chan copyJob)
	var mu sync.Mutex
	n := 0
	g.Go(func() error {
		defer close(ch)
		for _, c := range jobs {
			select {
			case ch <- c:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range max(minCopiers, 2*runtime.NumCPU()) {
		g.Go(func() error {
			buf := make([]byte, copyBufferSize)
			for c := range ch {
				if err := copyFile(c.from, c.to, buf); err != nil {
					return err
				}
				mu.Lock()
				n++
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	j.res.Files = n
	return nil
}

// copyFile copies a read-only module-cache file into the tree, 0755 when it
// starts with "#!" (the module zip drops modes), 0644 otherwise.
func copyFile(from, to string, buf []byte) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	n, err := io.ReadFull(in, buf[:2])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return err
	}
	mode := os.FileMode(0o644)
	if n == 2 && buf[0] == '#' && buf[1] == '!' {
		mode = 0o755
	}
	os.Remove(to) // a resumed get may meet a file of its own
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := out.Write(buf[:n]); err != nil {
		out.Close()
		return err
	}
	if _, err := io.CopyBuffer(out, in, buf); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func fixup(ctx context.Context, j *getJob) error {
	workPath := filepath.Join(j.Dir, "go.work")
	data, err := os.ReadFile(workPath)
	if err != nil {
		return err
	}
	kept, err := dropUses(workPath, data, j.res.Dropped)
	if err != nil {
		return err
	}
	if err := os.WriteFile(workPath, kept, 0o644); err != nil {
		return err
	}
	// The module zip drops symlinks; these two are what `make` needs.
	for _, name := range []string{"Makefile", "Makefile.generated_files"} {
		target := filepath.Join("build", "root", name)
		if _, err := os.Stat(filepath.Join(j.Dir, target)); err != nil {
			continue
		}
		link := filepath.Join(j.Dir, name)
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	return nil
}

func gitCommit(ctx context.Context, j *getJob) error {
	os.RemoveAll(filepath.Join(j.Dir, ".git")) // a resumed get starts its history again
	date := j.modTime.Format(time.RFC3339)
	env := []string{
		"GIT_AUTHOR_NAME=devk", "GIT_AUTHOR_EMAIL=devk@localhost", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=devk", "GIT_COMMITTER_EMAIL=devk@localhost", "GIT_COMMITTER_DATE=" + date,
	}
	// Loose objects at zlib level 1: git add of ~30,000 files is the slow
	// part of a get, and this repository only has to describe itself.
	fast := []string{"-C", j.Dir, "-c", "core.looseCompression=1", "-c", "core.autocrlf=false", "-c", "gc.auto=0"}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A", "--", ".", ":!" + incompleteMarker},
		{"commit", "-q", "--no-verify", "-m", "Kubernetes " + j.Version + " from the Go module proxy (devk source get)"},
		{"tag", j.Version},
	} {
		if err := execx.Run(ctx, execx.Cmd{Name: "git", Args: append(append([]string{}, fast...), args...), Env: env}); err != nil {
			return err
		}
	}
	m, _ := json.Marshal(sourceMarker{Version: j.Version, Made: time.Now().UTC()})
	if err := os.WriteFile(filepath.Join(j.Dir, completeMarker), m, 0o644); err != nil {
		return err
	}
	return os.Remove(filepath.Join(j.Dir, incompleteMarker))
}

// ModuleFiles is the directory of module path at version in the module
// cache, downloaded if it is not there yet (a module devk built from is).
func ModuleFiles(ctx context.Context, path, version string) (string, error) {
	res, err := goModDownload(ctx, progress.Discard(), path+"@"+version)
	if err != nil {
		return "", err
	}
	m := res[path]
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("module %s@%s: %s", path, version, cmp.Or(m.Error, "not in the module cache"))
	}
	return m.Dir, nil
}
