package export

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/phase"
)

// Fixture secrets that must never reach an export.
const (
	fixtureKey   = "-----BEGIN PRIVATE KEY-----\nfixture-key-material\n-----END PRIVATE KEY-----\n"
	fixtureToken = "fixture-bearer-token-0123456789"
)

// exportFixture is a cluster directory as `devk up` leaves it, minus the
// processes: logs of the supervised processes and of the containers,
// manifests, the kubelet's config, cluster.json with phase times, a
// private key and kubeconfigs. Its API server address is a loopback port
// nobody listens on and its CRI socket does not exist: a cluster whose
// control plane is down. (A real API server for the objects part needs
// etcd, the apiserver's certificates and a minute of start; the e2e
// suite exports a real cluster.)
func exportFixture(t *testing.T) (home string, cp layout.ClusterFiles, cfg layout.Config) {
	t.Helper()
	home = t.TempDir()
	cp = layout.HomeFiles(home).Cluster("fix")
	p := cp.FirstNode()
	cfg = layout.NewConfig("fix")
	if err := cfg.PlaceAmong(nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := net.InterfaceByName(cfg.Network.HostBridge); err == nil {
		t.Skipf("a cluster called fix runs here: its bridge %s exists", cfg.Network.HostBridge)
	}
	cfg.Ports.APIServer = testutil.FreePort(t)
	cfg.CRISocket = p.ContainerdSocket()
	cfg.KubeVersion = "v1.34.4"
	cfg.Created = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg.LastRun = []layout.PhaseTiming{{Phase: "preflight", Seconds: 0.012}, {Phase: "control-plane/apiserver", Seconds: 1.5},
		{Phase: "addon/coredns", Skipped: "disabled"}, {Phase: "wait-control-plane", Seconds: 4.25, Failed: true}}
	data, err := layout.EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		cp.ConfigFile():                            string(data),
		p.LogFile("kubelet"):                       "I0101 kubelet started\n",
		p.LogFile("kubelet") + ".2":                "I0101 kubelet oldest generation\n",
		p.LogFile("kubelet") + ".1":                "I0101 kubelet newest generation\n",
		p.LogFile("containerd"):                    "level=info msg=\"containerd started\"\n",
		p.LogFile("forward-5000"):                  "forwarding\n",
		layout.HomeFiles(home).LogFile("registry"): "registry listening\n",
		p.KubeletConfig():                          "kind: KubeletConfiguration\n",
		p.ManifestPath("kube-apiserver"):           "kind: Pod # apiserver\n",
		p.ManifestPath("etcd"):                     "kind: Pod # etcd\n",
		p.ManifestPath("kube-apiserver") + ".prev": "kind: Pod # previous apiserver\n",
		filepath.Join(p.PodLogs(), "kube-system_kube-apiserver-fix-control-plane_0a1b", "kube-apiserver", "0.log"): "2025-01-01T00:00:00Z stderr F apiserver attempt 0\n",
		filepath.Join(p.PodLogs(), "kube-system_kube-apiserver-fix-control-plane_0a1b", "kube-apiserver", "1.log"): "2025-01-01T00:01:00Z stderr F apiserver attempt 1\n",
		filepath.Join(p.PodLogs(), "kube-system_coredns-7c9f-x2v4q_9f8e", "coredns", "0.log"):                      "coredns now\n",
		// The apiserver's pod again under a new UID (its manifest changed
		// and the old instance's logs are still there).
		filepath.Join(p.PodLogs(), "kube-system_kube-apiserver-fix-control-plane_ffff", "kube-apiserver", "0.log"): "2025-01-01T00:02:00Z stderr F new apiserver\n",
		filepath.Join(p.PodLogs(), "kube-system_coredns-7c9f-x2v4q_9f8e", "coredns", "0.log.20250101-000000"):      "coredns rotated\n",
		filepath.Join(p.PKI(), "ca.key"): fixtureKey,
		filepath.Join(p.PKI(), "ca.crt"): "-----BEGIN CERTIFICATE-----\n",
		p.Kubeconfig("admin"):            "token: " + fixtureToken + "\n",
		p.Kubeconfig("super-admin"): `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + cfg.APIServerURL() + `", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: ` + fixtureToken + `}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`,
	}
	for path, body := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return home, cp, cfg
}

