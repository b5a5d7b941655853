package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/progress"
)

// fakeProc is a /proc of the processes given (pid: comm, its net
// namespace, executable and cgroup), PID 1 being init, and self in
// network namespace "net:[1]". Only the files FindKubelet reads.
func fakeProc(t *testing.T, init string, systemdBooted bool, procs map[int][4]string) string {
	t.Helper()
	proc := t.TempDir()
	write := func(pid, name, data string) {
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(pid, name, target string) {
		if err := os.Symlink(target, filepath.Join(proc, pid, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("self", "comm", "devk\n")
	link("self", "ns/net", "net:[1]")
	write("1", "comm", init+"\n")
	if systemdBooted {
		if err := os.MkdirAll(filepath.Join(proc, "1", "root", "run", "systemd", "system"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for pid, p := range procs {
		id := strconv.Itoa(pid)
		write(id, "comm", p[0]+"\n")
		link(id, "ns/net", p[1])
		link(id, "exe", p[2])
		write(id, "cgroup", p[3])
	}
	return proc
}

// TestFindKubelet: the kubelet of this node's network namespace is
// found among the host's processes (another node's is not), with its
// executable and its systemd unit; devk refuses, saying what it found,
// unless a booted systemd runs it in a unit.
func TestFindKubelet(t *testing.T) {
	procs := map[int][4]string{
		400: {"kubelet", "net:[1]", "/usr/bin/kubelet", "0::/system.slice/kubelet.service\n"},
		500: {"kubelet", "net:[2]", "/usr/local/bin/kubelet", "0::/other\n"},
		600: {"containerd", "net:[1]", "/usr/bin/containerd", "0::/system.slice/containerd.service\n"},
	}
	k, err := FindKubelet(fakeProc(t, "systemd", true, procs))
	if err != nil {
		t.Fatal(err)
	}
	if k.PID != 400 || k.Exe != "/usr/bin/kubelet" || k.Unit != "kubelet.service" || !k.Systemd {
		t.Fatalf("found %+v, want pid 400 in kubelet.service under systemd", k)
	}
	if err := k.Refusal("cp1"); err != nil {
		t.Fatalf("a systemd kubelet refused: %v", err)
	}

	// devk's own nodes: a cgroup of the node, PID 1 not systemd.
	procs[400] = [4]string{"kubelet", "net:[1]", "/tmp/h/clusters/c/bin/kubelet (deleted)", "0::/devk-c_cp1/kubelet\n"}
	k, err = FindKubelet(fakeProc(t, "process_api", false, procs))
	if err != nil {
		t.Fatal(err)
	}
	err = k.Refusal("cp1")
	for _, want := range []string{"(pid 400)", "cgroup /devk-c_cp1/kubelet", "not in a systemd unit", "PID 1 is process_api", "devk swap kubelet --name"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %v does not say %q", err, want)
		}
	}
	if k.Exe != "/tmp/h/clusters/c/bin/kubelet" {
		t.Errorf("exe %q: a replaced binary's \" (deleted)\" is not part of its path", k.Exe)
	}
	// A unit, but no booted systemd (a container's init).
	procs[400] = [4]string{"kubelet", "net:[1]", "/usr/bin/kubelet", "0::/system.slice/kubelet.service\n"}
	k, _ = FindKubelet(fakeProc(t, "tini", false, procs))
	if err := k.Refusal("cp1"); err == nil || !strings.Contains(err.Error(), "PID 1 is tini, not a booted systemd") {
		t.Errorf("refusal without systemd: %v", err)
	}
	// None in this node.
	delete(procs, 400)
	if _, err := FindKubelet(fakeProc(t, "systemd", true, procs)); err == nil || !strings.Contains(err.Error(), "no kubelet process") {
		t.Errorf("no kubelet: %v", err)
	}
}

func TestCgroupUnit(t *testing.T) {
	for in, want := range map[string][2]string{
		"0::/system.slice/kubelet.service\n":                        {"/system.slice/kubelet.service", "kubelet.service"},
		"12:cpu:/x\n1:name=systemd:/system.slice/kubelet.service\n": {"/system.slice/kubelet.service", "kubelet.service"},
		"0::/kubepods.slice/kubelet\n":                              {"/kubepods.slice/kubelet", ""},
		"0::/\n":                                                    {"/", ""},
	} {
		if g, u := cgroupUnit(in); g != want[0] || u != want[1] {
			t.Errorf("cgroupUnit(%q) = %q, %q; want %q", in, g, u, want)
		}
	}
}

// TestKubeletTaskValidate: a swap names the binary it is sent; every
// task names the kubelet's health endpoint.
func TestKubeletTaskValidate(t *testing.T) {
	sum := strings.Repeat("a", 64)
	for _, bad := range []*KubeletTask{nil, {Healthz: "http://127.0.0.1:10248/healthz"}, {Size: 1, SHA256: sum, Healthz: "127.0.0.1:10248"}} {
		if err := (Task{Kind: KindKubelet, Kubelet: bad}).Validate(); err == nil {
			t.Errorf("%+v: valid", bad)
		}
	}
	good := Task{Kind: KindKubelet, Kubelet: &KubeletTask{Rollback: true, Healthz: "http://127.0.0.1:10248/healthz"}}
	if err := good.Validate(); err != nil || good.Stdin() || !good.HostPID() || !good.Privileged() || !good.HostNetwork() {
		t.Errorf("a rollback: %v, stdin %v", err, good.Stdin())
	}
}

// TestReceive: the binary is taken only whole and with its sha256.
func TestReceive(t *testing.T) {
	dir := t.TempDir()
	data := []byte("#!/bin/sh\necho kubelet\n")
	h := sha256.Sum256(data)
	sum := hex.EncodeToString(h[:])
	if got, err := receive(bytes.NewReader(data), dir, int64(len(data)), sum); err != nil || got != filepath.Join(dir, "kubelet") {
		t.Fatal(got, err)
	}
	if _, err := receive(bytes.NewReader(data[:5]), dir, int64(len(data)), sum); err == nil {
		t.Error("a short binary was taken")
	}
	if _, err := receive(bytes.NewReader(data), dir, int64(len(data)), strings.Repeat("0", 64)); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("a wrong sum: %v", err)
	}
}

// fakeHost is a host whose kubelet (pid 400, kubelet.service) and
// systemd PID 1 have roots of their own, holding fakehost built as the
// old kubelet and as systemctl; new is fakehost built as the new
// kubelet.
type fakeHost struct {
	proc, node, init string
	old, new         []byte
}

func newFakeHost(t *testing.T) fakeHost {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("chroot needs root (CI runs the tests as root)")
	}
	build := func(version string) []byte {
		out := filepath.Join(t.TempDir(), "fakehost")
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+version, "-o", out, "./testdata/fakehost")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build fakehost: %v\n%s", err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	h := fakeHost{node: t.TempDir(), init: t.TempDir(), old: build("v1.34.4"), new: build("v1.35.0-devk")}
	put := func(path string, data []byte) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	put(filepath.Join(h.node, "usr/bin/kubelet"), h.old)
	put(filepath.Join(h.init, "usr/bin/systemctl"), build("systemctl"))
	h.proc = fakeProc(t, "systemd", false, map[int][4]string{400: {"kubelet", "net:[1]", "/usr/bin/kubelet", "0::/system.slice/kubelet.service\n"}})
	for pid, root := range map[string]string{"400": h.node, "1": h.init} {
		if err := os.Symlink(root, filepath.Join(h.proc, pid, "root")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(h.init, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h fakeHost) kubelet(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(h.node, "usr/bin/kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (h fakeHost) restarts(t *testing.T) []string {
	data, _ := os.ReadFile(filepath.Join(h.init, "systemctl.log"))
	return strings.Fields(strings.ReplaceAll(string(data), "restart kubelet.service", "restart"))
}

// healthz answers 200, but 500 while the new kubelet is installed when
// newSick.
func (h fakeHost) healthz(t *testing.T, newSick bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if newSick && bytes.Equal(h.kubelet(t), h.new) {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/healthz"
}

// TestRunKubelet swaps a kubelet where systemd runs it, on a fake host
// (this machine's PID 1 is not systemd): the real install (bytes
// compared, PATH.prev kept), the new binary's --version run chrooted in
// the kubelet's root, the host's systemctl run chrooted in PID 1's root,
// the health waited for; a rollback puts the old one back; a new kubelet
// that is not healthy is replaced by the old one, restarted again.
func TestRunKubelet(t *testing.T) {
	h := newFakeHost(t)
	ctx := context.Background()
	sum := sha256.Sum256(h.new)
	task := KubeletTask{NodeName: "n1", Size: int64(len(h.new)), SHA256: hex.EncodeToString(sum[:]), Healthz: h.healthz(t, false), Timeout: 5 * time.Second}
	lw := &lineWriter{Reporter: progress.Discard(), w: io.Discard}
	r, err := runKubelet(ctx, task, h.proc, t.TempDir(), bytes.NewReader(h.new), lw)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Changed || r.Version != "v1.35.0-devk" || r.Unit != "kubelet.service" || r.PID != 400 || r.Dest != "/usr/bin/kubelet" || r.Prev != "/usr/bin/kubelet.prev" || r.RestartedAt.IsZero() || r.RolledBack {
		t.Errorf("swap: %+v", r)
	}
	if !bytes.Equal(h.kubelet(t), h.new) || len(h.restarts(t)) != 1 {
		t.Errorf("after the swap: new kubelet installed %v, restarts %v", bytes.Equal(h.kubelet(t), h.new), h.restarts(t))
	}
	prev, _ := os.ReadFile(filepath.Join(h.node, "usr/bin/kubelet.prev"))
	if !bytes.Equal(prev, h.old) {
		t.Error("the old kubelet is not kept as kubelet.prev")
	}

	rb := KubeletTask{NodeName: "n1", Rollback: true, Healthz: task.Healthz, Timeout: task.Timeout}
	if r, err = runKubelet(ctx, rb, h.proc, t.TempDir(), nil, lw); err != nil || !r.Changed || r.Version != "v1.34.4" {
		t.Fatalf("rollback: %+v, %v", r, err)
	}
	if !bytes.Equal(h.kubelet(t), h.old) || len(h.restarts(t)) != 2 {
		t.Errorf("after the rollback: old kubelet back %v, restarts %v", bytes.Equal(h.kubelet(t), h.old), h.restarts(t))
	}

	task.Healthz, task.Timeout = h.healthz(t, true), time.Second
	r, err = runKubelet(ctx, task, h.proc, t.TempDir(), bytes.NewReader(h.new), lw)
	if err == nil || !strings.Contains(err.Error(), "ROLLED BACK") || !r.RolledBack {
		t.Fatalf("a sick new kubelet: %+v, %v", r, err)
	}
	if !bytes.Equal(h.kubelet(t), h.old) || len(h.restarts(t)) != 4 {
		t.Errorf("after a sick kubelet: old kubelet back %v, restarts %v (want 4: new, old)", bytes.Equal(h.kubelet(t), h.old), h.restarts(t))
	}
}
