package source

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/module"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/progress"
)

// downloadPollInterval is how often a download's progress is measured.
const downloadPollInterval = time.Second

// watchDownload reports, for the step ctx runs under, how many bytes of
// mods' zips (path@version) the go command has downloaded, until the
// returned stop is called. The go command does not say how large a zip
// is, so there is no total; it downloads a zip into <version>.zip<n>.tmp
// beside where the zip goes in the module cache, and renames it when
// complete: the sizes of those files are the bytes so far.
func watchDownload(ctx context.Context, rep progress.Reporter, mods []string) (stop func()) {
	step := progress.StepOf(ctx)
	var zips []string
	if cache := goEnv(ctx, "GOMODCACHE"); filepath.IsAbs(cache) {
		for _, m := range mods {
			if zip, err := zipPath(cache, m); err == nil {
				zips = append(zips, zip)
			}
		}
	}
	if len(zips) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(context.Context) {
			bytes, done := downloaded(zips)
			s := progress.Status{Verb: "downloaded", Done: bytes, Unit: progress.Bytes}
			if len(zips) > 1 {
				s.Note = fmt.Sprintf("%d of %d modules", done, len(zips))
			}
			rep.Progress(step, s)
		}, downloadPollInterval)
	}()
	return func() { cancel(); wg.Wait() }
}

// zipPath is where the module cache keeps the zip of mod (path@version).
func zipPath(cache, mod string) (string, error) {
	path, version, ok := strings.Cut(mod, "@")
	if !ok {
		return "", fmt.Errorf("%s: no version", mod)
	}
	ep, ev, err := escapeModule(path, version)
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "cache", "download", filepath.FromSlash(ep), "@v", ev+".zip"), nil
}

// ModuleDir is where the module cache (GOMODCACHE) keeps the files of
// module path at version.
func ModuleDir(cache, path, version string) (string, error) {
	ep, ev, err := escapeModule(path, version)
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, filepath.FromSlash(ep+"@"+ev)), nil
}

// escapeModule is a module's path and version as the module cache names
// them: upper-case letters escaped (BurntSushi is !burnt!sushi).
func escapeModule(path, version string) (ep, ev string, err error) {
	if ep, err = module.EscapePath(path); err != nil {
		return "", "", err
	}
	if ev, err = module.EscapeVersion(version); err != nil {
		return "", "", err
	}
	return ep, ev, nil
}

// downloaded sums the sizes of zips, complete or being downloaded, and
// counts the complete ones.
func downloaded(zips []string) (bytes int64, complete int) {
	for _, zip := range zips {
		if fi, err := os.Stat(zip); err == nil {
			bytes += fi.Size()
			complete++
			continue
		}
		entries, err := os.ReadDir(filepath.Dir(zip))
		if err != nil {
			continue
		}
		base := filepath.Base(zip)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), base) && strings.HasSuffix(e.Name(), ".tmp") {
				if fi, err := e.Info(); err == nil {
					bytes += fi.Size()
				}
			}
		}
	}
	return bytes, complete
}
