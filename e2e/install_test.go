//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGoInstall installs devk as a user would a published release, `go
// install github.com/devk/devk/cmd/devk@VERSION`, from a module proxy
// (a file:// one serving this checkout's HEAD, laid out as
// proxy.golang.org serves a module: nested modules, here the fixture
// tree's, left out), with every dependency from the real Go module proxy
// and checked against the checksum database; then `devk version` must
// report that module version.
func TestGoInstall(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/devk/devk"
	version := fmt.Sprintf("v0.0.%d", time.Now().Unix()) // new to the module cache each run
	proxy := t.TempDir()
	at := filepath.Join(proxy, module, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	nested := run(t, root, nil, "git", "ls-files", "*/go.mod")
	if nested.Err != nil {
		t.Fatalf("git ls-files: %v\n%s", nested.Err, nested.Stderr)
	}
	args := []string{"archive", "--format=zip", "--prefix=" + module + "@" + version + "/", "-o", filepath.Join(at, version+".zip"), "HEAD", "--", "."}
	for _, f := range strings.Fields(nested.Stdout) {
		args = append(args, ":(exclude)"+filepath.Dir(f))
	}
	if r := run(t, root, nil, "git", args...); r.Err != nil {
		t.Fatalf("git archive: %v\n%s", r.Err, r.Stderr)
	}
	mod, err := exec.Command("git", "-C", root, "show", "HEAD:go.mod").Output()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		version + ".mod":  string(mod),
		version + ".info": fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339)),
		"list":            version + "\n",
	} {
		if err := os.WriteFile(filepath.Join(at, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gomodcache := strings.TrimSpace(run(t, root, nil, "go", "env", "GOMODCACHE").Stdout)
	t.Cleanup(func() { // the module cache keeps files read-only
		for _, p := range []string{filepath.Join(gomodcache, module+"@"+version), filepath.Join(gomodcache, "cache", "download", module)} {
			_ = exec.Command("chmod", "-R", "u+w", p).Run()
			_ = os.RemoveAll(p)
		}
	})
	bin := t.TempDir()
	env := []string{"GOPROXY=file://" + proxy + ",https://proxy.golang.org", "GONOSUMDB=" + module, "GOFLAGS=", "GOBIN=" + bin, "GOWORK=off", "GOTOOLCHAIN=local"}
	if r := run(t, t.TempDir(), env, "go", "install", module+"/cmd/devk@"+version); r.Err != nil {
		t.Fatalf("go install: %v\n%s", r.Err, r.Stderr)
	}
	r := run(t, t.TempDir(), nil, filepath.Join(bin, "devk"), "version", "-o", "json")
	if r.Err != nil {
		t.Fatalf("devk version: %v\n%s", r.Err, r.Stderr)
	}
	var v struct{ Version string }
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil || v.Version != version {
		t.Fatalf("devk version -o json = %s (%v), want version %s", r.Stdout, err, version)
	}
	t.Logf("go install …/cmd/devk@%s: devk version says %s", version, v.Version)
}
