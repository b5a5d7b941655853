package registry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/devk/devk/image"
)

// The devk binary of the process-level tests, built once, when the
// first of them needs it (fuzzing workers and the in-process tests
// never do).
var (
	devkBuild struct {
		once sync.Once
		dir  string
		bin  string
		err  error
	}
)

func devkBin(t *testing.T) string {
	t.Helper()
	b := &devkBuild
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "devk-registry-test-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "devk")
		if out, err := exec.Command("go", "build", "-o", b.bin, "github.com/devk/devk/cmd/devk").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build devk: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// testCredential is the credential file of the registries the tests
// serve in-process.
var testCredential string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "devk-registry-credential-")
	if err != nil {
		panic(err)
	}
	testCredential = filepath.Join(dir, "credential")
	if _, err := image.EnsureCredential(testCredential); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if devkBuild.dir != "" {
		os.RemoveAll(devkBuild.dir)
	}
	os.Exit(code)
}

// served is a running `devk registry serve` process.
type served struct {
	cmd    *exec.Cmd
	addr   string
	stderr *bytes.Buffer
}

func startServe(t *testing.T, root, addr string) *served {
	t.Helper()
	cmd := exec.Command(devkBin(t), "registry", "serve", "--addr", addr, "--root", root, "--credential", testCredential)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &served{cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			cmd.Wait()
			t.Fatalf("devk registry serve exited before serving: %s", s.stderr)
		}
		s.addr = l
	case <-time.After(20 * time.Second):
		t.Fatalf("devk registry serve did not print its address: %s", s.stderr)
	}
	return s
}

// stop sends SIGTERM and expects a clean exit, promptly.
func (s *served) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("devk registry serve exited with %v after SIGTERM: %s", err, s.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("devk registry serve did not stop within 15 s of SIGTERM")
	}
}

func devk(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(devkBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestServeProcess runs the real `devk registry serve`: push, list, stop
// with SIGTERM, start again on the same storage, and find it all there.
func TestServeProcess(t *testing.T) {
	root := t.TempDir()
	s := startServe(t, root, "127.0.0.1:0")
	img := randomImage(t)
	d := push(t, s.addr+"/kube-apiserver:v1.34.0", img)

	out, stderr, err := devk(t, "registry", "ls", "--registry", s.addr, "-o", "json")
	if err != nil {
		t.Fatalf("devk registry ls: %v\n%s", err, stderr)
	}
	var repos []Repository
	if err := json.Unmarshal([]byte(out), &repos); err != nil {
		t.Fatalf("ls printed %q: %v", out, err)
	}
	if len(repos) != 1 || repos[0].Name != "kube-apiserver" || len(repos[0].Tags) != 1 || repos[0].Tags[0].Digest != d.String() {
		t.Fatalf("ls = %+v", repos)
	}
	out, _, err = devk(t, "registry", "ls", "--registry", s.addr)
	if err != nil || !strings.Contains(out, s.addr+"/kube-apiserver  v1.34.0  "+d.String()) {
		t.Fatalf("ls text: %v\n%s", err, out)
	}

	s.stop(t)
	if _, _, err := devk(t, "registry", "ls", "--registry", s.addr); err == nil {
		t.Fatal("ls works against a stopped registry")
	}

	s2 := startServe(t, root, "127.0.0.1:0")
	ref, _ := name.ParseReference(s2.addr + "/kube-apiserver:v1.34.0")
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if err := validate.Image(got); err != nil {
		t.Fatalf("after restart the image is not whole: %v", err)
	}
	if gd, _ := got.Digest(); gd != d {
		t.Fatalf("after restart the tag points at %s, pushed %s", gd, d)
	}
	s2.stop(t)
}

func TestServeAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, stderr, err := devk(t, "registry", "serve", "--addr", ln.Addr().String(), "--root", t.TempDir(), "--credential", testCredential)
	if err == nil || !strings.Contains(stderr, "already in use") || !strings.Contains(stderr, "--addr") {
		t.Fatalf("err %v, stderr %s", err, stderr)
	}
}

func TestServeDefaultRoot(t *testing.T) {
	home := t.TempDir()
	t.Setenv("DEVK_HOME", home)
	got, err := DefaultRoot()
	if err != nil || got != filepath.Join(home, "registry") {
		t.Fatalf("DefaultRoot = %q, %v", got, err)
	}
	// Serve with the default root writes there.
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ServeOptions{Addr: "127.0.0.1:0", Ready: func(a string) { ready <- a }}) }()
	addr := <-ready
	// The credential is made there too, for no one else to read; devk's
	// keychain finds it for this registry, which we run.
	cred := filepath.Join(home, "registry-credential")
	if fi, err := os.Stat(cred); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential %s: %v, %v; want mode 0600", cred, fi, err)
	}
	ref, _ := name.ParseReference(addr + "/x/y:z")
	if err := remote.Write(ref, randomImage(t), remote.WithAuthFromKeychain(image.CredentialKeychain(cred))); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(home, "registry", "manifests", "x", "y", "z")); len(m) != 1 {
		t.Fatal("the manifest was not stored under $DEVK_HOME/registry")
	}
}

func TestServeOneServerPerRoot(t *testing.T) {
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeOptions{Addr: "127.0.0.1:0", Root: root, CredentialFile: testCredential, Ready: func(a string) { ready <- a }})
	}()
	<-ready
	err := Serve(context.Background(), ServeOptions{Addr: "127.0.0.1:0", Root: root, CredentialFile: testCredential})
	if err == nil || !strings.Contains(err.Error(), "another `devk registry serve` is using "+root) {
		t.Fatalf("second server on the same root: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Once the first is gone, the storage is free again.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		done <- Serve(ctx2, ServeOptions{Addr: "127.0.0.1:0", Root: root, CredentialFile: testCredential, Ready: func(a string) { ready <- a }})
	}()
	<-ready
	cancel2()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeRefusesUnsafeStorage: `devk registry serve` will not start on
// a root others could plant links in, and takes its lock inside the root.
func TestServeRefusesUnsafeStorage(t *testing.T) {
	t.Run("world-writable root", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "registry")
		if err := os.Mkdir(root, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(root, 0o777)
		_, stderr, err := devk(t, "registry", "serve", "--addr", "127.0.0.1:0", "--root", root, "--credential", testCredential)
		if err == nil || !strings.Contains(stderr, "run `chmod 0755 "+root+"`") {
			t.Fatalf("err %v, stderr %s", err, stderr)
		}
	})
	t.Run("lock file links out", func(t *testing.T) {
		parent := t.TempDir()
		root, outside := filepath.Join(parent, "root"), filepath.Join(parent, "outside")
		os.Mkdir(root, 0o755)
		os.Mkdir(outside, 0o755)
		mustSymlink(t, filepath.Join(outside, "authorized_keys"), filepath.Join(root, ".lock"))
		err := Serve(context.Background(), ServeOptions{Addr: "127.0.0.1:0", Root: root, CredentialFile: testCredential})
		if err == nil || !strings.Contains(err.Error(), "registry storage") {
			t.Fatalf("err %v", err)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Fatalf("written outside the root: %v", entries)
		}
	})
}
