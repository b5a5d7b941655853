package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devk/devk/cluster/config"
	"github.com/devk/devk/cluster/internal/cgroups"
	"github.com/devk/devk/cluster/internal/kubeletconfig"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/delve"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"
)

// KubeletArgs is node n's kubelet's own command line: its binary, then
// its flags sorted, the config file's extra args over the defaults;
// under the debugger (`devk debug kubelet` recorded it) that command line
// is dlv's (delve.Debugged.Command).
func (n Node) KubeletArgs() []string {
	var argv []string
	if n.Config.Spec.Kubeadm() {
		argv = kubeadmKubeletArgs(n.Files.KubeletBinary(), n.Files.KubeletRoot())
	} else {
		own, flags := kubeletconfig.Flags(*n.Config, n.Files, n.Net)
		maps.Copy(flags, config.WithoutOwned(config.Kubelet, n.Config.Spec.Kubelet.ExtraArgs))
		maps.Copy(flags, own)
		argv = append([]string{n.Files.KubeletBinary()}, staticpod.FlagList(flags)...)
	}
	// A record devk cannot read runs the kubelet on its own; `devk debug
	// kubelet` and --stop say what is wrong with it.
	if d, err := delve.ReadDebugged(n.Files.KubeletDebugger()); err == nil && d != nil {
		return d.Command(argv)
	}
	return argv
}

// KubeletArgv is the command devk runs: node n's kubelet in the node's
// network and mount namespaces.
func (n Node) KubeletArgv() []string {
	return n.Enter(n.KubeletArgs()...)
}

// KubeletArgsDiffer says whether node n's running kubelet (pid) was
// started with other arguments than KubeletArgs (nsenter execs the
// kubelet, so its command line is the kubelet's own).
func (n Node) KubeletArgsDiffer(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false // gone: Start starts it with the current arguments
	}
	return !slices.Equal(strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00"), n.KubeletArgs())
}

// InstallBinary copies a built binary (the kubelet to the cluster's bin
// dir, kubectl to devk's) unless the same bytes are there; it reports
// whether it changed the binary.
func InstallBinary(src, dst string) (bool, error) {
	same, err := atomicfile.SameContent(src, dst)
	if err != nil {
		return false, fmt.Errorf("%s: %w (run `devk build %s`)", src, err, filepath.Base(src))
	}
	if same {
		return false, nil
	}
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("%s: %w (run `devk build %s`)", src, err, filepath.Base(src))
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return false, err
	}
	return true, atomicfile.WriteFrom(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}, 0o755, "")
}

// kubeletHealthURL is node n's kubelet's own health endpoint.
func (n Node) kubeletHealthURL() string {
	return "http://" + net.JoinHostPort(n.IP(), strconv.Itoa(n.Config.Ports.KubeletHealthz)) + "/healthz"
}

// Kubelet is what node n's kubelet is started with besides the node's
// own files.
type Kubelet struct {
	// Src is the kubelet binary to install (none: the node's own must be
	// there).
	Src string
	// CRISocket is the node's runtime.
	CRISocket string
	// Env is what the kubelet gets on top of devk's own environment.
	Env      []string
	Reporter progress.Reporter
}