// readTree is every file under dir: relative path -> content, and
// relative path -> mode.
func readTree(t *testing.T, dir string) (map[string]string, map[string]fs.FileMode) {
	t.Helper()
	files, modes := map[string]string{}, map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		modes[rel] = fi.Mode()
		if d.Type().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files[rel] = string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, modes
}

// readTarball is every regular file of a gzipped tarball, and every
// entry's mode.
func readTarball(t *testing.T, path string) (map[string]string, map[string]fs.FileMode) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files, modes := map[string]string{}, map[string]fs.FileMode{}
	testutil.EachTarEntry(t, zr, func(hdr *tar.Header, body io.Reader) {
		name := strings.TrimSuffix(hdr.Name, "/")
		modes[name] = hdr.FileInfo().Mode()
		if hdr.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(body)
			if err != nil {
				t.Fatal(err)
			}
			files[name] = string(data)
		}
	})
	return files, modes
}

// TestLogsFixture exports the fixture cluster into a directory and
// into a tarball: the logs, manifests and devk's view are there; the
// status and the objects are reported missing, since the cluster's
// bridge is gone (its node address would leave by the default route),
// and so are the runtime's containers (nothing answers); no key,
// certificate, kubeconfig or token is exported.
func TestLogsFixture(t *testing.T) {
	home, p, cfg := exportFixture(t)
	out := t.TempDir()
	node := cfg.FirstNode().Name
	want := map[string]string{
		"cluster.json":                               mustRead(t, p.ConfigFile()),
		"devk-version.txt":                           "devk test\n",
		"registry.log":                               "registry listening\n",
		node + "/kubelet.log":                        "I0101 kubelet oldest generation\nI0101 kubelet newest generation\nI0101 kubelet started\n",
		node + "/containerd.log":                     "level=info msg=\"containerd started\"\n",
		node + "/forward-5000.log":                   "forwarding\n",
		node + "/kubelet-config.yaml":                "kind: KubeletConfiguration\n",
		node + "/kubernetes-version.txt":             "v1.34.4\n",
		node + "/manifests/kube-apiserver.yaml":      "kind: Pod # apiserver\n",
		node + "/manifests/kube-apiserver.yaml.prev": "kind: Pod # previous apiserver\n",
		node + "/manifests/etcd.yaml":                "kind: Pod # etcd\n",
		node + "/containers/kube-system_kube-apiserver-fix-control-plane_kube-apiserver_0.log":      "2025-01-01T00:00:00Z stderr F apiserver attempt 0\n",
		node + "/containers/kube-system_kube-apiserver-fix-control-plane_kube-apiserver_1.log":      "2025-01-01T00:01:00Z stderr F apiserver attempt 1\n",
		node + "/containers/kube-system_coredns-7c9f-x2v4q_coredns_0.log":                           "coredns now\n",
		node + "/containers/kube-system_kube-apiserver-fix-control-plane_ffff_kube-apiserver_0.log": "2025-01-01T00:02:00Z stderr F new apiserver\n",
		node + "/containers/kube-system_coredns-7c9f-x2v4q_coredns_0.log.20250101-000000":           "coredns rotated\n",
	}
	wantMissing := []string{
		node + "/containers.txt: CRI runtime at " + cfg.CRISocket + " does not answer",
		"status.json: the cluster's bridge " + cfg.Network.HostBridge + " is gone",
		"objects: the cluster's bridge " + cfg.Network.HostBridge + " is gone",
	}

	for _, tc := range []struct {
		name, dest string
		tar        bool
	}{
		{"directory", filepath.Join(out, "new", "logs"), false},
		{"tarball by --tar", filepath.Join(out, "logs.tgz"), true},
		{"tarball by name", filepath.Join(out, "logs"+TarSuffix), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Logs(context.Background(), Options{Options: cluster.Options{Name: "fix", Home: home}, Dest: tc.dest, Tar: tc.tar, DevkVersion: "devk test"}, phase.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var files map[string]string
			var modes map[string]fs.FileMode
			if res.Tar {
				files, modes = readTarball(t, res.Path)
				if fi, err := os.Stat(res.Path); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("the tarball: %v, %v; want mode 0600", fi.Mode(), err)
				}
				files, modes = underTop(t, files, "logs"), underTop(t, modes, "logs")
				if left, _ := filepath.Glob(filepath.Join(out, ".*")); len(left) > 0 {
					t.Errorf("staging left behind: %v", left)
				}
			} else {
				if res.Path != tc.dest {
					t.Errorf("path %s, want %s", res.Path, tc.dest)
				}
				files, modes = readTree(t, res.Path)
			}
			if res.Tar != (tc.tar || strings.HasSuffix(tc.dest, TarSuffix)) {
				t.Errorf("Tar = %v", res.Tar)
			}
			for rel, body := range want {
				if got, ok := files[rel]; !ok {
					t.Errorf("%s is missing", rel)
				} else if got != body {
					t.Errorf("%s = %q, want %q", rel, got, body)
				}
			}
			timings := files["timings.txt"]
			for _, line := range []string{"preflight", "0.012s", "control-plane/apiserver", "1.500s", "addon/coredns", "skipped (disabled)", "wait-control-plane", "4.250s", "FAILED"} {
				if !strings.Contains(timings, line) {
					t.Errorf("timings.txt lacks %q:\n%s", line, timings)
				}
			}
			if !strings.Contains(files["README.txt"], "Secrets are redacted") {
				t.Errorf("README.txt:\n%s", files["README.txt"])
			}
			errs := files[ErrorsFile]
			t.Logf("errors.txt:\n%s", errs)
			for _, m := range wantMissing {
				if !strings.Contains(errs, m) {
					t.Errorf("errors.txt lacks %q:\n%s", m, errs)
				}
			}
			if len(res.Missing) != strings.Count(errs, "\n") || len(res.Missing) != len(wantMissing) {
				t.Errorf("Missing = %q; errors.txt:\n%s", res.Missing, errs)
			}
			for rel := range files {
				if strings.Contains(rel, ".log.") && !strings.Contains(rel, "/containers/") {
					t.Errorf("a rotated generation exported apart: %s", rel)
				}
				if strings.HasPrefix(rel, "objects/") {
					t.Errorf("objects exported with no API server: %s", rel)
				}
			}
			if res.ContainerLogs != 5 || res.Objects != 0 || res.Files != len(files) {
				t.Errorf("counts: %+v; %d files", res, len(files))
			}
			// Nothing secret, and nothing anyone else may read.
			for rel, body := range files {
				if strings.HasSuffix(rel, ".key") || strings.HasSuffix(rel, ".crt") || strings.HasSuffix(rel, ".conf") {
					t.Errorf("%s exported", rel)
				}
				if strings.Contains(body, "fixture-key-material") || strings.Contains(body, fixtureToken) {
					t.Errorf("%s holds a key or token", rel)
				}
			}
			for rel, m := range modes {
				if (m.IsDir() && m.Perm() != 0o700) || (m.IsRegular() && m.Perm() != 0o600) {
					t.Errorf("%s has mode %v, want 0700 dirs and 0600 files", rel, m)
				}
			}
		})
	}

	t.Run("refuses a destination in use", func(t *testing.T) {
		used := filepath.Join(out, "used")
		os.MkdirAll(used, 0o755)
		os.WriteFile(filepath.Join(used, "x"), nil, 0o644)
		tarball := filepath.Join(out, "used.tar.gz")
		os.WriteFile(tarball, []byte("old"), 0o644)
		for dest, want := range map[string]string{used: "is not empty: name a new directory", tarball: "exists: name a new file"} {
			if _, err := Logs(context.Background(), Options{Options: cluster.Options{Name: "fix", Home: home}, Dest: dest}, phase.Options{}); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("export to %s: %v, want %q", dest, err, want)
			}
		}
		if b, _ := os.ReadFile(tarball); string(b) != "old" {
			t.Errorf("the tarball in the way was overwritten")
		}
	})

	t.Run("no such cluster", func(t *testing.T) {
		_, err := Logs(context.Background(), Options{Options: cluster.Options{Name: "other", Home: home}, Dest: filepath.Join(out, "x")}, phase.Options{})
		if !errors.Is(err, layout.ErrNoCluster) {
			t.Fatalf("err = %v, want ErrNoCluster", err)
		}
		if _, err := os.Stat(filepath.Join(out, "x")); err == nil {
			t.Errorf("an export of no cluster made its directory")
		}
	})
}

