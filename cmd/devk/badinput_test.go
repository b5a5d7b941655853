package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/cmd/devk/internal/cli"
	"github.com/devk/devk/etcdwatch/etcdtest"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/testtree"
)

// badInputTimeout bounds one command. A command that wrongly starts to
// serve or to watch is stopped by it, and that is a failure: bad input is
// refused at once.
const badInputTimeout = 20 * time.Second

// watchTimeout bounds a command that would watch the tree forever if it
// took its input: a few seconds tell the two apart.
const watchTimeout = 5 * time.Second

// noRoute is an address no test may reach: plain HTTP to it must be
// refused before any connection is tried.
const noRoute = "http://10.255.255.1:5000"

// badInputCase is one bad input: the command line, and what its error must
// contain.
type badInputCase struct {
	name string
	args []string
	want string
	// home is DEVK_HOME for this case; empty means the fixture's.
	home string
	// env is set for this case only.
	env map[string]string
	// within, when set, is how soon the command must fail.
	within time.Duration
	// timeout replaces badInputTimeout (for commands that would watch
	// or serve forever if they took the input).
	timeout time.Duration
	// skip, when set, says why the case cannot run here.
	skip string
}

// badInputFixture is what every case runs against: a DEVK_HOME holding
// cluster devk (cluster.json and manifests/kube-apiserver.yaml), a fixture
// Kubernetes tree, a kubeadm-like node directory, a kubeconfig, and a
// working directory deep enough that ../../x stays inside the sandbox.
type badInputFixture struct {
	sandbox string // all of the below but the tree
	home    string
	tree    string
	node    string // <node>/manifests/kube-apiserver.yaml, as on a kubeadm node
	// manifest is testdata/badinput/kube-apiserver.yaml, read before
	// the working directory moves into the sandbox.
	manifest []byte
}

func (fx badInputFixture) manifests(home string) string {
	return filepath.Join(home, "clusters", layout.DefaultName, "manifests")
}

// writeClusterHome makes a DEVK_HOME at home with cluster devk whose
// cluster.json holds config.
func (fx badInputFixture) writeClusterHome(t *testing.T, home string, config []byte) {
	t.Helper()
	dir := filepath.Join(home, "clusters", layout.DefaultName)
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "kube-apiserver.yaml"), fx.manifest, 0o644); err != nil {
		t.Fatal(err)
	}
}

