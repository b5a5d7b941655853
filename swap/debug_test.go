package swap

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/phase"
)

// debugManifest is a control-plane manifest as devk writes it: probes, a
// command with flags, a field corev1 does not know.
const debugManifest = `apiVersion: v1
kind: Pod
metadata:
  annotations:
    devk.dev/written: "2026-12-01T00:00:00Z"
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - /usr/local/bin/kube-scheduler
    - --bind-address=10.250.0.2
    - --leader-elect=true
    image: 127.0.0.1:5000/kube-scheduler@sha256:aaaa
    livenessProbe:
      httpGet:
        path: /healthz
        port: 10259
        scheme: HTTPS
    name: kube-scheduler
    readinessProbe:
      httpGet:
        path: /healthz
        port: 10259
        scheme: HTTPS
    startupProbe:
      httpGet:
        path: /healthz
        port: 10259
    unknownField: kept
  hostNetwork: true
`

// underDlv is a debugger command line for tests.
func underDlv(command []string) ([]string, error) {
	return append([]string{"/usr/local/bin/dlv", "exec", command[0], "--"}, command[1:]...), nil
}

// TestDebugManifestRoundTrip: a debug swap runs the container under the
// debugger with the killing probes gone and the readiness probe kept;
// stopping (or any later swap of a new image) puts the container back
// byte for byte, with the new image.
func TestDebugManifestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m := ManifestFor(filepath.Join(dir, "manifests"), "kube-scheduler")
	if err := os.MkdirAll(filepath.Dir(m.Path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.Path, []byte(debugManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	m.Debug = &Debugging{Command: underDlv}
	const debugImage = "127.0.0.1:5000/kube-scheduler@sha256:dddd"
	old, err := m.Begin("kube-scheduler", debugImage)
	if err != nil || old != "127.0.0.1:5000/kube-scheduler@sha256:aaaa" {
		t.Fatalf("Begin: %q, %v", old, err)
	}
	if err := m.WriteImage("kube-scheduler", debugImage); err != nil {
		t.Fatal(err)
	}
	pod, data, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != debugImage || !slices.Equal(c.Command[:4], []string{"/usr/local/bin/dlv", "exec", "/usr/local/bin/kube-scheduler", "--"}) || len(c.Command) != 6 {
		t.Errorf("debug container: image %s, command %q", c.Image, c.Command)
	}
	if c.LivenessProbe != nil || c.StartupProbe != nil || c.ReadinessProbe == nil {
		t.Errorf("probes: liveness %v, startup %v, readiness %v: want readiness alone", c.LivenessProbe, c.StartupProbe, c.ReadinessProbe)
	}
	if !bytes.Contains(data, []byte("unknownField: kept")) {
		t.Errorf("a field corev1 does not know was lost:\n%s", data)
	}
	orig, debugging, err := staticpod.DebugOriginal(pod)
	if err != nil || !debugging || orig.Image != "127.0.0.1:5000/kube-scheduler@sha256:aaaa" || orig.LivenessProbe == nil {
		t.Fatalf("DebugOriginal: %+v, %v, %v", orig, debugging, err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}

	// Stop: back to the container the annotation kept.
	m.Debug = &Debugging{Stop: true}
	if _, err := m.Begin("kube-scheduler", orig.Image); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteImage("kube-scheduler", orig.Image); err != nil {
		t.Fatal(err)
	}
	_, back, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := containerYAML(t, back), containerYAML(t, []byte(debugManifest)); got != want {
		t.Errorf("after stop the container is\n%s\nwant, byte for byte,\n%s", got, want)
	}
	if strings.Contains(string(back), staticpod.DebugAnnotation) {
		t.Errorf("the annotation stayed:\n%s", back)
	}

	// A later debug swap, then a plain swap to a new image: also back.
	for _, d := range []*Debugging{{Command: underDlv}, nil} {
		m.Debug = d
		if _, err := m.Begin("kube-scheduler", debugImage); err != nil {
			t.Fatal(err)
		}
		if err := m.WriteImage("kube-scheduler", debugImage); err != nil {
			t.Fatal(err)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	_, plain, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(containerYAML(t, []byte(debugManifest)), "sha256:aaaa", "sha256:dddd", 1)
	if got := containerYAML(t, plain); got != want {
		t.Errorf("a plain swap after debugging wrote\n%s\nwant\n%s", got, want)
	}

	// A rollback restores the backup as it was: the debug manifest.
	if _, err := m.Restore("kube-scheduler", nil); err != nil {
		t.Fatal(err)
	}
	pod, _, err = m.Read()
	if err != nil {
		t.Fatal(err)
	}
	if _, debugging, _ := staticpod.DebugOriginal(pod); !debugging {
		t.Error("a rollback after a plain swap did not restore the debug manifest it replaced")
	}
}

// TestDebugNeedsCommand: a container without a command cannot run under
// the debugger; the manifest is left alone.
func TestDebugNeedsCommand(t *testing.T) {
	data := []byte(strings.Replace(debugManifest, "  - command:\n    - /usr/local/bin/kube-scheduler\n    - --bind-address=10.250.0.2\n    - --leader-elect=true\n    image:", "  - image:", 1))
	pod, err := staticpod.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = WithImage(data, pod, "kube-scheduler", "x@sha256:dddd", &Debugging{Command: underDlv}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "no command") {
		t.Fatalf("got %v, want the missing command named", err)
	}
}

// containerYAML is the manifest's first container re-marshalled, for
// comparisons that ignore the annotations.
func containerYAML(t *testing.T, manifest []byte) string {
	t.Helper()
	var obj struct {
		Spec struct {
			Containers []map[string]any `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(manifest, &obj); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(obj.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestDebugStopAtStart: a component left waiting before main serves
// nothing, so its debug swap checks only what the node runs (manifest
// and CRI), not its health (which fails here: the probe's port is
// closed) nor its mirror pod; the container runs the debug command.
func TestDebugStopAtStart(t *testing.T) {
	fx := newSwapFixture(t)
	data, err := os.ReadFile(fx.m.Path)
	if err != nil {
		t.Fatal(err)
	}
	closed := strconv.Itoa(testutil.FreePort(t))
	data = regexp.MustCompile(`port: \d+`).ReplaceAll(data, []byte("port: "+closed))
	if err := os.WriteFile(fx.m.Path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	d := &Debugging{Image: fx.pushed, Command: underDlv, StopAtStart: true}
	rep, err := fx.run(t, context.Background(), Options{Components: []string{"apiserver"}, Debug: d}, phase.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.StaticPods[0]
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
	}
	if bad := failedChecks(r); len(bad) > 0 || !slices.Equal(names, []string{digest.CheckManifest, digest.CheckCRI}) {
		t.Fatalf("checks %q, failed %v: want the manifest's and CRI's alone, passing", names, bad)
	}
	if got := fx.node.running("kube-apiserver"); got != fx.pushed {
		t.Fatalf("the node runs %q, want the debug image %s", got, fx.pushed)
	}
	pod, _, err := fx.m.Read()
	if err != nil {
		t.Fatal(err)
	}
	if c := pod.Spec.Containers[0]; c.Command[0] != "/usr/local/bin/dlv" {
		t.Fatalf("command %q: not under the debugger", c.Command)
	}
}
