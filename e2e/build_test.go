//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/devk/devk/build"
	"github.com/devk/devk/debug"
	"github.com/devk/devk/internal/delve"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/registry"
)

type buildOutput struct {
	Version  string `json:"version"`
	Binaries []struct {
		Component string `json:"component"`
		Path      string `json:"path"`
		SHA256    string `json:"sha256"`
		Version   string `json:"version"`
		Changed   bool   `json:"changed"`
	} `json:"binaries"`
}

// TestBuildDelve builds dlv from the Delve module at devk's pin through
// the Go module proxy, as `devk debug` does: a static binary that reports
// that release, recorded with its version, and not built again.
func TestBuildDelve(t *testing.T) {
	path := buildPinnedTool(t, Tree(t), build.Delve, build.DelveVersion)
	v, err := exec.Command(path, "version").CombinedOutput()
	if want := "Version: " + strings.TrimPrefix(build.DelveVersion, "v"); err != nil || !strings.Contains(string(v), want) {
		t.Fatalf("dlv version: %v\n%s\nwant %q", err, v, want)
	}
}

// breakProgram is a program that runs until killed, calling work.
const breakProgram = `package main

import "time"

func work(i int) int { return i * 2 }

func main() {
	for i := 0; ; i++ {
		_ = work(i)
		time.Sleep(10 * time.Millisecond)
	}
}
`

// TestDelveBreakAtStart: devk's Delve client sets a breakpoint in a
// program that dlv --continue has just started, as devk debug does on a
// component it just swapped in. Delve answers a halt at once and stops
// the target after, and a halt that comes as it resumes the target is
// lost: the breakpoint's call then waited forever (seen here: devk debug
// kube-proxy hung in CreateBreakpoint). Several starts, each breakpoint
// set within the attach timeout.
func TestDelveBreakAtStart(t *testing.T) {
	dlv := buildPinnedTool(t, Tree(t), build.Delve, build.DelveVersion)
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(breakProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module breakprogram\n\ngo 1.24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	if out, err := exec.Command("go", "build", "-C", dir, "-gcflags=all=-N -l", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const starts = 6
	for i := range starts {
		addr := testutil.FreeAddr(t)
		argv := delve.Debugged{Debugger: dlv, Listen: addr}.Command([]string{bin})
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }
		d, err := delve.Dial(context.Background(), addr, debug.AttachTimeout)
		if err != nil {
			stop()
			t.Fatal(err)
		}
		st, err := d.State()
		if err == nil && st.Running {
			err = d.Halt()
		}
		t0 := time.Now()
		var bp delve.Breakpoint
		if err == nil {
			bp, err = d.Break(src, 5, debug.AttachTimeout)
		}
		took := time.Since(t0)
		_ = d.Close(true)
		stop()
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if bp.FunctionName != "main.work" {
			t.Fatalf("start %d: breakpoint %+v, want one in main.work", i, bp)
		}
		t.Logf("start %d: breakpoint set in %s", i, took.Round(time.Millisecond))
	}
}

// TestBuildKwok builds kwok from its module at devk's pin through the Go
// module proxy, in the shared tree (whose fake-node test then finds it
// built): a static binary that reports the release as kwok's release
// build stamps it, recorded with its version, and not built again.
func TestBuildKwok(t *testing.T) {
	path := buildPinnedTool(t, Tree(t), build.Kwok, build.KwokVersion)
	v, err := exec.Command(path, "--version").CombinedOutput()
	if want := "kwok version " + build.KwokVersion + " "; err != nil || !strings.Contains(string(v), want) {
		t.Fatalf("kwok --version: %v\n%s\nwant %q", err, v, want)
	}
}

// buildPinnedTool builds the tool name, built from a module at devk's pin
// version, twice in tree: the second build changes nothing. It returns the
// binary's path, checked to be in the platform's bin directory and static.
func buildPinnedTool(t *testing.T, tree, name, version string) string {
	t.Helper()
	var out buildOutput
	for i, wantChanged := range []bool{true, false} {
		r := MustDevk(t, tree, "build", name, "-o", "json")
		out = buildOutput{}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || len(out.Binaries) != 1 {
			t.Fatalf("devk build %s -o json: %v\n%s", name, err, r.Stdout)
		}
		// The first build may find the tool built by an earlier run on
		// this tree.
		if b := out.Binaries[0]; b.Version != version || (i > 0 && b.Changed != wantChanged) {
			t.Fatalf("build %d: %+v, want version %s, changed %v", i+1, b, version, wantChanged)
		}
	}
	path := out.Binaries[0].Path
	if filepath.Dir(path) != filepath.Join(tree, "_output", "devk", "bin", "linux_"+runtime.GOARCH) {
		t.Errorf("%s built at %s", name, path)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", path)
		}
	}
	return path
}