// StartKubelet installs the kubelet binary k.Src on node n, writes its
// config and starts it (restarting it when its binary, config or flags
// changed); a kubelet that exits at once fails the phase with its log.
// started is when it started the kubelet (zero when one ran already).
func (n Node) StartKubelet(ctx context.Context, k Kubelet) (out phase.Outcome, started time.Time, err error) {
	binChanged := false
	if k.Src != "" {
		if binChanged, err = InstallBinary(k.Src, n.Files.KubeletBinary()); err != nil {
			return phase.Done, started, err
		}
	} else if _, err := os.Stat(n.Files.KubeletBinary()); err != nil {
		return phase.Done, started, fmt.Errorf("no kubelet at %s: run `devk up phase images` (it builds the kubelet) or `devk build kubelet`", n.Files.KubeletBinary())
	}
	data, err := kubeletconfig.YAML(kubeletconfig.Input{Config: *n.Config, Files: n.Files, Node: n.Net, CRISocket: k.CRISocket})
	if err != nil {
		return phase.Done, started, err
	}
	cfgChanged, err := atomicfile.WriteIfChanged(n.Files.KubeletConfig(), data, 0o644, "")
	if err != nil {
		return phase.Done, started, err
	}
	for _, d := range []string{n.Files.Manifests(), n.Files.KubeletRoot(), n.Files.PodLogs(), n.Files.Tmp()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return phase.Done, started, err
		}
	}
	if err := cgroups.EnsureRoot(n.Net.CgroupRoot); err != nil {
		return phase.Done, started, err
	}
	if _, err := n.EnsureMountNS(ctx); err != nil {
		return phase.Done, started, err
	}
	if err := n.shareKubeletRoot(ctx); err != nil {
		return phase.Done, started, err
	}
	procs := n.Files.Procs()
	argsChanged := false
	if pid, ok := procs.Running("kubelet"); ok {
		if !n.inMountNS(pid) {
			return phase.Done, started, n.outsideMountNS("kubelet", pid)
		}
		argsChanged = n.KubeletArgsDiffer(pid)
	}
	if binChanged || cfgChanged || argsChanged {
		if stopped, err := procs.Stop(ctx, "kubelet", restartGrace); err != nil {
			return phase.Done, started, err
		} else if stopped {
			k.Reporter.Infof("kubelet binary, config or flags changed: restarting %s's kubelet", n.Name())
		}
	}
	t0 := time.Now()
	pid, fresh, err := procs.Start(supervise.Process{Name: "kubelet", Argv: n.KubeletArgv(), Env: k.Env})
	if err != nil {
		return phase.Done, started, err
	}
	if !fresh {
		return phase.ChangedIf(binChanged || cfgChanged || argsChanged, "kubelet running (pid %d)", pid), started, nil
	}
	started = t0
	// The kubelet fails fast on a bad config: give it a moment to do so.
	if err := n.kubeletFailFast(ctx); err != nil {
		return phase.Done, started, err
	}
	return phase.Changed("kubelet started (pid %d)", pid), started, nil
}

// FinalizeKubelet does what kubeadm's kubelet-finalize does after TLS
// bootstrap: it puts the kubelet's client credential in the kubelet's
// rotating certificate store (<root-dir>/pki/kubelet-client-current.pem)
// and points kubelet.conf at that file, so rotated certificates are used.
func (n Node) FinalizeKubelet() (phase.Outcome, error) {
	path := n.Files.Kubeconfig("kubelet")
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return phase.Done, fmt.Errorf("read %s: %w (run `devk up phase kubeconfig/kubelet`)", path, err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.AuthInfos[kctx.AuthInfo] == nil {
		return phase.Done, fmt.Errorf("%s has no current user: run `devk up phase kubeconfig/kubelet`", path)
	}
	ai := cfg.AuthInfos[kctx.AuthInfo]
	store, current := n.Files.KubeletPKI(), n.Files.KubeletClientCurrent()
	if ai.ClientCertificate == current && ai.ClientKey == current {
		if _, err := os.Stat(current); err == nil {
			return phase.Unchanged("kubelet.conf uses %s already", current), nil
		}
	}
	if len(ai.ClientCertificateData) == 0 || len(ai.ClientKeyData) == 0 {
		return phase.Done, fmt.Errorf("%s has no embedded client certificate to move: run `devk up phase kubeconfig/kubelet`", path)
	}
	if err := os.MkdirAll(store, 0o755); err != nil {
		return phase.Done, err
	}
	// The kubelet's file store: kubelet-client-<time>.pem holding the
	// certificate and key, and a kubelet-client-current.pem symlink.
	stamp := time.Now().UTC().Format("2006-01-02-15-04-05")
	pemFile := filepath.Join(store, "kubelet-client-"+stamp+".pem")
	pair := append(append([]byte{}, ai.ClientCertificateData...), ai.ClientKeyData...)
	if err := atomicfile.Write(pemFile, pair, 0o600, ""); err != nil {
		return phase.Done, err
	}
	tmpLink := current + ".tmp"
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(pemFile), tmpLink); err != nil {
		return phase.Done, err
	}
	if err := os.Rename(tmpLink, current); err != nil {
		return phase.Done, err
	}
	ai.ClientCertificateData, ai.ClientKeyData = nil, nil
	ai.ClientCertificate, ai.ClientKey = current, current
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return phase.Done, err
	}
	if err := atomicfile.Write(path, data, 0o600, ""); err != nil {
		return phase.Done, err
	}
	return phase.Changed("kubelet.conf now uses %s", current), nil
}

