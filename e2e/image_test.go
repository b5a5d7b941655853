//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devk/devk/internal/testutil"
)

// TestImagePushPullRun builds the real kube-apiserver, pushes it with
// `devk build apiserver --push` to Debian's docker-registry (the reference
// registry, as a peer that is not devk's own), pulls it back with a
// private containerd and runs it: the binary inside prints the version the
// build stamped.
func TestImagePushPullRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a private containerd and runc containers (run `make e2e` as root)")
	}
	for _, bin := range []string{"docker-registry", "containerd", "ctr", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: apt-get install docker-registry containerd runc (.ci/run does)", bin)
		}
	}
	tree := Tree(t)
	work := t.TempDir()
	reg := startDockerRegistry(t, work)

	r := MustDevk(t, tree, "build", "apiserver", "--push", "--registry", reg)
	ref := strings.TrimSpace(r.Stdout)
	if !strings.HasPrefix(ref, reg+"/kube-apiserver@sha256:") || strings.Contains(ref, "\n") {
		t.Fatalf("devk build --push printed %q, want one %s/kube-apiserver@sha256:… line", r.Stdout, reg)
	}
	var state struct {
		Components map[string]struct {
			Binary struct{ Version, Path string }
			Pushed struct{ Digest, Tag, Ref string }
		}
	}
	data, err := os.ReadFile(filepath.Join(tree, "_output", "devk", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &state); err != nil {
		t.Fatal(err)
	}
	api := state.Components["apiserver"]
	if api.Pushed.Ref != ref || api.Binary.Version == "" {
		t.Fatalf("state.json: %+v, printed %s", api, ref)
	}
	t.Logf("pushed %s (binary %s)", ref, api.Binary.Version)

	// The reference registry agrees with what devk recorded, and lists it.
	// (A devk home of its own: a cluster running on this machine is not
	// part of this comparison.)
	if d := Devk(t, tree, []string{"DEVK_HOME=" + filepath.Join(work, "devk-home")}, "digest", "apiserver", "--registry", reg); d.Err != nil {
		t.Fatalf("devk digest: %v\n%s%s", d.Err, d.Stdout, d.Stderr)
	}
	ls := MustDevk(t, tree, "registry", "ls", "--registry", reg)
	if !strings.Contains(ls.Stdout, "kube-apiserver  "+api.Pushed.Tag+"  "+api.Pushed.Digest) {
		t.Fatalf("devk registry ls against docker-registry:\n%s", ls.Stdout)
	}

	// Unchanged binary: same digest again.
	r2 := MustDevk(t, tree, "push", "apiserver", "--registry", reg)
	if strings.TrimSpace(r2.Stdout) != ref {
		t.Fatalf("pushing the unchanged binary gave %q, first %q", r2.Stdout, ref)
	}

	ctr := startContainerd(t, work)
	ctr.must(t, "images", "pull", "--plain-http", "--snapshotter", "native", ref)
	out := ctr.must(t, "run", "--rm", "--snapshotter", "native", ref, "devk-e2e-apiserver", "/usr/local/bin/kube-apiserver", "--version")
	if got, want := strings.TrimSpace(out), "Kubernetes "+api.Binary.Version; got != want {
		t.Fatalf("the image's binary printed %q, want %q", got, want)
	}
	// The entrypoint is the binary: no command needed beyond its flags.
	info := ctr.must(t, "images", "check", "--snapshotter", "native")
	if !strings.Contains(info, ref) || !strings.Contains(info, "complete") {
		t.Fatalf("ctr images check:\n%s", info)
	}
}

