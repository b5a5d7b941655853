package export

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// TestThrough: a node's part collected as the agent does (Node: its
// manifests, the kubelet's pod logs, the runtime's containers), sent as a
// tarball and written under <node>/ of an export through the cluster,
// with what could not be collected (no runtime here, no API server) in
// errors.txt; a tarball naming a path outside its node's directory is
// refused and writes nothing there.
func TestThrough(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	files := NodeFiles{ManifestsDir: filepath.Join(src, "manifests"), PodLogsDir: filepath.Join(src, "pods"), CRISocket: filepath.Join(src, "no-runtime.sock")}
	logDir := filepath.Join(files.PodLogsDir, "kube-system_kube-apiserver-cp1_uid1", "kube-apiserver")
	for dir, file := range map[string]string{files.ManifestsDir: "kube-apiserver.yaml", logDir: "0.log"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(file+" on cp1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	work := t.TempDir()
	tarball := filepath.Join(work, "export.tar.gz")
	r, err := Node(ctx, filepath.Join(work, "export"), tarball, files)
	if err != nil {
		t.Fatal(err)
	}
	if r.Files != 2 || r.ContainerLogs != 1 || r.Size == 0 || len(r.SHA256) != 64 || len(r.Missing) != 1 || !strings.HasPrefix(r.Missing[0], "containers.txt: ") {
		t.Fatalf("node result %+v", r)
	}
	dest := filepath.Join(t.TempDir(), "out")
	th := Through{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Server: "https://127.0.0.1:1", Name: "work", Nodes: []string{"cp1"},
		Fetch: func(_ context.Context, node string) (io.ReadCloser, []string, error) {
			f, err := os.Open(tarball)
			return f, r.Missing, err
		}}
	res, err := LogsThrough(ctx, th, Options{Dest: dest, DevkVersion: "devk test"}, phase.Options{Reporter: progress.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"cp1/manifests/kube-apiserver.yaml", "cp1/containers/kube-system_kube-apiserver-cp1_kube-apiserver_0.log", "README.txt", ErrorsFile, "devk-version.txt"} {
		if _, err := os.Stat(filepath.Join(dest, rel)); err != nil {
			t.Errorf("%s: %v", rel, err)
		}
	}
	if res.ContainerLogs != 1 || !slices.ContainsFunc(res.Missing, func(m string) bool { return strings.HasPrefix(m, "cp1/containers.txt: ") }) ||
		!slices.ContainsFunc(res.Missing, func(m string) bool { return strings.HasPrefix(m, ObjectsDir+": ") }) {
		t.Errorf("result %+v", res)
	}
	if data, _ := os.ReadFile(filepath.Join(dest, "README.txt")); !strings.Contains(string(data), "through the cluster") {
		t.Errorf("README.txt does not say how it was collected:\n%s", data)
	}

	// A tarball that leads out of its node's directory.
	bad := filepath.Join(t.TempDir(), "bad.tar.gz")
	f, err := os.Create(bad)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	body := "planted"
	tw.WriteHeader(&tar.Header{Name: "export/../../escaped", Typeflag: tar.TypeReg, Size: int64(len(body)), Mode: 0o600})
	tw.Write([]byte(body))
	tw.Close()
	zw.Close()
	f.Close()
	th.Fetch = func(context.Context, string) (io.ReadCloser, []string, error) {
		f, err := os.Open(bad)
		return f, nil, err
	}
	dest2 := filepath.Join(t.TempDir(), "out2")
	res, err = LogsThrough(ctx, th, Options{Dest: dest2}, phase.Options{Reporter: progress.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Missing, func(m string) bool { return strings.Contains(m, "outside its directory") }) {
		t.Errorf("a tarball leading out was not refused: %+v", res.Missing)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dest2), "escaped")); err == nil {
		t.Error("a file was written outside the export")
	}
}
