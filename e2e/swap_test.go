//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/syncbuf"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var errNotYet = errors.New("not yet")

// swapCheck is one of a swap's verifications in its report.
type swapCheck struct {
	Check string `json:"check"`
	Want  string `json:"want"`
	Got   string `json:"got"`
	OK    bool   `json:"ok"`
}

type swapReport struct {
	StaticPods []struct {
		Pod        string `json:"pod"`
		OldImage   string `json:"oldImage"`
		NewImage   string `json:"newImage"`
		RolledBack bool   `json:"rolledBack"`
		// Ready and Took are swap's durations (JSON nanoseconds).
		Ready  time.Duration `json:"ready"`
		Took   time.Duration `json:"took"`
		Checks []swapCheck   `json:"checks"`
		Log    []string      `json:"log"`
	} `json:"staticPods"`
	Addons []struct {
		Component  string        `json:"component"`
		Workload   string        `json:"workload"`
		OldImage   string        `json:"oldImage"`
		NewImage   string        `json:"newImage"`
		RolledBack bool          `json:"rolledBack"`
		RolledOut  time.Duration `json:"rolledOut"`
		Checks     []swapCheck   `json:"checks"`
		Pod        string        `json:"pod"`
		Log        []string      `json:"log"`
	} `json:"addons"`
	Binaries []struct {
		Component string `json:"component"`
		Dest      string `json:"dest"`
		Changed   bool   `json:"changed"`
		Version   string `json:"version"`
	} `json:"binaries"`
}