func clusterJSON(t *testing.T, c layout.Config) []byte {
	t.Helper()
	data, err := layout.EncodeConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// placedConfig is a new cluster called name as up records it: placed on
// the first node subnet.
func placedConfig(t *testing.T, name string) layout.Config {
	t.Helper()
	c := layout.NewConfig(name)
	if err := c.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func newBadInputFixture(t *testing.T) badInputFixture {
	t.Helper()
	// the tree is made before any chdir: testtree runs git in it
	manifest, err := os.ReadFile(filepath.Join("testdata", "badinput", "kube-apiserver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fx := badInputFixture{sandbox: t.TempDir(), tree: testtree.New(t), manifest: manifest}
	fx.home = filepath.Join(fx.sandbox, "home")
	fx.writeClusterHome(t, fx.home, clusterJSON(t, placedConfig(t, layout.DefaultName)))
	fx.node = filepath.Join(fx.sandbox, "node")
	if err := os.MkdirAll(filepath.Join(fx.node, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fx.node, "manifests", "kube-apiserver.yaml"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(fx.sandbox, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\ncurrent-context: \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DEVK_HOME", fx.home)
	t.Setenv("KUBECONFIG", kubeconfig)
	// nothing from the machine may leak in: a registry, an etcd
	for _, env := range []string{"DEVK_REGISTRY", "ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT", "ETCDCTL_CERT", "ETCDCTL_KEY"} {
		t.Setenv(env, "")
	}
	cwd := filepath.Join(fx.sandbox, "cwd", "a", "b", "c")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)
	return fx
}

// dirHash is treeHash, or "missing" for a directory that is gone.
func dirHash(t *testing.T, dir string) string {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	return testtree.HashDir(t, dir)
}

// hashes sums every place a bad input could change: DEVK_HOME, the tree,
// the cluster's manifests dir, the kubeadm node and the rest of the
// sandbox (working directory, kubeconfig, registry roots).
func (fx badInputFixture) hashes(t *testing.T, home string) [][2]string {
	t.Helper()
	var out [][2]string
	for _, d := range [][2]string{
		{"DEVK_HOME", home},
		{"the tree", fx.tree},
		{"the manifests dir", fx.manifests(home)},
		{"the kubeadm node's manifests dir", filepath.Join(fx.node, "manifests")},
		{"the sandbox", fx.sandbox},
	} {
		out = append(out, [2]string{d[0] + " " + d[1], dirHash(t, d[1])})
	}
	return out
}

// devkRun is what one in-process run of devk did.
type devkRun struct {
	stdout, stderr string
	err            error
	took           time.Duration
	// timedOut: the command was still running when its time was up.
	timedOut bool
	// hung: it did not return even after its context was cancelled.
	hung bool
}

// runDevkWithin runs devk in-process under a context that expires after
// timeout. A panic is turned into an error naming it.
func runDevkWithin(timeout time.Duration, args ...string) devkRun {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type result struct {
		stdout, stderr string
		err            error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		var out, errb bytes.Buffer
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
			done <- result{out.String(), errb.String(), err}
		}()
		cmd := newRootCmd(&out, &errb, args)
		cmd.SetIn(strings.NewReader(""))
		err = cmd.ExecuteContext(ctx)
	}()
	select {
	case r := <-done:
		return devkRun{stdout: r.stdout, stderr: r.stderr, err: r.err, took: time.Since(start), timedOut: ctx.Err() != nil}
	case <-time.After(timeout + 10*time.Second):
		return devkRun{took: time.Since(start), timedOut: true, hung: true}
	}
}

// exitStatus is the status main exits with for err.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// refusal says what is wrong with how a bad input was refused, or "".
func refusal(r devkRun, want string, within time.Duration) string {
	switch {
	case r.hung:
		return fmt.Sprintf("still running %s after its context was cancelled", r.took.Round(time.Second))
	case r.timedOut:
		return fmt.Sprintf("accepted: still running when its time was up (%s), err = %v", r.took.Round(time.Second), r.err)
	case r.err == nil:
		return fmt.Sprintf("accepted: exit status 0\nstdout: %s\nstderr: %s", short(r.stdout), short(r.stderr))
	}
	msg := r.err.Error()
	switch {
	case exitStatus(r.err) == 0:
		return fmt.Sprintf("error %q, but exit status 0", msg)
	case strings.Contains(msg, "goroutine ") || strings.Contains(msg, "panic") || strings.Contains(msg, "runtime error"):
		return fmt.Sprintf("a Go panic or stack, not an error a user can act on:\n%s", msg)
	case strings.Contains(r.stderr, "goroutine "):
		return fmt.Sprintf("a Go stack on stderr:\n%s", r.stderr)
	case strings.Contains(msg, "%!"):
		return fmt.Sprintf("a garbled message (a formatting mistake): %q", msg)
	case !strings.Contains(msg, want):
		return fmt.Sprintf("unclear error: want it to contain %q, got %q", want, msg)
	case within > 0 && r.took > within:
		return fmt.Sprintf("refused only after %s, want within %s", r.took.Round(100*time.Millisecond), within)
	}
	return ""
}

func short(s string) string {
	if len(s) > 600 {
		return s[:600] + "…"
	}
	return s
}

// mutatesNode says whether args would change this machine (cgroups,
// bridges, processes) if devk wrongly took them: such a case first runs
// with --dry-run, and the real command runs only if the dry run refused.
func mutatesNode(args []string) bool {
	return len(args) > 0 && (args[0] == "up" || args[0] == "down") && !slices.Contains(args, "--dry-run")
}

// withDryRun puts --dry-run before any -- in args.
func withDryRun(args []string) []string {
	if i := slices.Index(args, "--"); i >= 0 {
		return slices.Concat(args[:i], []string{"--dry-run"}, args[i:])
	}
	return append(slices.Clone(args), "--dry-run")
}

// commandPath is the devk command args run ("etcd get"), for the summary.
func commandPath(args []string) string {
	c, _, err := newRootCmd(io.Discard, io.Discard, nil).Find(args)
	if err != nil || c == nil {
		return "devk"
	}
	return c.CommandPath()
}

// TestBadInput: each bad input, at every command, is refused with an
// error that says what is wrong and a non-zero exit status, and changes
// nothing: DEVK_HOME, the tree, the manifests dirs and the rest of the
// sandbox hash the same before and after.
func TestBadInput(t *testing.T) {
	fx := newBadInputFixture(t)
	tree := fx.tree
	nodeManifests := filepath.Join(fx.node, "manifests")
	isRoot := os.Geteuid() == 0

	// DEVK_HOMEs whose cluster.json was edited: each must be refused by
	// every command that reads it, naming cluster.json and the field.
	tampers := []struct {
		name   string
		config func() []byte
		want   string
	}{
		{"cgroupRoot of the host's kubepods", func() []byte {
			c := placedConfig(t, layout.DefaultName)
			c.CgroupRoot = "/kubepods"
			return clusterJSON(t, c)
		}, `cluster.json: cgroupRoot is "/kubepods"`},
		{"bridge eth0", func() []byte {
			c := placedConfig(t, layout.DefaultName)
			c.Bridge = "eth0"
			return clusterJSON(t, c)
		}, `cluster.json: bridge is "eth0"`},
		{"another cluster's name", func() []byte {
			return clusterJSON(t, placedConfig(t, "other"))
		}, `cluster.json: name is "other"`},
		{"image by tag", func() []byte {
			c := placedConfig(t, layout.DefaultName)
			c.Images["apiserver"] = "127.0.0.1:5000/kube-apiserver:v1.34.0"
			return clusterJSON(t, c)
		}, `cluster.json: images.apiserver is "127.0.0.1:5000/kube-apiserver:v1.34.0"`},
		{"relative criSocket", func() []byte {
			c := placedConfig(t, layout.DefaultName)
			c.CRISocket = "run/containerd.sock"
			return clusterJSON(t, c)
		}, `cluster.json: criSocket is "run/containerd.sock"`},
		{"registry without a port", func() []byte {
			c := placedConfig(t, layout.DefaultName)
			c.Registry = "127.0.0.1"
			return clusterJSON(t, c)
		}, `cluster.json: registry is "127.0.0.1"`},
		{"garbage", func() []byte {
			return []byte(`{"name": "devk", "bridge": `)
		}, "cluster.json: not a devk cluster config (unexpected end of JSON input)"},
	}
	tamperCommands := [][]string{
		{"status"},
		{"certs", "check-expiration"},
		{"down"},
		{"swap", "apiserver", "--tree", tree},
		{"digest", "verify", "apiserver", "--tree", tree},
		{"up", "--dry-run", "--tree", tree},
		{"digest", "apiserver", "--tree", tree},
		{"watch", "apiserver", "--tree", tree, "--once"},
		{"export", "logs", filepath.Join(fx.sandbox, "export")},
		{"node", "exec", "--", "true"},
	}

	// registry roots
	reg := filepath.Join(fx.sandbox, "registry-roots")
	openRoot := filepath.Join(reg, "open")             // mode 0777
	openParent := filepath.Join(reg, "open-parent")    // mode 0777, not sticky
	fileRoot := filepath.Join(reg, "file")             // not a directory
	goodRoot := filepath.Join(reg, "good")             // fine, for the cases where another flag is bad
	nobodyDir := filepath.Join(reg, "nobody")          // owned by uid 65534
	nobodyLink := filepath.Join(reg, "link-to-nobody") // a symlink of ours to it
	openHome := filepath.Join(fx.sandbox, "open-home") // DEVK_HOME of mode 0777
	for _, d := range []string{openRoot, openParent, goodRoot, nobodyDir, openHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{openRoot, openParent, openHome} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(fileRoot, []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	openCredential := filepath.Join(reg, "credential") // mode 0644
	if err := os.WriteFile(openCredential, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(nobodyDir, nobodyLink); err != nil {
		t.Fatal(err)
	}
	notRoot := ""
	if isRoot {
		if err := os.Chown(nobodyDir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	} else {
		notRoot = "giving a directory to uid 65534 needs root"
	}

	// cluster config files that are refused before anything is made
	configs := t.TempDir()
	configFile := func(name, body string) string {
		path := filepath.Join(configs, name)
		if err := os.WriteFile(path, []byte("apiVersion: devk.dev/v1alpha1\nkind: Cluster\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	unknownKey := configFile("unknown.yaml", "networking:\n  podSubnt: 10.0.0.0/16\n")
	climbingName := configFile("climbing.yaml", "name: ../x\n")
	devkFlag := configFile("flag.yaml", "apiServer:\n  extraArgs:\n    etcd-servers: https://10.0.0.1:2379\n")
	otherName := configFile("other.yaml", "name: dev\n")
	multicastNodes := configFile("multicast.yaml", "networking:\n  nodeSubnet: 224.1.0.0/24\n")
	// issue 33: what the kubelet's config file sets, and what keeps a
	// component closed to the machine's other users
	hostRuntime := configFile("host-runtime.yaml", "kubelet:\n  extraArgs:\n    max-pods: \"50\"\n    container-runtime-endpoint: unix:///run/containerd/containerd.sock\n")
	openKubelet := configFile("open-kubelet.yaml", "kubelet:\n  extraArgs:\n    anonymous-auth: \"true\"\n    authorization-mode: AlwaysAllow\n")
	openAPIServer := configFile("open-apiserver.yaml", "apiServer:\n  extraArgs:\n    authorization-mode: AlwaysAllow\n")
	badToken := filepath.Join(fx.sandbox, "kubeconfig") // a file, but no token

	// none of these endpoints is ever dialled, or only the closed
	// loopback port 1
	noEtcd := []string{"--endpoints", "http://127.0.0.1:1"}
	etcdArgs := func(args ...string) []string {
		return slices.Concat([]string{"etcd", args[0]}, noEtcd, args[1:])
	}

	tests := []badInputCase{
		// names that are paths
		{name: "source get, climbing release", args: []string{"source", "get", "../../x"}, want: `"../../x" is not a Kubernetes release tag`},
		{name: "source get, release then path", args: []string{"source", "get", "v1.34.4/../../x"}, want: `"v1.34.4/../../x" is not a Kubernetes release tag`},
		{name: "build, climbing platform", args: []string{"build", "apiserver", "--tree", tree, "--platform", "linux/../../x"}, want: `platform "linux/../../x": use os/arch`},
		{name: "build, climbing etcd version", args: []string{"build", "etcd", "--tree", tree, "--etcd-version", "v1/../../../../victim"}, want: `etcd version "v1/../../../../victim": use v3.MINOR.PATCH`},
		{name: "up, climbing name", args: []string{"up", "--name", "../x", "--tree", tree}, want: `cluster name "../x"`},
		{name: "up, upper-case name", args: []string{"up", "--name", "DEVK", "--tree", tree}, want: `cluster name "DEVK"`},
		{name: "up, config with an unknown key", args: []string{"up", "--tree", tree, "--config", unknownKey}, want: unknownKey + ":4: networking.podSubnt: unknown key"},
		{name: "up, config with a climbing name", args: []string{"up", "--tree", tree, "--config", climbingName}, want: climbingName + `:3: name: cluster name "../x"`},
		{name: "up, config setting devk's flag", args: []string{"up", "--tree", tree, "--config", devkFlag}, want: "apiServer.extraArgs.etcd-servers: devk sets --etcd-servers"},
		{name: "up, config with a multicast node subnet", args: []string{"up", "--tree", tree, "--config", multicastNodes}, want: multicastNodes + ":4: networking.nodeSubnet: 224.1.0.0/24 is not in a private range"},
		{name: "up, config giving the kubelet the host's containerd", args: []string{"up", "--tree", tree, "--config", hostRuntime}, want: hostRuntime + ":6: kubelet.extraArgs.container-runtime-endpoint: devk sets containerRuntimeEndpoint in the kubelet's config file, and --container-runtime-endpoint would override it: leave it out of extraArgs"},
		{name: "up, config opening the kubelet", args: []string{"up", "--tree", tree, "--config", openKubelet}, want: openKubelet + ":5: kubelet.extraArgs.anonymous-auth: devk owns --anonymous-auth: it decides who may use the kubelet's API"},
		{name: "up, config opening the API server", args: []string{"up", "--tree", tree, "--config", openAPIServer}, want: openAPIServer + ":5: apiServer.extraArgs.authorization-mode: devk owns --authorization-mode"},
		{name: "up, config name and --name", args: []string{"up", "--tree", tree, "--name", "devk", "--config", otherName}, want: `name: is "dev", but --name is "devk"`},
		{name: "up, --images-from without --images-tag", args: []string{"up", "--tree", tree, "--images-from", "127.0.0.1:5000"}, want: "--images-from needs --images-tag: name the images' tag and etcd's"},
		{name: "up, --images-tag without etcd's", args: []string{"up", "--tree", tree, "--images-from", "127.0.0.1:5000", "--images-tag", "v1.34.4"}, want: "names no tag for etcd"},
		{name: "up, --images-tag with a bad digest", args: []string{"up", "--tree", tree, "--images-from", "127.0.0.1:5000", "--images-tag", "v1.34.4,etcd=sha256:abc"}, want: `"sha256:abc" is not a digest`},
		{name: "up, no config file", args: []string{"up", "--tree", tree, "--config", filepath.Join(configs, "none.yaml")}, want: "read the cluster config file"},
		{name: "down, climbing name", args: []string{"down", "--name", "../../etc"}, want: `cluster name "../../etc"`},
		{name: "down, empty name", args: []string{"down", "--name", ""}, want: `cluster name ""`},
		{name: "status, name with a slash", args: []string{"status", "--name", "a/b"}, want: `cluster name "a/b"`},
		{name: "status, empty name", args: []string{"status", "--name", ""}, want: `cluster name ""`},
		{name: "certs, climbing name", args: []string{"certs", "check-expiration", "--name", "../x"}, want: `cluster name "../x"`},
		{name: "certs, no such cluster", args: []string{"certs", "check-expiration", "--name", "nosuch"}, want: "for a kubeadm node pass --pki-dir"},
		{name: "certs, not a PKI dir", args: []string{"certs", "check-expiration", "--pki-dir", tree}, want: "not a Kubernetes PKI directory (no ca.crt)"},
		{name: "certs, kubeconfig dir alone", args: []string{"certs", "check-expiration", "--kubeconfig-dir", tree}, want: "pass --pki-dir"},
		{name: "certs renew, no validity", args: []string{"certs", "renew", "all", "--validity", "0s"}, want: "--validity 0s: give a positive duration"},
		{name: "certs renew, no such cluster", args: []string{"certs", "renew", "all", "--name", "nosuch"}, want: "for a kubeadm node pass --pki-dir"},
		{name: "certs renew, not a PKI dir", args: []string{"certs", "renew", "all", "--pki-dir", tree}, want: "not a Kubernetes PKI directory"},
		{name: "certs renew, kubeconfig on a kubeadm node", args: []string{"certs", "renew", "all", "--pki-dir", tree, "--write-kubeconfig", tree + "/kc"}, want: "--write-kubeconfig is a devk cluster's"},
		{name: "certs, no such node", args: []string{"certs", "check-expiration", "--node", "nosuch"}, want: `--node: cluster devk has no node "nosuch"; its nodes: devk-control-plane`},
		{name: "certs renew, no such node", args: []string{"certs", "renew", "apiserver", "--node", "nosuch"}, want: `--node: cluster devk has no node "nosuch"; its nodes: devk-control-plane`},
		{name: "certs, --node on a kubeadm node", args: []string{"certs", "check-expiration", "--pki-dir", tree, "--node", "x"}, want: "--node names control-plane nodes of a devk cluster"},
		{name: "certs renew, --cri-socket on a devk cluster", args: []string{"certs", "renew", "all", "--cri-socket", "/run/x.sock"}, want: "--cri-socket and --node-name are for a node devk did not make"},
		{name: "certs, weeks", args: []string{"certs", "check-expiration", "--fail-within", "3w"}, want: `"3w" is not a duration: use days (30d)`},
		{name: "swap, name ..", args: []string{"swap", "apiserver", "--name", "..", "--tree", tree}, want: `cluster name ".."`},
		{name: "digest verify, climbing name", args: []string{"digest", "verify", "--name", "../x"}, want: `cluster name "../x"`},
		{name: "digest, climbing name", args: []string{"digest", "apiserver", "--name", "../x", "--tree", tree}, want: `cluster name "../x"`},
		{name: "watch, climbing name", args: []string{"watch", "apiserver", "--name", "../x", "--tree", tree, "--once"}, want: `cluster name "../x"`, timeout: watchTimeout},
		{name: "etcd get, climbing cluster", args: []string{"etcd", "get", "--cluster", "../../x", "secrets/default/x"}, want: `cluster name "../../x"`},
		{name: "etcd ls, empty cluster", args: []string{"etcd", "ls", "--cluster", ""}, want: `cluster name ""`},
		{name: "push, climbing package path", args: []string{"push", "../kubectl", "--tree", tree}, want: `package path "../kubectl": ` + filepath.Join(filepath.Dir(tree), "kubectl") + " is not inside the tree at " + tree},
		{name: "build, climbing package path", args: []string{"build", "../../apiserver", "--tree", tree}, want: `package path "../../apiserver": ` + filepath.Join(filepath.Dir(filepath.Dir(tree)), "apiserver") + " is not inside the tree at " + tree},
		{name: "build, a library", args: []string{"build", "./test/utils", "--tree", tree}, want: "holds package utils, not a main package: name a directory holding a package main, e.g. ./test/images/agnhost"},
		{name: "push, a package not built", args: []string{"push", "./test/images/agnhost", "--tree", tree}, want: "agnhost is not built yet: run `devk build ./test/images/agnhost` first"},
		{name: "swap, climbing component", args: []string{"swap", "../kubectl", "--tree", tree}, want: `unknown component "../kubectl"`},
		{name: "digest, climbing component", args: []string{"digest", "../apiserver", "--tree", tree}, want: `unknown component "../apiserver"`},
		{name: "watch, climbing component", args: []string{"watch", "../apiserver", "--tree", tree, "--no-swap", "--once"}, want: `unknown component "../apiserver"`, timeout: watchTimeout},
		{name: "watch, e2e without a swap", args: []string{"watch", "apiserver", "--tree", tree, "--no-swap", "--once", "--e2e-focus", "Pods"}, want: "--e2e-focus runs specs against what a cycle swapped in: drop --no-swap", timeout: watchTimeout},
		{name: "watch, e2e focus not a regexp", args: []string{"watch", "apiserver", "--tree", tree, "--once", "--e2e-focus", "Pods ("}, want: `--e2e-focus "Pods (" is not a regular expression`, timeout: watchTimeout},
		{name: "watch, e2e on a kubeadm node", args: []string{"watch", "apiserver", "--tree", tree, "--once", "--e2e-focus", "Pods", "--manifests-dir", tree, "--kubeconfig", tree + "/kc", "--cri-socket", tree + "/sock"}, want: "--e2e-focus runs devk e2e, which needs a devk cluster", timeout: watchTimeout},
		{name: "stacks, unknown component", args: []string{"stacks", "coredns"}, want: `unknown component "coredns": want one of apiserver, controller-manager, scheduler, kubelet, etcd`},
		{name: "debug, unknown component", args: []string{"debug", "kubectl"}, want: `devk debug runs a static pod, the kubelet or an addon under the debugger: apiserver, controller-manager, scheduler, kubelet, kube-proxy, etcd, coredns, not "kubectl"`},
		{name: "debug, no cluster", args: []string{"debug", "apiserver", "--name", "nosuch", "--tree", tree}, want: "for a kubeadm node pass --manifests-dir, --kubeconfig and --cri-socket"},
		{name: "debug, kubeadm node without --address", args: []string{"debug", "apiserver", "--tree", tree, "--manifests-dir", tree, "--kubeconfig", tree + "/kc", "--cri-socket", tree + "/sock"}, want: "no address for the debugger to listen on: on a node devk did not make pass --address, the node's IP"},
		{name: "debug, --node without a cluster", args: []string{"debug", "apiserver", "--node", "x", "--tree", tree, "--manifests-dir", tree, "--kubeconfig", tree + "/kc", "--cri-socket", tree + "/sock"}, want: "--node names a node of a devk cluster: there is none here"},
		{name: "stacks, match not a regexp", args: []string{"stacks", "apiserver", "--match", "routes("}, want: `--match "routes(" is not a regular expression`},
		{name: "stacks, no such node", args: []string{"stacks", "scheduler", "--node", "nosuch", "--tree", tree}, want: `--node: cluster devk has no node "nosuch"; its nodes: devk-control-plane`},
		{name: "stacks, climbing name", args: []string{"stacks", "apiserver", "--name", "../x", "--tree", tree}, want: `cluster name "../x"`},
		{name: "trace, no command", args: []string{"trace"}, want: "give the command to trace after --"},
		{name: "trace, command before --", args: []string{"trace", "kubectl", "get", "pods"}, want: "put the command to trace after --"},
		{name: "trace, command and --follow", args: []string{"trace", "--follow", "--", "true"}, want: "--follow traces no command"},
		{name: "trace, bad filter", args: []string{"trace", "--filter", "verb=get", "--", "true"}, want: `--filter "verb=get": unknown key "verb"`},
		{name: "trace, no settle", args: []string{"trace", "--settle", "0s", "--", "true"}, want: "--settle 0s: give a positive duration"},
		{name: "trace, no such cluster", args: []string{"trace", "--name", "nosuch", "--", "true"}, want: `nosuch`},
		{name: "trace --follow, no such cluster", args: []string{"trace", "--follow", "--name", "nosuch"}, want: `nosuch`},
		{name: "trace, no audit log yet", args: []string{"trace", "--", "true"}, want: "no audit log at "},
		{name: "run, not a static pod of the tree", args: []string{"run", "etcd", "--tree", tree}, want: "devk run takes apiserver, controller-manager, scheduler: etcd is not a static pod built from the tree"},
		{name: "run, unknown component", args: []string{"run", "../kubectl", "--tree", tree}, want: `devk run takes apiserver, controller-manager, scheduler: unknown component "../kubectl"`},
		{name: "run, no such node", args: []string{"run", "scheduler", "--node", "nosuch", "--tree", tree}, want: `--node: cluster devk has no node "nosuch"; its nodes: devk-control-plane`},
		{name: "run, climbing name", args: []string{"run", "scheduler", "--name", "../x", "--tree", tree}, want: `cluster name "../x"`},
		{name: "run, nothing built", args: []string{"run", "apiserver", "--tree", tree}, want: "no apiserver built in " + tree + " yet: run `devk build apiserver`, or pass --go-run"},
		{name: "etcd get, namespace with a slash", args: etcdArgs("get", "-n", "../x", "cm/y"), want: `namespace "../x"`},

		// registry
		{name: "registry serve, root of mode 0777", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", openRoot}, want: "is writable by group or others (mode 0777)", timeout: 5 * time.Second},
		{name: "registry serve, root under a dir of mode 0777", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", filepath.Join(openParent, "store")}, want: "which is writable by group or others (mode 0777) and not sticky", timeout: 5 * time.Second},
		{name: "registry serve, DEVK_HOME of mode 0777", args: []string{"registry", "serve", "--addr", "127.0.0.1:0"}, home: openHome, want: "and not sticky", timeout: 5 * time.Second},
		{name: "registry serve, root is a file", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", fileRoot}, want: "not a directory", timeout: 5 * time.Second},
		{name: "registry serve, symlink to a dir of uid 65534", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", nobodyLink}, want: "belongs to uid 65534", timeout: 5 * time.Second, skip: notRoot},
		{name: "registry serve, root under a dir of uid 65534", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", filepath.Join(nobodyDir, "store")}, want: "which belongs to uid 65534", timeout: 5 * time.Second, skip: notRoot},
		{name: "registry serve, no storage limit", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", goodRoot, "--max-storage", "0"}, want: "want a size above 0 such as 512Mi or 64Gi", timeout: 5 * time.Second},
		{name: "registry serve, storage limit past int64", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", goodRoot, "--max-blob-size", "18446744073709551621"}, want: "want a size above 0 such as 512Mi or 64Gi (at most 8Ei)", timeout: 5 * time.Second},
		{name: "registry serve, credential readable by others", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", goodRoot, "--credential", openCredential}, want: "may be read by others (mode 0644): run `chmod 0600 " + openCredential + "`", timeout: 5 * time.Second},
		{name: "registry forward, allow not a subnet", args: []string{"registry", "forward", "--addr", "127.0.0.1:0", "--allow", "10.250.0.1"}, want: `--allow "10.250.0.1": want the node subnet as a CIDR`, timeout: 5 * time.Second},
		{name: "registry serve, address not on loopback", args: []string{"registry", "serve", "--addr", "10.255.255.1:0", "--root", goodRoot}, want: "listen on 10.255.255.1:0", timeout: 5 * time.Second},
		{name: "push, plain HTTP off loopback", args: []string{"push", "apiserver", "--tree", tree, "--registry", noRoute}, want: "pass --insecure", within: 5 * time.Second},
		{name: "push, plain HTTP off loopback from DEVK_REGISTRY", args: []string{"push", "apiserver", "--tree", tree}, env: map[string]string{"DEVK_REGISTRY": noRoute}, want: "pass --insecure", within: 5 * time.Second},
		{name: "build --push, plain HTTP off loopback", args: []string{"build", "apiserver", "--push", "--tree", tree, "--registry", noRoute}, want: "pass --insecure", within: 5 * time.Second},
		{name: "registry ls, plain HTTP off loopback", args: []string{"registry", "ls", "--registry", noRoute}, want: "pass --insecure", within: 5 * time.Second},
		{name: "registry ls, plain HTTP off loopback from DEVK_REGISTRY", args: []string{"registry", "ls"}, env: map[string]string{"DEVK_REGISTRY": noRoute}, want: "pass --insecure", within: 5 * time.Second},
		{name: "digest, plain HTTP off loopback", args: []string{"digest", "apiserver", "--tree", tree, "--registry", noRoute}, want: "pass --insecure", within: 5 * time.Second},
		{name: "watch, plain HTTP off loopback", args: []string{"watch", "apiserver", "--no-swap", "--once", "--tree", tree, "--registry", noRoute}, want: "pass --insecure", timeout: watchTimeout},
		{name: "push, unknown scheme", args: []string{"push", "apiserver", "--tree", tree, "--registry", "ftp://127.0.0.1:5000"}, want: "unknown scheme ftp://"},
		{name: "push, unknown compression", args: []string{"push", "apiserver", "--tree", tree, "--compression", "best"}, want: "use fast, standard or none"},

		// swap
		{name: "swap, manifests dir alone", args: []string{"swap", "apiserver", "--manifests-dir", nodeManifests, "--tree", tree}, want: "pass all of --manifests-dir, --kubeconfig and --cri-socket"},
		{name: "swap, manifests dir and kubeconfig without a CRI socket", args: []string{"swap", "apiserver", "--manifests-dir", nodeManifests, "--kubeconfig", filepath.Join(fx.sandbox, "kubeconfig"), "--tree", tree}, want: "pass all of --manifests-dir, --kubeconfig and --cri-socket"},
		{name: "swap, unknown component", args: []string{"swap", "nosuchcomponent", "--tree", tree}, want: `unknown component "nosuchcomponent"`},
		{name: "swap, rollback of nothing", args: []string{"swap", "--rollback"}, want: "name what to roll back"},
		{name: "swap, kubeadm", args: []string{"swap", "kubeadm", "--tree", tree}, want: "kubeadm is neither a static pod"},
		{name: "swap, kube-proxy never pushed", args: []string{"swap", "kube-proxy", "--tree", tree}, want: "run `devk build kube-proxy --push` first"},
		{name: "swap, negative timeout", args: []string{"swap", "apiserver", "--tree", tree, "--timeout", "-1s"}, want: "--timeout"},
		{name: "digest verify, kubectl", args: []string{"digest", "verify", "kubectl", "--manifests-dir", nodeManifests, "--kubeconfig", filepath.Join(fx.sandbox, "kubeconfig"), "--cri-socket", filepath.Join(fx.sandbox, "no.sock"), "--tree", tree}, want: "invalid configuration"},

		// etcd
		{name: "etcd get, nothing listening", args: etcdArgs("get", "--command-timeout", "1s", "secrets/default/x"), want: "cannot reach 127.0.0.1:1", within: 15 * time.Second},
		{name: "etcd get, endpoint not a client URL", args: []string{"etcd", "get", "--endpoints", "ftp://127.0.0.1:1", "cm/default/x"}, want: "use a client URL"},
		{name: "etcd get, cert without key", args: etcdArgs("get", "--cert", filepath.Join(fx.sandbox, "client.crt"), "cm/default/x"), want: "certificate and key go together"},
		{name: "etcd get, negative dial timeout", args: etcdArgs("get", "--dial-timeout", "-1s", "cm/default/x"), want: "--dial-timeout"},
		{name: "etcd get, negative command timeout", args: etcdArgs("get", "--command-timeout", "-1s", "cm/default/x"), want: "--command-timeout"},
		{name: "etcd get, bad ignore path", args: etcdArgs("get", "--ignore", "a..b", "cm/default/x"), want: "names joined by dots"},
		{name: "etcd ls, negative revision", args: etcdArgs("ls", "--rev", "-1"), want: "revisions start at 1"},
		{name: "etcd watch, negative revision", args: etcdArgs("watch", "--from-rev", "-1"), want: "revisions start at 1", timeout: watchTimeout},
		{name: "etcd diff, negative revision", args: etcdArgs("diff", "--since-rev", "-1"), want: "revisions start at 1"},
		{name: "etcd diff, nothing after --", args: etcdArgs("diff", "--"), want: "nothing after --"},

		// global flags, arguments and commands
		{name: "version -o wide", args: []string{"version", "-o", "wide"}, want: `-o "wide": use one of text, json, yaml`},
		{name: "version -o empty", args: []string{"version", "-o", ""}, want: `-o "": use one of text, json, yaml`},
		{name: "status -o wide", args: []string{"status", "-o", "wide"}, want: `-o "wide": use one of text, json, yaml`},
		{name: "swap -o wide", args: []string{"swap", "apiserver", "--tree", tree, "-o", "wide"}, want: `-o "wide": use one of text, json, yaml`},
		{name: "etcd ls -o wide", args: etcdArgs("ls", "-o", "wide"), want: `-o "wide": use one of text, json, yaml`},
		{name: "build phase -o wide", args: []string{"build", "phase", "compile", "apiserver", "--tree", tree, "-o", "wide"}, want: `-o "wide": use one of text, json, yaml`},
		{name: "registry serve -o wide", args: []string{"registry", "serve", "--addr", "127.0.0.1:0", "--root", goodRoot, "-o", "wide"}, want: `-o "wide": use one of text, json, yaml`, timeout: 5 * time.Second},
		{name: "up -o wide", args: []string{"up", "--tree", tree, "-o", "wide"}, want: `-o "wide": use one of text, json, yaml`},
		{name: "version -v -q", args: []string{"version", "-v", "-q"}, want: "contradict"},
		{name: "build -v -q", args: []string{"build", "apiserver", "--tree", tree, "-v", "-q"}, want: "contradict"},
		{name: "down -v -q", args: []string{"down", "-v", "-q"}, want: "contradict"},
		{name: "down -v 2 -q", args: []string{"down", "-v", "2", "-q"}, want: "contradict"},
		{name: "version -v x", args: []string{"version", "-v=x"}, want: "invalid argument"},
		{name: "status, unknown flag", args: []string{"status", "--bogus"}, want: "unknown flag: --bogus"},
		{name: "swap, unknown flag", args: []string{"swap", "--force", "apiserver"}, want: "unknown flag: --force"},
		{name: "etcd get, unknown flag", args: []string{"etcd", "get", "--bogus", "cm/default/x"}, want: "unknown flag: --bogus"},
		{name: "up, unknown flag", args: []string{"up", "--bogus"}, want: "unknown flag: --bogus"},
		{name: "down, unknown flag", args: []string{"down", "--force"}, want: "unknown flag: --force"},
		{name: "registry serve, unknown flag", args: []string{"registry", "serve", "--port", "5000"}, want: "unknown flag: --port", timeout: 5 * time.Second},
		{name: "build, unknown short flag", args: []string{"build", "apiserver", "-x"}, want: "unknown shorthand flag: 'x'"},
		{name: "status, extra argument", args: []string{"status", "extra"}, want: `unknown command "extra"`},
		{name: "up, extra argument", args: []string{"up", "extra"}, want: `unknown command "extra"`},
		{name: "down, extra argument", args: []string{"down", "extra"}, want: `unknown command "extra"`},
		{name: "registry serve, extra argument", args: []string{"registry", "serve", "extra"}, want: `unknown command "extra"`, timeout: 5 * time.Second},
		{name: "source get, no version", args: []string{"source", "get"}, want: "accepts between 1 and 2 arg(s)"},
		{name: "source get, three arguments", args: []string{"source", "get", "v1.34.4", "a", "b"}, want: "accepts between 1 and 2 arg(s)"},
		{name: "unknown command", args: []string{"frobnicate"}, want: `unknown command "frobnicate"`},
		{name: "registry, unknown subcommand", args: []string{"registry", "frobnicate"}, want: `unknown command "frobnicate"`},
		{name: "etcd, unknown subcommand", args: []string{"etcd", "frobnicate"}, want: `unknown command "frobnicate"`},
		{name: "source, unknown subcommand", args: []string{"source", "frobnicate"}, want: `unknown command "frobnicate"`},
		{name: "build phase, unknown phase", args: []string{"build", "phase", "nope"}, want: `unknown command "nope"`},
		{name: "build, unknown phase to skip", args: []string{"build", "apiserver", "--tree", tree, "--skip-phases", "nope"}, want: `unknown phase "nope"`},
		{name: "up, unknown phase to skip", args: []string{"up", "--tree", tree, "--skip-phases", "nope"}, want: `unknown phase "nope"`},
		{name: "down, unknown phase to skip", args: []string{"down", "--skip-phases", "nope"}, want: `unknown phase "nope"`},
		{name: "build outside a tree", args: []string{"build", "apiserver"}, want: "devk source get"},
		{name: "build, tree is a file", args: []string{"build", "apiserver", "--tree", filepath.Join(fx.sandbox, "kubeconfig")}, want: "devk source get"},
		{name: "watch, negative debounce", args: []string{"watch", "apiserver", "--tree", tree, "--no-swap", "--once", "--debounce", "-1s"}, want: "--debounce", timeout: watchTimeout},
		{name: "swap, unknown phase to skip", args: []string{"swap", "apiserver", "--tree", tree, "--skip-phases", "nope"}, want: `unknown phase "nope"`},
		{name: "swap, skipping what a phase needs", args: []string{"swap", "apiserver", "--tree", tree, "--skip-phases", "apiserver/backup"}, want: "apiserver/write needs apiserver/backup"},
		{name: "swap phase, unknown phase", args: []string{"swap", "phase", "nope"}, want: `unknown command "nope"`},
		{name: "swap, no cluster", args: []string{"swap", "apiserver", "--tree", tree}, home: filepath.Join(fx.sandbox, "homes", "empty"), want: `no devk cluster "devk"`},
		{name: "swap --dry-run, no cluster", args: []string{"swap", "--dry-run", "--tree", tree}, home: filepath.Join(fx.sandbox, "homes", "empty"), want: "for a kubeadm node pass --manifests-dir"},
		{name: "digest verify, no cluster", args: []string{"digest", "verify", "apiserver", "--tree", tree}, home: filepath.Join(fx.sandbox, "homes", "empty"), want: `no devk cluster "devk"`},
		{name: "watch, no cluster", args: []string{"watch", "apiserver", "--tree", tree, "--once"}, home: filepath.Join(fx.sandbox, "homes", "empty"), want: "or pass --no-swap", timeout: watchTimeout},
		{name: "export logs, name with a slash", args: []string{"export", "logs", "--name", "a/b", filepath.Join(fx.sandbox, "export")}, want: `cluster name "a/b"`},
		{name: "export logs, two directories", args: []string{"export", "logs", filepath.Join(fx.sandbox, "x"), filepath.Join(fx.sandbox, "y")}, want: "accepts at most 1 arg(s)"},
		{name: "export logs, no cluster", args: []string{"export", "logs", filepath.Join(fx.sandbox, "export")}, home: filepath.Join(fx.sandbox, "homes", "empty"), want: `no devk cluster "devk"`},
		{name: "export logs into a directory in use", args: []string{"export", "logs", tree}, want: "is not empty: name a new directory"},
		{name: "export logs over a file", args: []string{"export", "logs", "--tar", filepath.Join(fx.sandbox, "kubeconfig")}, want: "exists: name a new file"},
		{name: "export logs into a directory of uid 65534", args: []string{"export", "logs", nobodyDir}, want: "belongs to uid 65534, not to devk's user", skip: notRoot},
		{name: "export logs into a directory of mode 0777", args: []string{"export", "logs", openRoot}, want: "may be written by other users (mode -rwxrwxrwx)"},
		{name: "export logs into a symlink", args: []string{"export", "logs", nobodyLink}, want: "exists and is not a directory (a symlink is not taken either)"},
		{name: "node add, --token and --token-file", args: []string{"node", "add", "--token", "abcdef.0123456789abcdef", "--token-file", badToken}, want: "by --token or by --token-file, not both"},
		{name: "node add, a bad --token", args: []string{"node", "add", "--token", "abcdef.x"}, want: "--token: bad bootstrap token"},
		{name: "node add, no token file", args: []string{"node", "add", "--token-file", filepath.Join(fx.sandbox, "none")}, want: "--token-file: open " + filepath.Join(fx.sandbox, "none")},
		{name: "node add, no token in the file", args: []string{"node", "add", "--token-file", badToken}, want: "--token-file: " + badToken + ": bad bootstrap token"},
		{name: "node add, no token on stdin", args: []string{"node", "add", "--token-file", "-"}, want: "--token-file: stdin holds no bootstrap token"},
		{name: "node exec, no cluster", args: []string{"node", "exec", "--", "true"}, home: filepath.Join(fx.sandbox, "homes", "empty"), want: `no devk cluster "devk"`},
		{name: "node exec, no --", args: []string{"node", "exec", "ip", "addr"}, want: "put the command after --: devk node exec -- ip addr"},
		{name: "node exec, nothing", args: []string{"node", "exec"}, want: "give the command to run after --"},
		{name: "node exec, no command", args: []string{"node", "exec", "--"}, want: "no command after --"},
		{name: "node exec, two nodes", args: []string{"node", "exec", "a", "b", "--", "true"}, want: "one node before --, not 2 (a b)"},
		{name: "node exec, a bad node name", args: []string{"node", "exec", "../x", "--", "true"}, want: `node name "../x"`},
		{name: "node exec, no such node", args: []string{"node", "exec", "nosuch", "--", "true"}, want: `cluster devk has no node "nosuch"; its nodes: devk-control-plane`},
		{name: "node exec, a node not up", args: []string{"node", "exec", "--", "true"}, want: "node devk-control-plane has no "},
		{name: "node exec, -o json", args: []string{"node", "exec", "-o", "json", "--", "true"}, want: "node exec's output is CMD's own: leave -o out"},
		{name: "node exec, unknown flag", args: []string{"node", "exec", "--bogus", "--", "true"}, want: "unknown flag: --bogus"},
		{name: "watch, unknown phase to skip", args: []string{"watch", "apiserver", "--tree", tree, "--no-swap", "--once", "--skip-phases", "swap/nope"}, want: `unknown phase "swap/nope"`, timeout: watchTimeout},
	}
	for _, tp := range tampers {
		home := filepath.Join(fx.sandbox, "homes", strconv.Itoa(len(tests)))
		fx.writeClusterHome(t, home, tp.config())
		for _, args := range tamperCommands {
			c := badInputCase{name: "cluster.json " + tp.name + ", " + strings.Join(args[:min(len(args), 2)], " "), args: args, want: tp.want, home: home}
			if args[0] == "watch" {
				c.timeout = watchTimeout
			}
			tests = append(tests, c)
		}
	}

	commands := map[string]bool{}
	var changed, failed []string
	for _, tc := range tests {
		commands[commandPath(tc.args)] = true
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip != "" {
				t.Skip(tc.skip)
			}
			home := fx.home
			if tc.home != "" {
				home = tc.home
			}
			t.Setenv("DEVK_HOME", home)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			timeout := badInputTimeout
			if tc.timeout > 0 {
				timeout = tc.timeout
			}
			before := fx.hashes(t, home)
			check := func(args []string) bool {
				r := runDevkWithin(timeout, args...)
				ok := true
				if why := refusal(r, tc.want, tc.within); why != "" {
					t.Errorf("devk %s: %s", shellLine(args), why)
					ok = false
				} else {
					t.Logf("devk %s: %v", shellLine(args), r.err)
				}
				for i, h := range fx.hashes(t, home) {
					if h[1] != before[i][1] {
						t.Errorf("devk %s changed %s", shellLine(args), h[0])
						changed = append(changed, tc.name+": "+h[0])
						ok = false
					}
				}
				return ok
			}
			if mutatesNode(tc.args) && !check(withDryRun(tc.args)) {
				t.Errorf("not running devk %s: its --dry-run took the input, so it would act on this machine", shellLine(tc.args))
				failed = append(failed, tc.name)
				return
			}
			if !check(tc.args) {
				failed = append(failed, tc.name)
			}
		})
	}
	t.Logf("bad input: %d cases, %d commands, %d files changed", len(tests), len(commands), len(changed))
	if len(failed) > 0 {
		t.Logf("cases that failed: %s", strings.Join(failed, "; "))
	}
	if len(changed) > 0 {
		t.Errorf("bad input changed files: %s", strings.Join(changed, "; "))
	}
}

// shellLine quotes args as a user would type them.
func shellLine(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t\n'\"$`\\*?[]#~=&;|<>()") && !strings.HasPrefix(a, "-") {
			b.WriteString(strconv.Quote(a))
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// TestBadInputSecretsStayRedacted: whatever --ignore leaves out of a
// Secret, get, diff and watch never print its data (or the copy kubectl
// apply keeps in an annotation) without --show-secrets, in text or JSON.
func TestBadInputSecretsStayRedacted(t *testing.T) {
	srv, cli := etcdtest.StartT(t)
	ctx := context.Background()
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	since := resp.Header.Revision
	secret := etcdtest.Secret("default", "db", 1)
	secret.Annotations = map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","data":{"password":"aHVudGVyMQ==","user":"YWRtaW4="},"kind":"Secret"}`,
	}
	if err := etcdtest.Put(ctx, cli, map[string][]byte{"/registry/secrets/default/db": etcdtest.MustEncode(secret)}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DEVK_HOME", t.TempDir())
	for _, env := range []string{"ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT", "ETCDCTL_CERT", "ETCDCTL_KEY"} {
		t.Setenv(env, "")
	}
	// the password and the user, as bytes and as base64
	secrets := []string{"hunter1", "aHVudGVyMQ==", "YWRtaW4="}

	commands := []struct {
		name string
		args []string
		// follow: the command streams until stopped (watch)
		follow bool
	}{
		{"get", []string{"etcd", "get", "secret/default/db"}, false},
		{"diff", []string{"etcd", "diff", "--since-rev", strconv.FormatInt(since, 10)}, false},
		{"watch", []string{"etcd", "watch", "secrets", "--from-rev", strconv.FormatInt(since, 10)}, true},
	}
	ignores := []string{"kind", "apiVersion", "metadata", "data", "type", "kind,apiVersion", "metadata.annotations", ""}
	n := 0
	for _, c := range commands {
		for _, output := range []string{"text", "json"} {
			for _, ignore := range ignores {
				if c.follow && !slices.Contains([]string{"kind", "apiVersion", ""}, ignore) {
					continue // each watch waits; the fields that name a Secret are enough
				}
				n++
				args := slices.Concat(c.args, []string{"--endpoints", srv.Endpoint, "-o", output, "--ignore", ignore})
				t.Run(fmt.Sprintf("%s -o %s --ignore %q", c.name, output, ignore), func(t *testing.T) {
					timeout := badInputTimeout
					if c.follow {
						timeout = 2 * time.Second
					}
					r := runDevkWithin(timeout, args...)
					switch {
					case r.hung:
						t.Fatalf("devk %s did not return", shellLine(args))
					case r.err != nil && !(c.follow && r.timedOut):
						t.Fatalf("devk %s: %v", shellLine(args), r.err)
					}
					if !strings.Contains(r.stdout, "db") {
						t.Fatalf("devk %s did not print the Secret:\n%s", shellLine(args), r.stdout)
					}
					var leaked []string
					for _, s := range secrets {
						if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
							leaked = append(leaked, s)
						}
					}
					if len(leaked) > 0 {
						t.Errorf("devk %s printed the Secret's data %q without --show-secrets", shellLine(args), leaked)
					}
				})
			}
		}
	}
	t.Logf("secrets: %d runs of %d commands", n, len(commands))
}