// startDockerRegistry runs Debian's docker-registry on a free loopback
// port with its storage in dir, and returns host:port.
func startDockerRegistry(t *testing.T, dir string) string {
	t.Helper()
	addr := testutil.FreeAddr(t)
	cfg := filepath.Join(dir, "registry.yml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "registry-data"), addr)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker-registry", "serve", cfg)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd) })
	waitFor(t, "docker-registry on "+addr, &logs, func() bool {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr
}

type containerd struct {
	socket string
}

// startContainerd runs a containerd of its own (root, state, socket and
// config under dir; the CRI plugin off) for ctr to use.
func startContainerd(t *testing.T, dir string) *containerd {
	t.Helper()
	// A short path: unix sockets are limited to 108 bytes.
	base, err := os.MkdirTemp("/run", "devk-e2e-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{socket: filepath.Join(base, "containerd.sock")}
	cfg := filepath.Join(dir, "containerd.toml")
	err = os.WriteFile(cfg, []byte(fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q
`, filepath.Join(dir, "containerd-root"), filepath.Join(base, "state"), c.socket, c.socket+".ttrpc")), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", cfg)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Containers were run with --rm; stop the daemon, then whatever
		// mounts the native snapshotter or the shims left.
		stopProcess(cmd)
		unmountUnder(filepath.Join(base, "state"))
		unmountUnder(filepath.Join(dir, "containerd-root"))
		os.RemoveAll(base)
		// runc puts the namespace's containers under a cgroup named after
		// it, which nothing removes; it is empty once they are gone.
		removeNamespaceCgroups("devk-e2e")
	})
	waitFor(t, "containerd on "+c.socket, &logs, func() bool {
		return exec.Command("ctr", "--address", c.socket, "version").Run() == nil
	})
	return c
}

// removeNamespaceCgroups removes the empty cgroups runc made for a
// containerd namespace: /sys/fs/cgroup/<ns> (v2) or
// /sys/fs/cgroup/<controller>/<ns> (v1).
func removeNamespaceCgroups(ns string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", ns))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", ns))
	for _, d := range dirs {
		_ = os.Remove(d) // rmdir: only an empty cgroup goes
	}
}

func (c *containerd) must(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	full := append([]string{"--address", c.socket, "--namespace", "devk-e2e"}, args...)
	cmd := exec.CommandContext(ctx, "ctr", full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ctr %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func waitFor(t *testing.T, what string, logs *bytes.Buffer, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up in 30 s:\n%s", what, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func stopProcess(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// unmountUnder unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// TestRegistryRefusesOtherUsers: on the shared cluster, an unprivileged
// local user (nobody, through setpriv) tries every write on devk's
// registry on 127.0.0.1 and through the cluster's forwarder on the bridge
// (from the host and from inside the node's network namespace): the
// registry answers 401 UNAUTHORIZED, the forwarder 405 UNSUPPORTED, and
// afterwards every tag the registry holds, and so what a node pulls, is
// as before. devk's own push (with the credential it keeps 0600) still
// goes through, and the nodes still pull through the forwarder.
func TestRegistryRefusesOtherUsers(t *testing.T) {
	c := Cluster(t)
	for _, bin := range []string{"setpriv", "curl", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed", bin)
		}
	}
	var cfg struct {
		Registry string
		Images   map[string]string
		Network  struct {
			HostIP string
			Nodes  []struct{ NetNS string }
		}
	}
	data, err := os.ReadFile(filepath.Join(c.Home, "clusters", "devk", "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil || len(cfg.Network.Nodes) == 0 {
		t.Fatalf("cluster.json: %v %+v", err, cfg)
	}
	cred := filepath.Join(c.Home, "registry-credential")
	if fi, err := os.Stat(cred); err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("the registry credential %s: %v %v, want root's, mode 0600", cred, fi, err)
	}
	listing := func() string {
		t.Helper()
		return MustDevkEnv(t, c.Tree, c.Env, "registry", "ls", "--registry", cfg.Registry, "-o", "json").Stdout
	}
	before := listing()
	_, port, _ := net.SplitHostPort(cfg.Registry)
	forwarder := net.JoinHostPort(cfg.Network.HostIP, port)

	// A manifest that would be a valid push: the pause image's, under
	// the tag the framework pulls agnhost by, and under kube-apiserver's.
	repo, digest, _ := strings.Cut(strings.TrimPrefix(cfg.Images["pause"], cfg.Registry+"/"), "@")
	req, _ := http.NewRequest(http.MethodGet, "http://"+cfg.Registry+"/v2/"+repo+"/manifests/"+digest, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the pause manifest %s: %s", cfg.Images["pause"], resp.Status)
	}
	manifest := string(body)
	nobody := []string{"setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"}
	// curl as nobody: the HTTP status, 000 when no answer.
	curl := func(netns, method, url, body string) string {
		args := append([]string{}, nobody...)
		if netns != "" {
			args = append([]string{"nsenter", "--net=/run/netns/" + netns, "--"}, args...)
		}
		args = append(args, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-X", method,
			"-H", "Content-Type: application/vnd.oci.image.manifest.v1+json")
		if body != "" {
			args = append(args, "--data-binary", body)
		}
		out, _ := exec.Command(args[0], append(args[1:], url)...).Output()
		return string(out)
	}
	mirror := "registry.k8s.io/e2e-test-images/agnhost"
	writes := []struct{ method, path, body string }{
		{"PUT", "/v2/" + mirror + "/manifests/2.56", manifest},
		{"PUT", "/v2/kube-apiserver/manifests/evil", manifest},
		{"POST", "/v2/" + mirror + "/blobs/uploads/", ""},
		{"PATCH", "/v2/" + mirror + "/blobs/uploads/1", "x"},
		{"PUT", "/v2/" + mirror + "/blobs/uploads/1?digest=sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881", "x"},
		{"DELETE", "/v2/pause/manifests/devk", ""},
	}
	for _, w := range writes {
		if got := curl("", w.method, "http://"+cfg.Registry+w.path, w.body); got != "401" {
			t.Errorf("nobody's %s %s on %s: %s, want 401", w.method, w.path, cfg.Registry, got)
		}
		if got := curl("", w.method, "http://"+forwarder+w.path, w.body); got != "405" {
			t.Errorf("nobody's %s %s through the forwarder %s, from the host: %s, want 405", w.method, w.path, forwarder, got)
		}
		if got := curl(cfg.Network.Nodes[0].NetNS, w.method, "http://"+forwarder+w.path, w.body); got != "405" {
			t.Errorf("nobody's %s %s through the forwarder %s, from the node: %s, want 405", w.method, w.path, forwarder, got)
		}
	}
	// Reads stay open: the node pulls as nobody would.
	if got := curl(cfg.Network.Nodes[0].NetNS, "GET", "http://"+forwarder+"/v2/pause/manifests/devk", ""); got != "200" {
		t.Errorf("a pull through the forwarder from the node: %s, want 200", got)
	}
	if after := listing(); after != before {
		t.Fatalf("the registry changed after nobody's writes:\nbefore %s\nafter  %s", before, after)
	}
	// devk's own push still goes through: root's, with the credential,
	// under a prefix of its own (a new repository: every blob and the
	// manifest are written).
	r := MustDevkEnv(t, c.Tree, c.Env, "push", "scheduler", "--registry", cfg.Registry+"/devk-e2e-auth")
	if !strings.HasPrefix(r.Stdout, cfg.Registry+"/devk-e2e-auth/kube-scheduler@sha256:") {
		t.Fatalf("devk push with the credential: %q", r.Stdout)
	}
}
