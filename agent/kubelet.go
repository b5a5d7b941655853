package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devk/devk/swap/binary"
)

// KindKubelet swaps the node's kubelet binary where systemd runs it: the
// agent finds the node's kubelet process (hostPID), refuses unless it runs
// in a systemd unit under a systemd PID 1 (saying what it found),
// installs the new binary (sent on its stdin) over the one the process
// runs, as `devk swap kubelet` does (binary.Install: atomic, PATH.prev
// kept, `--version` checked, run in the kubelet's root), restarts the
// unit through the host's systemctl and waits for the kubelet's /healthz;
// one that does not come back gets the old binary again, restarted. The
// agent's own container is not stopped by a kubelet restart.
const KindKubelet Kind = "kubelet"

// KubeletTask is one node's kubelet swap (or rollback).
type KubeletTask struct {
	NodeName string `json:"nodeName"`
	// Rollback puts PATH.prev back; otherwise the client sends Size
	// bytes of the new binary, whose sha256 is SHA256, on stdin.
	Rollback bool   `json:"rollback,omitempty"`
	Size     int64  `json:"size,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	// Healthz is the kubelet's health endpoint, on the node's network
	// (its configz's healthzBindAddress and healthzPort).
	Healthz string `json:"healthz"`
	// Timeout bounds the wait for the restarted kubelet's health.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// KubeletResult is what a kubelet task did.
type KubeletResult struct {
	// PID is the kubelet process it found; Unit the systemd unit it
	// runs in; Binary its executable as the process sees it.
	PID    int    `json:"pid"`
	Unit   string `json:"unit"`
	Binary string `json:"binary"`
	binary.Result
	// RestartedAt is when the agent restarted the unit (the Node's lease
	// renewed after it is the new kubelet's).
	RestartedAt time.Time `json:"restartedAt,omitzero"`
	// RolledBack says the new kubelet did not come back healthy and the
	// old one is running again.
	RolledBack bool `json:"rolledBack,omitempty"`
}

// DefaultKubeletWait is how long a restarted kubelet may take to be
// healthy when the task names no Timeout.
const DefaultKubeletWait = 2 * time.Minute

// Wait is how long the task waits for the restarted kubelet.
func (k *KubeletTask) Wait() time.Duration {
	if k.Timeout > 0 {
		return k.Timeout
	}
	return DefaultKubeletWait
}

// procRoot is where the agent reads the host's processes (hostPID).
const procRoot = "/proc"

func (k *KubeletTask) validate() error {
	switch {
	case k == nil:
		return errors.New("agent task kubelet: no node")
	case !k.Rollback && (k.Size <= 0 || len(k.SHA256) != 64):
		return errors.New("agent task kubelet: no binary (size and sha256) to install")
	case !strings.HasPrefix(k.Healthz, "http://"):
		return fmt.Errorf("agent task kubelet: healthz %q is not an http:// URL", k.Healthz)
	}
	return nil
}

// HostKubelet is a node's kubelet process as the agent finds it.
type HostKubelet struct {
	PID    int
	Exe    string // as the process sees its file system
	Cgroup string
	// Unit is the systemd unit of its cgroup ("" for none); Init is PID
	// 1's command; Systemd says PID 1 is a booted systemd.
	Unit    string
	Init    string
	Systemd bool
}

// FindKubelet finds the kubelet of the node whose network namespace
// this process shares, in proc (a /proc showing the host's processes).
func FindKubelet(proc string) (HostKubelet, error) {
	self, _ := os.Readlink(filepath.Join(proc, "self", "ns", "net"))
	entries, err := os.ReadDir(proc)
	if err != nil {
		return HostKubelet{}, err
	}
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
			continue
		}
		// Several nodes on one host (devk's, kind's): the one in this
		// node's network namespace.
		if ns, err := os.Readlink(filepath.Join(proc, e.Name(), "ns", "net")); self != "" && err == nil && ns != self {
			continue
		}
		found = append(found, pid)
	}
	switch len(found) {
	case 0:
		return HostKubelet{}, errors.New("no kubelet process in this node's network namespace")
	case 1:
	default:
		return HostKubelet{}, fmt.Errorf("%d kubelet processes in this node's network namespace (%v): devk swaps one", len(found), found)
	}
	k := HostKubelet{PID: found[0]}
	dir := filepath.Join(proc, strconv.Itoa(k.PID))
	if k.Exe, err = os.Readlink(filepath.Join(dir, "exe")); err != nil {
		return k, fmt.Errorf("the kubelet's executable (pid %d): %w", k.PID, err)
	}
	k.Exe = strings.TrimSuffix(k.Exe, " (deleted)")
	cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return k, err
	}
	k.Cgroup, k.Unit = cgroupUnit(string(cg))
	init, _ := os.ReadFile(filepath.Join(proc, "1", "comm"))
	k.Init = strings.TrimSpace(string(init))
	// sd_booted's test, in PID 1's root.
	_, err = os.Stat(filepath.Join(proc, "1", "root", "run", "systemd", "system"))
	k.Systemd = k.Init == "systemd" && err == nil
	return k, nil
}

// cgroupUnit is the cgroup of a /proc/PID/cgroup (the unified
// hierarchy's, else the name=systemd one's) and the systemd service it is
// in ("kubelet.service"), if any.
func cgroupUnit(cgroup string) (string, string) {
	var group string
	for _, line := range strings.Split(strings.TrimSpace(cgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" || parts[1] == "name=systemd" {
			group = parts[2]
		}
	}
	for _, el := range strings.Split(group, "/") {
		if strings.HasSuffix(el, ".service") {
			return group, el
		}
	}
	return group, ""
}

// Refusal says why devk does not restart k through the cluster, or nil
// when systemd runs it.
func (k HostKubelet) Refusal(node string) error {
	switch {
	case k.Systemd && k.Unit != "":
		return nil
	case k.Unit == "":
		return fmt.Errorf("the kubelet on %s (pid %d) runs in cgroup %s, not in a systemd unit (PID 1 is %s): devk restarts a kubelet through the cluster only under systemd; on a devk cluster run `devk swap kubelet --name NAME` on its machine, elsewhere devk on the node", node, k.PID, k.Cgroup, k.Init)
	default:
		return fmt.Errorf("the kubelet on %s (pid %d) is in %s, but PID 1 is %s, not a booted systemd: devk restarts a kubelet through the cluster only under systemd; run devk on the node", node, k.PID, k.Unit, k.Init)
	}
}

// runKubelet swaps (or rolls back) the node's kubelet binary and restarts
// it, reading the new binary from in; proc is the host's /proc (procRoot)
// and work the pod's own directory (WorkDir).
func runKubelet(ctx context.Context, t KubeletTask, proc, work string, in io.Reader, lw *lineWriter) (KubeletResult, error) {
	hk, err := FindKubelet(proc)
	if err != nil {
		return KubeletResult{}, fmt.Errorf("node %s: %w", t.NodeName, err)
	}
	r := KubeletResult{PID: hk.PID, Unit: hk.Unit, Binary: hk.Exe}
	if err := hk.Refusal(t.NodeName); err != nil {
		return r, err
	}
	h := hostOf(proc, hk, t)
	if t.Rollback {
		r.Result, err = binary.Rollback(ctx, h.dest, h.check)
	} else {
		var src string
		if src, err = receive(in, work, t.Size, t.SHA256); err == nil {
			r.Result, err = binary.Install(ctx, src, h.dest, h.check)
		}
	}
	// The node's paths, not the agent's way to them.
	r.Result.Dest = hk.Exe
	if r.Prev != "" {
		r.Prev = binary.PrevPath(hk.Exe)
	}
	if err != nil || !r.Changed {
		return r, err
	}
	lw.Infof("restarting %s", hk.Unit)
	r.RestartedAt = time.Now()
	rerr := h.restart(ctx)
	if rerr == nil {
		return r, nil
	}
	if t.Rollback || r.Prev == "" {
		return r, rerr
	}
	// The old kubelet back, restarted.
	if _, err := binary.Rollback(context.WithoutCancel(ctx), h.dest, nil); err != nil {
		return r, fmt.Errorf("%w; and putting the old kubelet back failed: %v", rerr, err)
	}
	r.RolledBack = true
	r.RestartedAt = time.Now()
	if err := h.restart(context.WithoutCancel(ctx)); err != nil {
		return r, fmt.Errorf("%w; the old kubelet is back but did not come back healthy either: %v", rerr, err)
	}
	return r, fmt.Errorf("the new kubelet on %s did not come back healthy (%v): the old one is back and healthy (ROLLED BACK)", t.NodeName, rerr)
}

// hostKubelet is how the agent acts on a kubelet it found: its binary
// through the process's root, its version checked there, its unit
// restarted through the host's systemctl.
type hostKubelet struct {
	// root is the kubelet's file system, init PID 1's.
	root, init, exe, dest, unit, healthz string
	timeout                              time.Duration
}

func hostOf(proc string, hk HostKubelet, t KubeletTask) hostKubelet {
	root := filepath.Join(proc, strconv.Itoa(hk.PID), "root")
	return hostKubelet{root: root, init: filepath.Join(proc, "1", "root"), exe: hk.Exe, dest: filepath.Join(root, hk.Exe), unit: hk.Unit, healthz: t.Healthz, timeout: t.Wait()}
}

// check runs the installed binary's --version in the kubelet's root.
func (h hostKubelet) check(ctx context.Context, dest string) (string, error) {
	out, err := chrooted(ctx, h.root, path.Join("/", strings.TrimPrefix(dest, h.root)), "--version")
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes "), nil
}

// restart restarts the unit through the host's systemctl (in PID 1's
// root) and waits for the kubelet's /healthz.
func (h hostKubelet) restart(ctx context.Context) error {
	systemctl := "/usr/bin/systemctl"
	if _, err := os.Stat(filepath.Join(h.init, systemctl)); err != nil {
		systemctl = "/bin/systemctl"
	}
	if out, err := chrooted(ctx, h.init, systemctl, "restart", h.unit); err != nil {
		return fmt.Errorf("systemctl restart %s: %w: %s", h.unit, err, strings.TrimSpace(string(out)))
	}
	return waitHealthy(ctx, h.healthz, h.timeout)
}

// chrooted runs name (a path inside root) in root and returns its output.
func chrooted(ctx context.Context, root, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	return cmd.CombinedOutput()
}

// waitHealthy waits, at most timeout, for url to answer 200.
func waitHealthy(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy after %s: %s", url, timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// receive reads size bytes from in into dir (the pod's work directory)
// and checks their sha256.
func receive(in io.Reader, dir string, size int64, sum string) (string, error) {
	if in == nil {
		return "", errors.New("no binary on stdin")
	}
	dest := filepath.Join(dir, "kubelet")
	f, err := os.OpenFile(dest, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	n, err := io.CopyN(io.MultiWriter(f, h), in, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("receive the new kubelet (%d of %d bytes): %w", n, size, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return "", fmt.Errorf("the new kubelet arrived with sha256 %s, not %s", got, sum)
	}
	return dest, nil
}