// underTop is m with the tarball's top directory top taken off its keys;
// every entry must be under it.
func underTop[V any](t *testing.T, m map[string]V, top string) map[string]V {
	t.Helper()
	out := map[string]V{}
	for k, v := range m {
		if k == top {
			continue
		}
		rest, ok := strings.CutPrefix(k, top+"/")
		if !ok {
			t.Errorf("tarball entry %s is not under %s/", k, top)
		}
		out[rest] = v
	}
	return out
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestDest(t *testing.T) {
	now := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		name, dest string
		tar        bool
		want       string
		wantTar    bool
	}{
		{"default directory", "", false, "devk-logs-dev-20250304-050607", false},
		{"default tarball", "", true, "devk-logs-dev-20250304-050607.tar.gz", true},
		{"named directory", "out", false, "out", false},
		{"named .tar.gz", "out.tar.gz", false, "out.tar.gz", true},
		{"named .tgz", "x/out.tgz", false, "x/out.tgz", true},
		{"--tar with any name", "out", true, "out", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, gotTar := Dest(tc.dest, tc.tar, "dev", now)
			if got != tc.want || gotTar != tc.wantTar {
				t.Fatalf("Dest(%q, %v) = %q, %v; want %q, %v", tc.dest, tc.tar, got, gotTar, tc.want, tc.wantTar)
			}
		})
	}
}

