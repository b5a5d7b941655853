package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/devk/devk/cluster/internal/cgroups"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/mountns"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/supervise"
)

// A node kubeadm bootstraps runs the kubelet as kubeadm's packages do:
// the command line of their systemd drop-in (10-kubeadm.conf), its
// variables read from the files kubeadm writes, again at each start. The
// paths are kubeadm's, which the node's mount namespace binds to the
// node's own files (mountNS).

// kubeadmKubeletFlags are the drop-in's fixed flags: $KUBELET_KUBECONFIG_ARGS
// and $KUBELET_CONFIG_ARGS.
var kubeadmKubeletFlags = []string{
	"--bootstrap-kubeconfig=" + kubeadmEtcKubernetes + "/bootstrap-kubelet.conf",
	"--kubeconfig=" + kubeadmEtcKubernetes + "/kubelet.conf",
	"--config=" + kubeadmKubeletRoot + "/" + kubeadmKubeletConfig,
}

// kubeadmKubeletConfig is the KubeletConfiguration kubeadm writes in the
// kubelet's root.
const kubeadmKubeletConfig = "config.yaml"

// kubeadmFlagsEnv is the file kubeadm's kubelet-start phase writes the
// node's own flags to, as KUBELET_KUBEADM_ARGS (in the kubelet's root).
const (
	kubeadmFlagsEnv = "kubeadm-flags.env"
	kubeadmFlagsVar = "KUBELET_KUBEADM_ARGS"
)

// kubeadmKubeletArgs is the kubelet's command line on a kubeadm node:
// bin, the drop-in's flags, then KUBELET_KUBEADM_ARGS from root's
// kubeadm-flags.env split at blanks as systemd splits an unquoted $VAR
// (none before kubeadm wrote it). /etc/default/kubelet's
// KUBELET_EXTRA_ARGS is not read: devk's config file gives the kubelet's
// flags through kubeadm (nodeRegistration.kubeletExtraArgs), which writes
// them to kubeadm-flags.env.
func kubeadmKubeletArgs(bin, root string) []string {
	argv := append([]string{bin}, kubeadmKubeletFlags...)
	data, err := os.ReadFile(filepath.Join(root, kubeadmFlagsEnv))
	if err != nil {
		return argv
	}
	return append(argv, strings.Fields(envFileValue(data, kubeadmFlagsVar))...)
}

// envFileValue is variable name's value in an environment file as
// systemd's EnvironmentFile reads it: KEY=VALUE lines, # and ; comments,
// the value's double or single quotes removed (a double-quoted value's
// backslash escapes undone); the last assignment wins; "" when unset.
func envFileValue(data []byte, name string) string {
	value := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != name {
			continue
		}
		v = strings.TrimSpace(v)
		switch {
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			} else {
				v = v[1 : len(v)-1]
			}
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			v = v[1 : len(v)-1]
		}
		value = v
	}
	return value
}

// PrepareKubeadm readies node n for kubeadm's init or join: the tree's
// kubeadm and kubelet installed (built binaries at kubeadm and kubelet),
// the kubelet's cgroup root and directories made, and its root inside
// the node (/var/lib/kubelet) a shared mount, as devk's own kubelet
// start makes them. It reports whether it changed anything.
func (n Node) PrepareKubeadm(ctx context.Context, kubeadm, kubelet string) (bool, error) {
	changed := false
	for _, b := range []struct{ src, dst string }{{kubeadm, n.Files.KubeadmBinary()}, {kubelet, n.Files.KubeletBinary()}} {
		if b.src == b.dst {
			if _, err := os.Stat(b.dst); err != nil {
				return changed, fmt.Errorf("no %s at %s: run `devk up phase images%s` (it builds it)", filepath.Base(b.dst), b.dst, NameFlag(n.Config.Name))
			}
			continue
		}
		ch, err := InstallBinary(b.src, b.dst)
		if err != nil {
			return changed, err
		}
		changed = changed || ch
	}
	for _, d := range []string{n.Files.Manifests(), n.Files.KubeletRoot(), n.Files.PodLogs(), n.Files.Tmp()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return changed, err
		}
	}
	if err := cgroups.EnsureRoot(n.Net.CgroupRoot); err != nil {
		return changed, err
	}
	shared, err := mountns.EnsureShared(ctx, n.Files.MountNS(), kubeadmKubeletRoot)
	if err != nil {
		return changed, fmt.Errorf("node %s: the kubelet's root dir: %w", n.Name(), err)
	}
	return changed || shared, nil
}

// KubeletConfigFile is node n's KubeletConfiguration: devk's, or on a
// cluster kubeadm bootstraps the one kubeadm writes in the kubelet's root.
func (n Node) KubeletConfigFile() string {
	if n.Config.Spec.Kubeadm() {
		return filepath.Join(n.Files.KubeletRoot(), kubeadmKubeletConfig)
	}
	return n.Files.KubeletConfig()
}

// KubeadmFlagsFile is the kubelet's flags kubeadm wrote for node n
// (kubeadm-flags.env in the kubelet's root).
func (n Node) KubeadmFlagsFile() string { return filepath.Join(n.Files.KubeletRoot(), kubeadmFlagsEnv) }

