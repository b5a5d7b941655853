package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
