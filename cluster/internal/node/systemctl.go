package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/supervise"
)

// Inside a node, `systemctl` is devk (cmd/devk/internal/systemctl): a
// link to the devk that made the node, in the node's bin dir (first on
// node exec's PATH), and the same file bound over the host's systemctl
// in the node's mount namespace, so that kubeadm (which finds the init
// system by looking up systemctl) and a user following kubeadm's docs
// (`systemctl restart kubelet`) restart the node's supervised kubelet,
// never this machine's.

// SystemctlName is the name devk acts as a node's init system under.
const SystemctlName = "systemctl"

// hostSystemctls are the host's systemctl paths devk's is bound over
// inside a node, where the host has them (Debian: /usr/bin, and /bin
// through its link to usr/bin).
var hostSystemctls = []string{"/usr/bin/systemctl", "/bin/systemctl"}

// systemctlLink is node n's link to devk under SystemctlName, beside its
// kubelet.
func systemctlLink(p string) string { return filepath.Join(filepath.Dir(p), SystemctlName) }

// SystemctlLink is the link to devk in node n's bin dir.
func (n Node) SystemctlLink() string { return systemctlLink(n.Files.KubeletBinary()) }

// systemctlBinds are the files bound over the host's systemctl in the
// mount namespace of the node whose kubelet binary is kubelet.
func systemctlBinds(kubelet string) []mountns.FileBind {
	var out []mountns.FileBind
	for _, p := range hostSystemctls {
		out = append(out, mountns.FileBind{Path: p, Source: systemctlLink(kubelet)})
	}
	return out
}

// installSystemctl points node n's systemctl link at the running devk
// (os.Executable), by a rename of a new link over it: a command in the
// node finds the old devk or the new one, never none. It reports whether
// it changed the link.
func (n Node) installSystemctl() (bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("node %s's systemctl: find devk's own binary: %w", n.Name(), err)
	}
	link := n.SystemctlLink()
	if cur, err := os.Readlink(link); err == nil && cur == exe {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return false, err
	}
	tmp := link + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.Symlink(exe, tmp); err != nil {
		return false, fmt.Errorf("node %s's systemctl: %w", n.Name(), err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("node %s's systemctl: %w", n.Name(), err)
	}
	return true, nil
}

// KubeletState is node n's supervised kubelet as `systemctl status`
// shows it.
type KubeletState struct {
	// PID is the running kubelet's (0: none runs).
	PID int
	// Since is when devk started it (its pid file's time).
	Since time.Time
	// Argv is its command line (nsenter's, as devk starts it).
	Argv []string
	// Log is its log file.
	Log string
}

// KubeletState is what node n's supervised kubelet is now.
func (n Node) KubeletState() KubeletState {
	procs := n.Files.Procs()
	st := KubeletState{Log: procs.LogFile("kubelet")}
	pid, ok := procs.Running("kubelet")
	if !ok {
		return st
	}
	st.PID, st.Argv = pid, supervise.Argv(pid)
	if fi, err := os.Stat(procs.PIDFile("kubelet")); err == nil {
		st.Since = fi.ModTime()
	}
	return st
}

// ServeKubelet starts node n's supervised kubelet with its files as they
// are (no install, no config written: what kubeadm or the user left)
// unless it runs; a kubelet that exits at once is an error with its log.
// env is what it gets on top of devk's own environment. watched: the
// caller is a devk job that watches the kubelet itself (one running
// kubeadm, which waits for the kubelet's health, while devk's RunKubeadm
// watches it for an exit); ServeKubelet then returns once the kubelet
// is started, as systemd's start of a simple service does.
func (n Node) ServeKubelet(ctx context.Context, env []string, watched bool) (pid int, started bool, err error) {
	if err := n.canStartKubelet(); err != nil {
		return 0, false, err
	}
	procs := n.Files.Procs()
	if pid, ok := procs.Running("kubelet"); ok {
		return pid, false, nil
	}
	pid, _, err = procs.Start(supervise.Process{Name: "kubelet", Argv: n.KubeletArgv(), Env: env})
	if err != nil || watched {
		return pid, err == nil, err
	}
	return pid, true, n.kubeletFailFast(ctx)
}

// canStartKubelet checks what starting node n's kubelet needs: its
// binary and config, and the node's namespaces as devk enters them
// (KubeletArgv), which a process inside the node's mount namespace does
// not see (there /run/netns is the node's own, and the namespace's file
// is not bound).
func (n Node) canStartKubelet() error {
	for _, f := range []string{n.Files.KubeletBinary(), n.KubeletConfigFile()} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("node %s has no kubelet to start: %w: `devk up%s` installs it", n.Name(), err, NameFlag(n.Config.Name))
		}
	}
	return n.NamespacesVisible()
}

// NamespacesVisible checks that node n's namespaces are seen from here
// at the paths devk enters them by: not from inside the node's mount
// namespace (its /run/netns is the node's own, its file is not bound
// there, and its /run is an overlay, where a lock file of
// nodelock.RootDir opened for writing is a copy of the host's).
func (n Node) NamespacesVisible() error {
	for _, ns := range []struct{ kind, file string }{{"network", n.Net.NetNSPath()}, {"mount", n.Files.MountNS()}} {
		if _, _, ok := mountns.ID(ns.file); !ok {
			return fmt.Errorf("node %s has no %s namespace at %s as seen from here: is cluster %s up (`devk up%s`)? Inside the node, devk's systemctl acts from the namespaces of the process that entered it (`devk node exec`)", n.Name(), ns.kind, ns.file, n.Config.Name, NameFlag(n.Config.Name))
		}
	}
	return nil
}

// StopKubelet stops node n's supervised kubelet; it reports whether one
// ran.
func (n Node) StopKubelet(ctx context.Context) (bool, error) {
	return n.Files.Procs().Stop(ctx, "kubelet", restartGrace)
}

// RestartServedKubelet is RestartKubelet with ServeKubelet's checks: the
// kubelet's files there before it stops the old one, the new one not
// exiting at once (unless watched, as for ServeKubelet).
func (n Node) RestartServedKubelet(ctx context.Context, env []string, watched bool) (int, error) {
	if err := n.canStartKubelet(); err != nil {
		return 0, err
	}
	pid, err := n.RestartKubelet(ctx, env)
	if err != nil || watched {
		return pid, err
	}
	return pid, n.kubeletFailFast(ctx)
}

// kubeletFailFast waits, at most kubeletFailFastWindow, until node n's
// just started kubelet is healthy; one that exits meanwhile is an error
// quoting its log (the kubelet fails fast on a bad config or flag).
func (n Node) kubeletFailFast(ctx context.Context) error {
	procs := n.Files.Procs()
	err := wait.PollUntilContextTimeout(ctx, kubeletPollInterval, kubeletFailFastWindow, true, func(ctx context.Context) (bool, error) {
		if _, ok := procs.Running("kubelet"); !ok {
			return false, fmt.Errorf("the kubelet exited at once; its log ends:\n%s", procs.ExitedTail(ctx, "kubelet", kubeletLogLines))
		}
		return kube.Probe(ctx, n.kubeletHealthURL()) == nil, nil
	})
	if err != nil && !poll.TimedOut(ctx, err) {
		return err
	}
	return nil
}

// kubeletLogLines is how much of the log of a kubelet that exited at
// once an error quotes.
const kubeletLogLines = 20
