package cluster

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
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"
)

// ensureCgroupRoot makes the cluster's cgroup in every hierarchy (the
// kubelet refuses a cgroupRoot that does not exist). A new cpuset cgroup
// on v1 starts with no CPUs or memory nodes: copy its parent's.
func ensureCgroupRoot(root string) error {
	if root == "" || root == "/" {
		return nil
	}
	for _, h := range cgroups.Roots() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil || len(bytes.TrimSpace(cur)) > 0 {
				continue
			}
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("set %s of cgroup %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// kubeletArgs is node n's kubelet's own command line: its binary, then
// its flags sorted, the config file's extra args over the defaults.
func (c *Cluster) kubeletArgs(n Node) []string {
	own, flags := kubeletconfig.Flags(c.Config, n.Files, n.Net)
	maps.Copy(flags, config.WithoutOwned(config.Kubelet, c.Config.Spec.Kubelet.ExtraArgs))
	maps.Copy(flags, own)
	return append([]string{n.Files.KubeletBinary()}, staticpod.FlagList(flags)...)
}

// kubeletArgv is the command devk runs: node n's kubelet in the node's
// network and mount namespaces.
func (c *Cluster) kubeletArgv(n Node) []string {
	return n.enter(c.kubeletArgs(n)...)
}

// kubeletArgsDiffer says whether node n's running kubelet (pid) was
// started with other arguments than kubeletArgs (nsenter execs the
// kubelet, so its command line is the kubelet's own).
func (c *Cluster) kubeletArgsDiffer(n Node, pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false // gone: Start starts it with the current arguments
	}
	return !slices.Equal(strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00"), c.kubeletArgs(n))
}

// installBinary copies a built binary (the kubelet to the cluster's bin
// dir, kubectl to devk's) unless the same bytes are there; it reports
// whether it changed the binary.
func installBinary(src, dst string) (bool, error) {
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
func (c *Cluster) kubeletHealthURL(n Node) string {
	return "http://" + net.JoinHostPort(n.IP(), strconv.Itoa(c.Config.Ports.KubeletHealthz)) + "/healthz"
}

func (c *Cluster) runKubeletStart(ctx context.Context) (phase.Outcome, error) {
	return c.startKubelet(ctx, c.FirstNode(), c.kubeletSource())
}

// startKubelet installs the kubelet binary src (none: the node's own
// must be there) on node n, writes its config and starts it (restarting
// it when its binary, config or flags changed); a kubelet that exits at
// once fails the phase with its log.
func (c *Cluster) startKubelet(ctx context.Context, n Node, src string) (phase.Outcome, error) {
	binChanged := false
	if src != "" {
		var err error
		if binChanged, err = installBinary(src, n.Files.KubeletBinary()); err != nil {
			return phase.Done, err
		}
	} else if _, err := os.Stat(n.Files.KubeletBinary()); err != nil {
		return phase.Done, fmt.Errorf("no kubelet at %s: run `devk up phase images` (it builds the kubelet) or `devk build kubelet`", n.Files.KubeletBinary())
	}
	data, err := kubeletconfig.YAML(kubeletconfig.Input{Config: c.Config, Files: n.Files, Node: n.Net, CRISocket: c.criSocket(n)})
	if err != nil {
		return phase.Done, err
	}
	cfgChanged, err := atomicfile.WriteIfChanged(n.Files.KubeletConfig(), data, 0o644, "")
	if err != nil {
		return phase.Done, err
	}
	for _, d := range []string{n.Files.Manifests(), n.Files.KubeletRoot(), n.Files.PodLogs(), n.Files.Tmp()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return phase.Done, err
		}
	}
	if err := ensureCgroupRoot(n.Net.CgroupRoot); err != nil {
		return phase.Done, err
	}
	if _, err := ensureMountNS(ctx, n); err != nil {
		return phase.Done, err
	}
	if err := shareKubeletRoot(ctx, n); err != nil {
		return phase.Done, err
	}
	procs := n.Files.Procs()
	argsChanged := false
	if pid, ok := procs.Running("kubelet"); ok {
		if !inNodeMountNS(n, pid) {
			return phase.Done, outsideMountNS(c, n, "kubelet", pid)
		}
		argsChanged = c.kubeletArgsDiffer(n, pid)
	}
	if binChanged || cfgChanged || argsChanged {
		if stopped, err := procs.Stop(ctx, "kubelet", restartGrace); err != nil {
			return phase.Done, err
		} else if stopped {
			c.Reporter.Infof("kubelet binary, config or flags changed: restarting %s's kubelet", n.Name())
		}
	}
	t0 := time.Now()
	pid, started, err := procs.Start(supervise.Process{Name: "kubelet", Argv: c.kubeletArgv(n), Env: c.daemonEnv()})
	if err != nil {
		return phase.Done, err
	}
	if !started {
		return phase.ChangedIf(binChanged || cfgChanged || argsChanged, "kubelet running (pid %d)", pid), nil
	}
	if n.Name() == c.Config.FirstNode().Name {
		c.kubeletStarted = t0
	}
	// The kubelet fails fast on a bad config: give it a moment to do so.
	err = wait.PollUntilContextTimeout(ctx, kubeletPollInterval, kubeletFailFastWindow, true, func(ctx context.Context) (bool, error) {
		if _, ok := procs.Running("kubelet"); !ok {
			return false, fmt.Errorf("the kubelet exited at once; its log ends:\n%s", supervise.Tail(n.Files.LogFile("kubelet"), 20))
		}
		return kube.Probe(ctx, c.kubeletHealthURL(n)) == nil, nil
	})
	if err != nil && !poll.TimedOut(ctx, err) {
		return phase.Done, err
	}
	return phase.Changed("kubelet started (pid %d)", pid), nil
}

// runKubeletFinalize does what kubeadm's kubelet-finalize does after TLS
// bootstrap: it puts the kubelet's client credential in the kubelet's
// rotating certificate store (<root-dir>/pki/kubelet-client-current.pem)
// and points kubelet.conf at that file, so rotated certificates are used.
func (c *Cluster) runKubeletFinalize(ctx context.Context) (phase.Outcome, error) {
	path := c.FirstNode().Files.Kubeconfig("kubelet")
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return phase.Done, fmt.Errorf("read %s: %w (run `devk up phase kubeconfig/kubelet`)", path, err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.AuthInfos[kctx.AuthInfo] == nil {
		return phase.Done, fmt.Errorf("%s has no current user: run `devk up phase kubeconfig/kubelet`", path)
	}
	ai := cfg.AuthInfos[kctx.AuthInfo]
	store, current := c.FirstNode().Files.KubeletPKI(), c.FirstNode().Files.KubeletClientCurrent()
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

// NodeKubelet is one node's kubelet as `devk swap kubelet` sees it.
type NodeKubelet struct {
	// Node is the node's name, Binary the kubelet it runs.
	Node, Binary string
}

// Kubelets are the kubelets of the cluster's nodes, node 0 first.
func (c *Cluster) Kubelets() ([]NodeKubelet, error) {
	ns, err := c.nodes()
	var out []NodeKubelet
	for _, n := range ns {
		if n.Net.Leaving {
			continue // being removed: its kubelet may be stopped for good
		}
		out = append(out, NodeKubelet{Node: n.Name(), Binary: n.Files.KubeletBinary()})
	}
	return out, err
}

// OtherRuntimes are the CRI sockets of the cluster's nodes but node 0,
// by node name.
func (c *Cluster) OtherRuntimes() map[string]string {
	out := map[string]string{}
	ns, err := c.nodes()
	if err != nil {
		return out // cluster.json was validated: every node's dir resolves
	}
	for _, n := range ns[1:] {
		if n.Net.Leaving {
			continue
		}
		out[n.Name()] = c.criSocket(n)
	}
	return out
}

// RestartKubelet stops node's supervised kubelet (empty: node 0's) and
// starts it again with the same command line (after its binary was
// swapped).
func (c *Cluster) RestartKubelet(ctx context.Context, node string) (int, error) {
	n, err := c.nodeNamed(node)
	if err != nil {
		return 0, err
	}
	if _, err := n.Files.Procs().Stop(ctx, "kubelet", restartGrace); err != nil {
		return 0, err
	}
	pid, _, err := n.Files.Procs().Start(supervise.Process{Name: "kubelet", Argv: c.kubeletArgv(n), Env: c.daemonEnv()})
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
func (c *Cluster) RelistKubelet(ctx context.Context) error { return c.RelistNodeKubelet(ctx, "") }

// RelistNodeKubelet is RelistKubelet for node name's kubelet (empty:
// node 0's).
func (c *Cluster) RelistNodeKubelet(ctx context.Context, name string) error {
	n, err := c.nodeNamed(name)
	if err != nil {
		return err
	}
	logPath := n.Files.LogFile("kubelet")
	mark := supervise.MarkLog(logPath)
	defer mark.Close()
	if _, err := c.RestartKubelet(ctx, name); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, relistPollInterval, relistTimeout, true, func(ctx context.Context) (bool, error) {
		return logContains(mark, "Watching apiserver") && kube.Probe(ctx, c.kubeletHealthURL(n)) == nil, nil
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
func shareKubeletRoot(ctx context.Context, n Node) error {
	if _, err := mountns.EnsureShared(ctx, n.Files.MountNS(), n.Files.KubeletRoot()); err != nil {
		return fmt.Errorf("node %s: the kubelet's root dir: %w", n.Name(), err)
	}
	return nil
}