func TestObject(t *testing.T) {
	secret := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	obj := func(kind string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": kind,
			"metadata": map[string]any{"name": "x", "namespace": "kube-system",
				"managedFields": []any{map[string]any{"manager": "kubectl"}},
				"annotations":   map[string]any{lastAppliedAnnotation: `{"data":{"token":"c2VjcmV0"}}`, "keep": "me"}},
			"data":       map[string]any{"token": "c2VjcmV0", "ca.crt": "Y2E="},
			"stringData": map[string]any{"password": "hunter2"},
			"type":       "bootstrap.kubernetes.io/token",
		}}
	}
	got := Object(secret, obj("Secret"))
	data, _ := json.Marshal(got.Object)
	for _, leak := range []string{"c2VjcmV0", "hunter2", "Y2E=", "managedFields"} {
		if strings.Contains(string(data), leak) {
			t.Errorf("exported Secret holds %q: %s", leak, data)
		}
	}
	for _, keep := range []string{`"token":"REDACTED"`, `"ca.crt":"REDACTED"`, `"password":"REDACTED"`, `"keep":"me"`, `"type":"bootstrap.kubernetes.io/token"`} {
		if !strings.Contains(string(data), keep) {
			t.Errorf("exported Secret lacks %s: %s", keep, data)
		}
	}
	// A ConfigMap (or a Secret-named resource of another group) keeps its data.
	for _, gvr := range []schema.GroupVersionResource{{Version: "v1", Resource: "configmaps"}, {Group: "example.com", Version: "v1", Resource: "secrets"}} {
		got := Object(gvr, obj("ConfigMap"))
		data, _ := json.Marshal(got.Object)
		if !strings.Contains(string(data), "c2VjcmV0") || strings.Contains(string(data), "managedFields") {
			t.Errorf("exported %s: %s", gvr, data)
		}
	}
}