// appendTo adds text to a file of the tree and restores it when the test ends.
func appendTo(t *testing.T, path, text string) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A run killed before its cleanup left the text in the shared tree:
	// take it out, so that the file is the tree's own again.
	if bytes.Contains(orig, []byte(text)) {
		t.Logf("%s still had what an interrupted run appended: removed", path)
		orig = bytes.ReplaceAll(orig, []byte(text), nil)
	}
	t.Cleanup(func() { os.WriteFile(path, orig, 0o644) })
	if err := os.WriteFile(path, append(append([]byte{}, orig...), text...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// swapJSON runs `devk swap component -o json` through devk and decodes
// its report, which must list pods static pods and addons addons.
func swapJSON(t *testing.T, devk func(*testing.T, ...string) Result, component string, pods, addons int) swapReport {
	t.Helper()
	var rep swapReport
	r := devk(t, "swap", component, "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || len(rep.StaticPods) != pods || len(rep.Addons) != addons {
		t.Fatalf("swap -o json: %v\n%s", err, r.Stdout)
	}
	return rep
}

// swapBroken builds component with its main package (the file at path)
// made to exit at start unless asked for --version, pushes it and swaps
// it through devk: the swap must fail and be rolled back, its output
// quoting the log of what would not start. The file is put back after.
func swapBroken(t *testing.T, devk func(*testing.T, ...string) Result, tree string, env []string, path, component string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	broken := bytes.Replace(src, []byte("func main() {"), []byte("func main() {\n\tif len(os.Args) > 1 && os.Args[1] != \"--version\" {\n\t\tprintln(\"devk e2e: this "+component+" refuses to start\")\n\t\tos.Exit(1)\n\t}"), 1)
	if bytes.Equal(broken, src) {
		t.Fatalf("could not find func main in %s", path)
	}
	defer os.WriteFile(path, src, 0o644)
	os.WriteFile(path, broken, 0o644)
	devk(t, "build", component, "--push")
	t0 := time.Now()
	r := Devk(t, tree, env, "swap", component, "--timeout", "90s", "-v")
	if r.Err == nil {
		t.Fatalf("a broken %s swapped without error:\n%s", component, r.Stdout)
	}
	if !strings.Contains(r.Stdout, "ROLLED BACK") || !strings.Contains(r.Stderr, "refuses to start") {
		t.Fatalf("rollback not reported with the log of the %s that would not start:\nstdout:\n%s\nstderr:\n%s", component, r.Stdout, r.Stderr)
	}
	t.Logf("broken %s rolled back in %s", component, time.Since(t0).Round(time.Second))
}

// manifestImage reads the image a static pod manifest names.
func manifestImage(t *testing.T, path string) string {
	t.Helper()
	img, err := readManifestImage(path)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func readManifestImage(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var pod struct {
		Spec struct {
			Containers []struct{ Image string } `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pod); err != nil || len(pod.Spec.Containers) == 0 {
		return "", fmt.Errorf("%s does not parse as a pod (%v):\n%s", path, err, data)
	}
	return pod.Spec.Containers[0].Image, nil
}

// TestSwap is the loop users come for: patch the apiserver, build, push,
// swap, and see the cluster run exactly that build; then a build that
// cannot start is rolled back on its own, a killed swap is recovered with
// --rollback, kubectl and the kubelet are swapped and rolled back as
// binaries, and devk watch runs the whole loop on a save. Each step is a
// subtest; a failed step stops the ones after it, which build on it.
func TestSwap(t *testing.T) {
	sc := Cluster(t)
	tree, home, env := sc.Tree, sc.Home, sc.Env
	top := t // the tree's edits are undone when the whole test ends
	devk := func(t *testing.T, args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, tree, env, args...)
	}
	clusterDir := filepath.Join(home, "clusters", "devk")
	manifests := filepath.Join(clusterDir, "manifests")
	apiManifest := filepath.Join(manifests, "kube-apiserver.yaml")
	cs := clientFor(t, filepath.Join(clusterDir, "admin.conf"))
	ctx := context.Background()
	configGo := filepath.Join(tree, "staging", "src", "k8s.io", "apiserver", "pkg", "server", "config.go")
	apiserverMain := filepath.Join(tree, "cmd", "kube-apiserver", "apiserver.go")
	var good string // the patched apiserver's image, once swapped in

	step(t, "plan", func(t *testing.T) {
		// --dry-run names each phase and what it touches, and touches nothing.
		before, _ := os.ReadFile(apiManifest)
		r := devk(t, "swap", "--dry-run", "apiserver")
		for _, want := range []string{"apiserver/hand-over", "writes " + apiManifest, "apiserver/verify", "needs  apiserver/backup"} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("the plan lacks %q:\n%s", want, r.Stderr)
			}
		}
		if after, _ := os.ReadFile(apiManifest); !bytes.Equal(before, after) {
			t.Fatal("swap --dry-run changed the manifest")
		}
	})

	step(t, "patched apiserver", func(t *testing.T) {
		// The tree turns dirty, so the build is stamped vX-dirty and
		// /version must say so after the swap.
		appendTo(top, configGo, "\n// DevkE2ESwap proves the swapped apiserver is this build.\nfunc DevkE2ESwap() string { return \"swapped\" }\n")
		devk(t, "build", "apiserver", "--push")
		// Named: other tests share this cluster and may have left another
		// component behind its last pushed build, which a bare swap takes too.
		sp := swapJSON(t, devk, "apiserver", 1, 0).StaticPods[0]
		if sp.Pod != "kube-apiserver" || sp.RolledBack || len(sp.Checks) < 5 {
			t.Fatalf("swap result: %+v", sp)
		}
		t.Logf("apiserver swap: ready in %s, verified in %s", sp.Ready.Round(100*time.Millisecond), sp.Took.Round(100*time.Millisecond))
		for _, c := range sp.Checks {
			if !c.OK {
				t.Errorf("check %s failed: want %s, got %s", c.Check, c.Want, c.Got)
			}
			if c.Check == "/version gitVersion" && !strings.HasSuffix(c.Got, "-dirty") {
				t.Errorf("/version = %s, want the dirty build", c.Got)
			}
		}
		good = sp.NewImage
		if got := manifestImage(t, apiManifest); got != good {
			t.Fatalf("manifest names %s, want %s", got, good)
		}
		v, err := cs.Discovery().ServerVersion()
		if err != nil || !strings.HasSuffix(v.GitVersion, "-dirty") {
			t.Fatalf("/version after swap: %+v, %v", v, err)
		}
		devk(t, "digest", "verify", "apiserver")
	})

	step(t, "kubeadm node paths", func(t *testing.T) {
		// The same node addressed as a kubeadm-layout node, by its paths
		// alone, from a DEVK_HOME that knows no cluster: the paths `devk
		// swap --manifests-dir … --kubeconfig … --cri-socket …` take on a
		// real kubeadm node. The node name is found from the runtime.
		foreign := []string{"--manifests-dir", manifests, "--kubeconfig", filepath.Join(clusterDir, "admin.conf"),
			"--cri-socket", filepath.Join(clusterDir, "run", "containerd.sock"), "--kubelet-root-dir", filepath.Join(clusterDir, "kubelet")}
		otherEnv := []string{"DEVK_HOME=" + t.TempDir(), "KUBECONFIG=/nonexistent"}
		for _, args := range [][]string{{"digest", "verify", "apiserver"}, {"swap", "apiserver"}} {
			r := Devk(t, tree, otherEnv, append(args, foreign...)...)
			if r.Err != nil {
				t.Fatalf("devk %s on the node's paths: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
			}
			if args[0] == "swap" && !strings.Contains(r.Stdout, "already running") {
				t.Fatalf("swap of the running digest on the node's paths changed something:\n%s", r.Stdout)
			}
		}
	})

	// The same node through the cluster, from a copy of its kubeconfig
	// in an empty home: back to the image before (--rollback), then the
	// patched one again, each verified by the node's agent; with one
	// control plane the API server the client and the agent talk to is
	// the one swapped, and both wait for it.
	step(t, "one control plane through the cluster", func(t *testing.T) {
		cfg, _, err := layout.Open(home, "")
		if err != nil {
			t.Fatal(err)
		}
		env, copied := strangerEnv(t, sc, sc.Kubeconfig)
		node := []string{cfg.FirstNode().Name}
		back := remoteSwap(t, sc, env, copied, "", node, "--rollback", "apiserver")
		if back.StaticPods[0].Unchanged || manifestImage(t, apiManifest) == good {
			t.Errorf("--rollback through the cluster left %s", manifestImage(t, apiManifest))
		}
		remoteSwap(t, sc, env, copied, "", node, "apiserver")
		if got := manifestImage(t, apiManifest); got != good {
			t.Errorf("the swap through the cluster left %s, want %s", got, good)
		}
	})

	step(t, "nothing new pushed", func(t *testing.T) {
		// Other tests pushed from this tree too (a second cluster's up
		// pushes every image it builds, recorded as the last push): one
		// swap brings every component to its last push first.
		devk(t, "swap")
		if r := devk(t, "swap"); !strings.Contains(r.Stdout, "nothing to swap") {
			t.Fatalf("second swap: %s", r.Stdout)
		}
	})

	step(t, "apiserver that exits is rolled back", func(t *testing.T) {
		swapBroken(t, devk, tree, env, apiserverMain, "apiserver")
		if got := manifestImage(t, apiManifest); got != good {
			t.Fatalf("after rollback the manifest names %s, want %s", got, good)
		}
		eventually(t, ctx, "the apiserver to be ready after the rollback", func() error {
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		})
	})

	step(t, "killed swap is finished, then rolled back", func(t *testing.T) {
		// devk killed in the middle of a swap: the manifest is always
		// whole, the next swap finishes it, and --rollback goes back.
		appendTo(top, configGo, "\nfunc DevkE2ESwapAgain() string { return \"again\" }\n")
		devk(t, "build", "apiserver", "--push")
		cmd := exec.Command(devkBin, "swap", "apiserver")
		cmd.Dir, cmd.Env = tree, append(os.Environ(), env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The swap vacates the manifest, then writes the new one: kill it
		// once the new one is in place.
		eventually(t, ctx, "the swap to rewrite the manifest", func() error {
			if img, err := readManifestImage(apiManifest); err != nil || img == good {
				return errNotYet
			}
			return nil
		})
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		entries, _ := os.ReadDir(manifests)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".yaml") {
				t.Errorf("the manifests dir holds %s: the kubelet would read it", e.Name())
			}
			manifestImage(t, filepath.Join(manifests, e.Name())) // each parses whole
		}
		// The next swap finishes the interrupted one: the new manifest is
		// in place, so its pod is waited for and kept once healthy.
		killedAt := manifestImage(t, apiManifest)
		r := devk(t, "swap", "apiserver", "-v")
		if !strings.Contains(r.Stdout, "finished the interrupted swap") {
			t.Fatalf("a swap after a killed one did not finish it:\n%s\n%s", r.Stdout, r.Stderr)
		}
		if got := manifestImage(t, apiManifest); got != killedAt {
			t.Fatalf("after finishing the killed swap the manifest names %s, want %s", got, killedAt)
		}
		r = devk(t, "swap", "--rollback", "apiserver", "-v")
		t.Logf("the rollback said:\n%s", r.Stderr)
		if got := manifestImage(t, apiManifest); got != good {
			t.Fatalf("after --rollback the manifest names %s, want %s", got, good)
		}
	})

	step(t, "kubectl binary", func(t *testing.T) {
		// Install, no-op, new build, rollback.
		dest := filepath.Join(home, "bin", "kubectl")
		devk(t, "build", "kubectl")
		var rep swapReport
		json.Unmarshal([]byte(devk(t, "swap", "kubectl", "-o", "json").Stdout), &rep)
		if len(rep.Binaries) != 1 || !rep.Binaries[0].Changed || rep.Binaries[0].Dest != dest {
			t.Fatalf("kubectl swap: %+v", rep.Binaries)
		}
		first, _ := os.ReadFile(dest)
		rep = swapReport{}
		json.Unmarshal([]byte(devk(t, "swap", "kubectl", "-o", "json").Stdout), &rep)
		if len(rep.Binaries) != 1 || rep.Binaries[0].Changed {
			t.Fatalf("identical kubectl swap was not a no-op: %+v", rep.Binaries)
		}
		appendTo(top, filepath.Join(tree, "staging", "src", "k8s.io", "kubectl", "pkg", "cmd", "version", "version.go"), "\nfunc devkE2E() {}\n")
		devk(t, "build", "kubectl")
		devk(t, "swap", "kubectl")
		if now, _ := os.ReadFile(dest); bytes.Equal(now, first) {
			t.Fatal("a rebuilt kubectl did not replace the old one")
		}
		devk(t, "swap", "--rollback", "kubectl")
		if now, _ := os.ReadFile(dest); !bytes.Equal(now, first) {
			t.Fatal("rollback did not restore the old kubectl bytes")
		}
	})

	step(t, "kubelet binary", func(t *testing.T) {
		// A new binary, restarted, node Ready; then rolled back.
		devk(t, "build", "kubelet")
		var rep swapReport
		json.Unmarshal([]byte(devk(t, "swap", "kubelet", "-o", "json").Stdout), &rep)
		if len(rep.Binaries) != 1 || !rep.Binaries[0].Changed || !strings.HasSuffix(rep.Binaries[0].Version, "-dirty") {
			t.Fatalf("kubelet swap: %+v", rep.Binaries)
		}
		devk(t, "swap", "--rollback", "kubelet")
		eventually(t, ctx, "the node to be Ready on the old kubelet", func() error {
			nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil || len(nodes.Items) != 1 || !nodeReady(&nodes.Items[0]) {
				return errNotYet
			}
			return nil
		})
	})

	step(t, "watch", func(t *testing.T) {
		// A save is built, pushed, swapped and verified; a compile error
		// is reported and the loop recovers on the next save.
		var wout, werr syncbuf.Buffer
		wcmd := exec.Command(devkBin, "watch", "apiserver")
		wcmd.Dir, wcmd.Env, wcmd.Stdout, wcmd.Stderr = tree, append(os.Environ(), env...), &wout, &werr
		if err := wcmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer wcmd.Process.Kill()
		waitOutput := func(what string, buf *syncbuf.Buffer, sub string, n int) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Minute)
			for strings.Count(buf.String(), sub) < n {
				if time.Now().After(deadline) {
					t.Fatalf("waiting for %s (%q x%d)\nstdout:\n%s\nstderr:\n%s", what, sub, n, wout.String(), werr.String())
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		waitOutput("the watcher to start", &werr, "watching ", 1)
		appendTo(top, configGo, "\nfunc DevkE2EWatch() string { return \"watched\" }\n")
		waitOutput("the first save to be verified", &wout, "verified in", 1)
		// The cycle ran swap's own phases, each on its own line.
		for _, p := range []string{"swap/apiserver/hand-over", "swap/apiserver/verify"} {
			if !strings.Contains(werr.String(), p) {
				t.Errorf("the watch cycle did not report phase %s:\n%s", p, werr.String())
			}
		}
		saved, _ := os.ReadFile(configGo)
		os.WriteFile(configGo, append(append([]byte{}, saved...), "\nfunc devkBroken() { undefinedDevkThing() }\n"...), 0o644)
		waitOutput("the compile error", &wout, "FAILED after", 1)
		if !strings.Contains(werr.String()+wout.String(), "undefined: undefinedDevkThing") {
			t.Fatalf("the compile error was not shown:\n%s\n%s", wout.String(), werr.String())
		}
		os.WriteFile(configGo, saved, 0o644)
		waitOutput("the loop to recover", &wout, "verified in", 2)
		t.Logf("watch said:\n%s", wout.String())
		wcmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- wcmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("devk watch after Ctrl-C: %v\n%s", err, werr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("devk watch did not stop on Ctrl-C")
		}
		devk(t, "digest", "verify", "apiserver")
	})
}

// TestSwapAddon swaps kube-proxy, an addon: a rebuilt kube-proxy is set
// on its DaemonSet by digest, rolled out by the real controller-manager,
// run by the real kubelet and verified on every pod; a kube-proxy that
// cannot start is rolled back on its own, with its log; --rollback puts
// back what `devk up` installed.
func TestSwapAddon(t *testing.T) {
	sc := Cluster(t)
	tree, home, env := sc.Tree, sc.Home, sc.Env
	cs := clientFor(t, filepath.Join(home, "clusters", "devk", "admin.conf"))
	ctx := context.Background()
	_, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		t.Skip("the cluster has no DaemonSet kube-system/kube-proxy: devk up does not install the addons yet, so there is no kube-proxy to swap")
	}
	if err != nil {
		t.Fatal(err)
	}
	top := t
	devk := func(t *testing.T, args ...string) Result {
		t.Helper()
		return MustDevkEnv(t, tree, env, args...)
	}
	proxyImage := func(t *testing.T) (image string, annotations map[string]string) {
		t.Helper()
		ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "kube-proxy" {
				return c.Image, ds.Annotations
			}
		}
		t.Fatalf("DaemonSet kube-proxy has no container kube-proxy: %+v", ds.Spec.Template.Spec.Containers)
		return "", nil
	}
	installed, _ := proxyImage(t)
	proxyMain := filepath.Join(tree, "cmd", "kube-proxy", "proxy.go")
	var good string

	step(t, "rebuilt kube-proxy", func(t *testing.T) {
		appendTo(top, proxyMain, "\n// devkE2ESwapProxy proves the swapped kube-proxy is this build.\nfunc devkE2ESwapProxy() string { return \"swapped\" }\n")
		devk(t, "build", "kube-proxy", "--push")
		a := swapJSON(t, devk, "kube-proxy", 0, 1).Addons[0]
		if a.Component != "kube-proxy" || a.RolledBack || a.OldImage != installed || a.NewImage == installed || len(a.Checks) < 3 {
			t.Fatalf("swap result: %+v", a)
		}
		t.Logf("kube-proxy swap: rolled out in %s", a.RolledOut.Round(100*time.Millisecond))
		for _, c := range a.Checks {
			if !c.OK {
				t.Errorf("check %s failed: want %s, got %s", c.Check, c.Want, c.Got)
			}
		}
		good = a.NewImage
		img, ann := proxyImage(t)
		if img != good || ann["devk.dev/previous-image"] != installed {
			t.Fatalf("the DaemonSet names %s with annotations %v, want %s replacing %s", img, ann, good, installed)
		}
		devk(t, "digest", "verify", "kube-proxy")
		// `devk up` again keeps the swapped image.
		devk(t, "up")
		if img, _ := proxyImage(t); img != good {
			t.Fatalf("devk up put %s back over the swapped %s", img, good)
		}
	})

	step(t, "kube-proxy that cannot start is rolled back", func(t *testing.T) {
		swapBroken(t, devk, tree, env, proxyMain, "kube-proxy")
		if img, ann := proxyImage(t); img != good || ann["devk.dev/previous-image"] != installed {
			t.Fatalf("after the rollback the DaemonSet names %s (annotations %v), want %s", img, ann, good)
		}
	})

	step(t, "rollback", func(t *testing.T) {
		devk(t, "swap", "--rollback", "kube-proxy", "-v")
		if img, _ := proxyImage(t); img != installed {
			t.Fatalf("after --rollback the DaemonSet names %s, want %s", img, installed)
		}
	})
}