// TestSourceAndBuild gets the real v1.34.4 tree, builds the apiserver and
// kubectl from it, and checks both report the tree's version.
func TestSourceAndBuild(t *testing.T) {
	tree := Tree(t)

	// A second get is a no-op.
	r := MustDevk(t, workDir, "source", "get", KubeVersion, tree)
	if !strings.Contains(r.Stdout, "already holds Kubernetes "+KubeVersion) {
		t.Fatalf("second get: %s", r.Stdout)
	}

	var info struct {
		Root    string `json:"root"`
		Version struct {
			GitVersion   string `json:"gitVersion"`
			GitTreeState string `json:"gitTreeState"`
		} `json:"version"`
		GoMinimum string `json:"goMinimum"`
	}
	r = MustDevk(t, filepath.Join(tree, "staging", "src", "k8s.io", "apiserver"), "source", "info", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &info); err != nil {
		t.Fatalf("source info -o json: %v\n%s", err, r.Stdout)
	}
	if info.Root != tree || !strings.HasPrefix(info.Version.GitVersion, KubeVersion) || info.GoMinimum == "" {
		t.Fatalf("source info = %+v", info)
	}
	version := info.Version.GitVersion

	var out buildOutput
	r = MustDevk(t, tree, "build", "apiserver", "kubectl", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("build -o json: %v\n%s", err, r.Stdout)
	}
	if out.Version != version || len(out.Binaries) != 2 {
		t.Fatalf("build output = %+v", out)
	}
	paths := map[string]string{}
	for _, b := range out.Binaries {
		paths[b.Component] = b.Path
	}

	kubectl, err := exec.Command(paths["kubectl"], "version", "--client", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl version --client: %v", err)
	}
	var kv struct {
		ClientVersion struct {
			GitVersion string `json:"gitVersion"`
			Major      string `json:"major"`
			Minor      string `json:"minor"`
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal(kubectl, &kv); err != nil {
		t.Fatalf("kubectl version output does not parse: %v\n%s", err, kubectl)
	}
	if kv.ClientVersion.GitVersion != version || kv.ClientVersion.Major != "1" || !strings.HasPrefix(kv.ClientVersion.Minor, "34") {
		t.Fatalf("kubectl reports %+v, want %s", kv.ClientVersion, version)
	}

	apiserver, err := exec.Command(paths["apiserver"], "--version").Output()
	if err != nil {
		t.Fatalf("kube-apiserver --version: %v", err)
	}
	if got := strings.TrimSpace(string(apiserver)); got != "Kubernetes "+version {
		t.Fatalf("kube-apiserver --version = %q, want %q", got, "Kubernetes "+version)
	}

	// Nothing changed: both binaries are reported unchanged.
	r = MustDevk(t, tree, "build", "apiserver", "kubectl", "-o", "json")
	out = buildOutput{}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatal(err)
	}
	for _, b := range out.Binaries {
		if b.Changed {
			t.Errorf("no-op rebuild reported %s changed", b.Component)
		}
	}
}

// TestBuildPushPackageAndCoreDNS builds a main package of the real tree
// (test/images/agnhost, like `ko build`) and CoreDNS from its module at
// the version the tree's kubeadm names, pushes both to devk's registry
// in-process, and checks each image: the binary where the project's own
// Dockerfile puts it, that path as the entrypoint, and a binary that runs
// and carries its version (agnhost the tree's, stamped as the components
// are; CoreDNS its release's). `devk push` of the same package path gives
// the same digest.
func TestBuildPushPackageAndCoreDNS(t *testing.T) {
	tree := Tree(t)
	// The registry's credential where devk, run with this DEVK_HOME,
	// finds it.
	home := t.TempDir()
	h, err := registry.New(t.TempDir(), &registry.Options{CredentialFile: filepath.Join(home, "registry-credential")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://")

	images := []struct {
		arg, repo, path string
		entrypoint, cmd []string
		run             []string // arguments the binary is run with
		wantOut         []string // what its output holds
		stamped         string   // what the binary holds only when stamped
	}{
		{arg: "./test/images/agnhost", repo: "agnhost", path: "agnhost", entrypoint: []string{"/agnhost"}, cmd: []string{"pause"},
			run: []string{"entrypoint-tester", "devk-e2e"}, wantOut: []string{"devk-e2e"}, stamped: KubeVersion},
		{arg: "coredns", repo: "coredns", path: "coredns", entrypoint: []string{"/coredns"},
			// coremain.GitCommit ends the second line; empty unless stamped.
			run: []string{"-version"}, wantOut: []string{"CoreDNS-1.12.1", ", v1.12.1\n"}},
	}
	for _, im := range images {
		t.Run(im.repo, func(t *testing.T) {
			r := MustDevkEnv(t, tree, []string{"DEVK_HOME=" + home}, "build", im.arg, "--push", "--registry", reg)
			ref := strings.TrimSpace(r.Stdout)
			if !strings.HasPrefix(ref, reg+"/"+im.repo+"@sha256:") || strings.Contains(ref, "\n") {
				t.Fatalf("devk build %s --push printed %q, want one %s/%s@sha256:… line", im.arg, r.Stdout, reg, im.repo)
			}
			parsed, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := remote.Image(parsed)
			if err != nil {
				t.Fatalf("pull %s: %v", ref, err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, im.entrypoint) || !slices.Equal(cf.Config.Cmd, im.cmd) {
				t.Fatalf("%s: entrypoint %q cmd %q, want %q %q", ref, cf.Config.Entrypoint, cf.Config.Cmd, im.entrypoint, im.cmd)
			}
			bin := extract(t, img, im.path)
			out, err := exec.Command(bin, im.run...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s from the image: %v\n%s", im.path, strings.Join(im.run, " "), err, out)
			}
			for _, w := range im.wantOut {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s %s printed %q, want %q in it", im.path, strings.Join(im.run, " "), out, w)
				}
			}
			if im.repo == "coredns" {
				// Only devk's plugins are linked, each usable by its directive.
				out, err := exec.Command(bin, "-plugins").CombinedOutput()
				if err != nil {
					t.Fatalf("coredns -plugins: %v\n%s", err, out)
				}
				linked := strings.Fields(string(out)) // one plugin a line
				for _, d := range build.CoreDNSDirectives() {
					if !slices.Contains(linked, d) {
						t.Errorf("coredns -plugins lacks %s:\n%s", d, out)
					}
				}
				if slices.Contains(linked, "hosts") {
					t.Errorf("coredns links hosts, which devk's plugin set leaves out:\n%s", out)
				}
			}
			if data, err := os.ReadFile(bin); im.stamped != "" && (err != nil || !bytes.Contains(data, []byte(im.stamped))) {
				t.Errorf("%s is not stamped with %s (%v)", im.path, im.stamped, err)
			}
			// Built and pushed already: the same image again.
			r = MustDevkEnv(t, tree, []string{"DEVK_HOME=" + home}, "push", im.arg, "--registry", reg)
			if strings.TrimSpace(r.Stdout) != ref {
				t.Fatalf("devk push %s gave %q, devk build --push %q", im.arg, r.Stdout, ref)
			}
		})
	}
}

// extract writes the file at path in img's last layer to a temp file
// and returns its name; the test fails if the layer lacks it or it is not
// an executable regular file.
func extract(t *testing.T, img v1.Image, path string) string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil || len(ls) == 0 {
		t.Fatalf("layers: %v", err)
	}
	rc, err := ls[len(ls)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var names []string
	out := ""
	testutil.EachTarEntry(t, rc, func(h *tar.Header, body io.Reader) {
		names = append(names, h.Name)
		if h.Name != path || out != "" {
			return
		}
		if h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
			t.Fatalf("%s in the layer: type %c mode %o, want an executable file", path, h.Typeflag, h.Mode)
		}
		out = filepath.Join(t.TempDir(), filepath.Base(path))
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, body); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	})
	if out == "" {
		t.Fatalf("the layer holds %v, not %s", names, path)
	}
	return out
}

// TestBuildProgressInLogFile builds a small command of the tree with its
// output going to a file, as in CI or `| tee`, with an empty Go build
// cache so that go compiles its ~100 packages (20-40 s here): the log
// shows the compile step's progress every progress.PlainInterval while it
// runs, as "compile: compiled N of M packages, 10s".
func TestBuildProgressInLogFile(t *testing.T) {
	tree := Tree(t)
	logPath := filepath.Join(t.TempDir(), "build.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(devkBin, "build", "./cmd/preferredimports")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "GOCACHE="+t.TempDir())
	cmd.Stderr = logFile
	if out, err := cmd.Output(); err != nil {
		logFile.Close()
		log, _ := os.ReadFile(logPath)
		t.Fatalf("devk build: %v\n%s\n%s", err, out, log)
	}
	logFile.Close()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(data)
	line := regexp.MustCompile(`(?m)^compile: compiled ([0-9,]+) of ([0-9,]+) packages, ([0-9]+)s$`)
	started, finished := strings.Index(log, "... compile\n"), strings.Index(log, "ok  compile (")
	matches := line.FindAllStringSubmatchIndex(log, -1)
	if m := regexp.MustCompile(`ok  compile \(([^)]+)\)`).FindStringSubmatch(log); m != nil {
		if took, err := time.ParseDuration(m[1]); err == nil && took < progress.PlainInterval {
			t.Skipf("the compile took %s, less than the %s between progress lines: a faster machine than this test was written for", took, progress.PlainInterval)
		}
	}
	if started < 0 || finished < 0 || len(matches) == 0 {
		t.Fatalf("no progress line while compiling:\n%s", log)
	}
	for _, m := range matches {
		compiled, total := log[m[2]:m[3]], log[m[4]:m[5]]
		n, _ := strconv.Atoi(strings.ReplaceAll(compiled, ",", ""))
		all, _ := strconv.Atoi(strings.ReplaceAll(total, ",", ""))
		if m[0] < started || m[0] > finished || n <= 0 || n > all {
			t.Errorf("progress line %q: want it between the compile step's start and end, 0 < compiled <= total:\n%s", log[m[0]:m[1]], log)
		}
	}
	t.Logf("log:\n%s", log)
}