// TestDestinationAttack: another user of the machine makes the
// (predictable) destination first, or makes it a symlink, or plants
// links in it: the export refuses the destination with what to do, and
// nothing is written outside it, even through a link planted after the
// checks (every write goes through the os.Root).
func TestDestinationAttack(t *testing.T) {
	home, _, _ := exportFixture(t)
	out := t.TempDir()
	// outside is where the attacker's links point: it must stay empty.
	outside := filepath.Join(out, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	export := func(dest string) error {
		_, err := Logs(context.Background(), Options{Options: cluster.Options{Name: "fix", Home: home}, Dest: dest}, phase.Options{})
		return err
	}
	checkOutside := func(t *testing.T) {
		t.Helper()
		if ents, _ := os.ReadDir(outside); len(ents) > 0 {
			t.Fatalf("the export wrote outside its destination: %v", ents)
		}
	}

	t.Run("a symlink as the destination", func(t *testing.T) {
		dest := filepath.Join(out, "link")
		if err := os.Symlink(outside, dest); err != nil {
			t.Fatal(err)
		}
		if err := export(dest); err == nil || !strings.Contains(err.Error(), "exists and is not a directory (a symlink is not taken either): name a new directory") {
			t.Errorf("export to a symlink: %v", err)
		}
		checkOutside(t)
	})
	t.Run("a directory other users may write to", func(t *testing.T) {
		dest := filepath.Join(out, "open")
		if err := os.Mkdir(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dest, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := export(dest); err == nil || !strings.Contains(err.Error(), "may be written by other users (mode -rwxrwxrwx), who could plant links in it for devk to write through: name a new directory, or `chmod go-w") {
			t.Errorf("export to a 0777 directory: %v", err)
		}
		if ents, _ := os.ReadDir(dest); len(ents) > 0 {
			t.Errorf("a refused destination got %v", ents)
		}
	})
	t.Run("another user's directory", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("chown to another user needs root")
		}
		dest := filepath.Join(out, "theirs")
		if err := os.Mkdir(dest, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dest, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := export(dest); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534, not to devk's user (uid 0)") || !strings.Contains(err.Error(), "rmdir "+dest) {
			t.Errorf("export to uid 65534's directory: %v", err)
		}
		if ents, _ := os.ReadDir(dest); len(ents) > 0 {
			t.Errorf("a refused destination got %v", ents)
		}
	})
	t.Run("links planted inside", func(t *testing.T) {
		// The checks passed (or the attacker won a race with them): a
		// node's directory and a file are links out by the time the
		// exporter writes.
		dest := filepath.Join(out, "raced")
		dir, err := openExportDir(dest)
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		for name, target := range map[string]string{"fix-control-plane": outside, "cluster.json": filepath.Join(outside, "cluster.json"), "deep": "../outside"} {
			if err := os.Symlink(target, filepath.Join(dest, name)); err != nil {
				t.Fatal(err)
			}
		}
		e := &exporter{dir: dir, res: &Result{}}
		e.write("fix-control-plane/kubelet.log", []byte("pod-controlled line\n"))
		if e.err == nil {
			t.Error("a write through a directory link out of the export succeeded")
		}
		for _, rel := range []string{"cluster.json", "deep/containers/x.log"} {
			e.err = nil
			e.write(rel, []byte("pod-controlled line\n"))
			if e.err == nil {
				t.Errorf("a write of %s through a link out of the export succeeded", rel)
			}
		}
		checkOutside(t)
	})
	t.Run("an empty directory of devk's user is taken", func(t *testing.T) {
		dest := filepath.Join(out, "mine")
		if err := os.Mkdir(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := export(dest); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dest, "cluster.json")); err != nil {
			t.Error(err)
		}
	})
}

// TestLogsPlan: a dry run of a tarball export plans its phases and
// writes nothing, neither the tarball nor its staging directory.
func TestLogsPlan(t *testing.T) {
	home, _, _ := exportFixture(t)
	out := t.TempDir()
	var plan strings.Builder
	dest := filepath.Join(out, "logs.tar.gz")
	if _, err := Logs(context.Background(), Options{Options: cluster.Options{Name: "fix", Home: home}, Dest: dest}, phase.Options{DryRun: true, PlanOut: &plan}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"logs", "objects", "readme", "tarball", dest} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("the plan does not name %s:\n%s", want, plan.String())
		}
	}
	if left, _ := os.ReadDir(out); len(left) > 0 {
		t.Errorf("a dry run wrote %v", left)
	}
}