// RestartKubelet stops node n's supervised kubelet and starts it again
// with the same command line (after its binary was swapped); env is what
// it gets on top of devk's own environment.
func (n Node) RestartKubelet(ctx context.Context, env []string) (int, error) {
	if _, err := n.Files.Procs().Stop(ctx, "kubelet", restartGrace); err != nil {
		return 0, err
	}
	pid, _, err := n.Files.Procs().Start(supervise.Process{Name: "kubelet", Argv: n.KubeletArgv(), Env: env})
	return pid, err
}

// RelistKubelet restarts the supervised kubelet and waits, at most
// relistTimeout,
// until the new one is healthy and watches the API server's pods, so that
// its view of mirror pods is current. A kubelet whose pod watch backs off
// after the API server restarted (see swap's settle) catches up at once
// this way; its pods keep running. The new kubelet starts its API server
// pod source only after its node informer synced, and says so in its log
// ("Watching apiserver").
func (n Node) RelistKubelet(ctx context.Context, env []string) error {
	logPath := n.Files.LogFile("kubelet")
	mark := supervise.MarkLog(logPath)
	defer mark.Close()
	if _, err := n.RestartKubelet(ctx, env); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, relistPollInterval, relistTimeout, true, func(ctx context.Context) (bool, error) {
		return logContains(mark, "Watching apiserver") && kube.Probe(ctx, n.kubeletHealthURL()) == nil, nil
	})
	if poll.TimedOut(ctx, err) {
		return fmt.Errorf("the restarted kubelet does not watch the API server after %s; see %s", relistTimeout, logPath)
	}
	return err
}

// logContains reports whether what a daemon's log got since mark
// (rotated or not) contains s.
func logContains(mark *supervise.LogMark, s string) bool {
	r, err := mark.Since()
	if err != nil {
		return false
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, 8<<20))
	return err == nil && bytes.Contains(data, []byte(s))
}

// shareKubeletRoot makes the kubelet's root dir, inside node n's mount
// namespace, a shared bind mount of itself, as the kubelet does at start
// (hostutil.MakeRShared), unless it is one already. The kubelet does it
// in one goroutine while another makes its pod-resources socket in that
// dir by a rename, and a mount that lands between the socket's temp file
// and the rename fails it ("invalid cross-device link": the kubelet
// exits); seen when a joining node's kubelet first starts. Done first,
// the kubelet finds the mount and leaves it. The propagation is read
// from the namespace's mountinfo (its shared:N field), so a bind left
// private by a run killed between the bind and MS_SHARED is mended, not
// taken for done. It goes with the node's mount namespace.
func (n Node) shareKubeletRoot(ctx context.Context) error {
	if _, err := mountns.EnsureShared(ctx, n.Files.MountNS(), n.Files.KubeletRoot()); err != nil {
		return fmt.Errorf("node %s: the kubelet's root dir: %w", n.Name(), err)
	}
	return nil
}