// KubeadmDone says whether kubeadm init or join finished on node n.
func (n Node) KubeadmDone() bool {
	_, err := os.Stat(n.Files.KubeadmDone())
	return err == nil
}

// MarkKubeadmDone records that kubeadm's command (init or join) finished
// on node n.
func (n Node) MarkKubeadmDone(command string) error {
	return atomicfile.Write(n.Files.KubeadmDone(), []byte(command+" "+time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644, "")
}

// KubeadmLeftovers says whether node n holds what a kubeadm init or join
// that did not finish leaves: certificates, kubeconfigs, the kubelet's
// config or manifests.
func (n Node) KubeadmLeftovers() bool {
	for _, p := range []string{n.Files.PKI(), n.Files.Kubeconfig("kubelet"), n.Files.Kubeconfig("admin"), filepath.Join(n.Files.KubeletRoot(), kubeadmKubeletConfig)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	entries, _ := os.ReadDir(n.Files.Manifests())
	return len(entries) > 0
}

// RunKubeadm runs in.Command (kubeadm and its arguments) inside node n,
// each line of its output shown on r with -v 1, prefixed by the node.
func (n Node) RunKubeadm(ctx context.Context, in ExecInput, r progress.Reporter) error {
	ex, err := n.Exec(ctx, in)
	if err != nil {
		return err
	}
	verb := ""
	if len(in.Command) > 1 {
		verb = in.Command[1]
	}
	out := progress.LinesTo(func(line string) {
		r.Debugf("%s kubeadm: %s", n.Name(), line)
		// Kill points inside kubeadm's run, one at the first line of each
		// of its phases ("[wait-control-plane] …"): kubeadm/init/wait-control-plane,
		// kubeadm/upgrade/upgrade/staticpods.
		if tag, ok := kubeadmPhaseTag(line); ok {
			failpoint.Hit("kubeadm/" + verb + "/" + tag)
		}
	})
	defer out.Close()
	r.Debugf("%s: %s", n.Name(), strings.Join(in.Command, " "))
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if verb == "init" || verb == "join" {
		go n.watchKubelet(ctx, stop)
	}
	err = execx.Run(ctx, execx.Cmd{Name: ex.Path, Args: ex.Argv[1:], Env: ex.Env, Stdout: out, Stderr: out})
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errKubeletExited) {
		return cause
	}
	if ee, ok := errors.AsType[*execx.Error](err); ok {
		// The command as run in the node, not nsenter's with the whole
		// environment.
		ee.Command = strings.Join(in.Command, " ") + " (in node " + n.Name() + ")"
	}
	return err
}

// errKubeletExited ends a kubeadm init or join whose node's kubelet
// exited on its own.
var errKubeletExited = errors.New("the node's kubelet exited while kubeadm ran")

// watchKubelet stops a kubeadm init or join (stop) when node n's kubelet
// exits on its own while it runs, with the kubelet's log: devk's
// systemctl, as systemd, does not wait for the kubelet it starts for
// kubeadm, and kubeadm would wait 4 minutes for a dead kubelet's health.
// Seen exited on two looks in a row: a stop by systemctl removes the pid
// file right after the process ends.
func (n Node) watchKubelet(ctx context.Context, stop context.CancelCauseFunc) {
	procs := n.Files.Procs()
	t := time.NewTicker(kubeletWatchInterval)
	defer t.Stop()
	for seen := false; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		exited := procs.Exited("kubelet")
		if exited && seen {
			stop(fmt.Errorf("node %s: %w; its log ends:\n%s", n.Name(), errKubeletExited, procs.ExitedTail(ctx, "kubelet", kubeletLogLines)))
			return
		}
		seen = exited
	}
}

// StopLeftKubeadm kills any kubeadm still running in node n's network
// namespace: one a killed devk left behind (its init or join goes on
// without it), which a `kubeadm reset` or a new run must not race. It
// returns how many it stopped.
func (n Node) StopLeftKubeadm(ctx context.Context) (int, error) {
	stopped := 0
	for _, pid := range mountns.ProcessesIn(n.Net.NetNSPath(), "net") {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != kubeadmProcess {
			continue
		}
		if err := supervise.KillWait(ctx, pid, LeftoverGrace); err != nil {
			return stopped, fmt.Errorf("node %s: stop the kubeadm a killed devk left (pid %d): %w", n.Name(), pid, err)
		}
		stopped++
	}
	return stopped, nil
}

// kubeadmPhaseTag is the phase a line of kubeadm's output starts with
// ("[kubelet-start] Writing …": kubelet-start; an upgrade's
// "[upgrade/staticpods] …": upgrade/staticpods).
func kubeadmPhaseTag(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "[")
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(rest, "]")
	if !ok || tag == "" || strings.Contains(tag, " ") {
		return "", false
	}
	return tag, true
}

// kubeadmProcess is kubeadm's command name in /proc/<pid>/comm.
const kubeadmProcess = "kubeadm"
