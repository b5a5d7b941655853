// Package kubeadmrun runs the tree's kubeadm for a cluster kubeadm
// bootstraps: inside a node (init, join, upload-certs, reset), with the
// node's lock named as held so that the systemctl kubeadm calls, devk's
// in the node, does not wait for the job that runs it; and on the host,
// before anything is made, `kubeadm config validate` of the config devk
// wrote for it.
package kubeadmrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/devk/devk/cluster/internal/kubeadmconfig"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/phase"
)

// Component is the tree's kubeadm, which devk builds with the other
// components for a cluster it bootstraps.
const Component = "kubeadm"

// Runner runs kubeadm inside one node.
type Runner struct {
	Node node.Node
	// Env is added to devk's own environment: the daemons' (no proxy for
	// the cluster's networks).
	Env []string
	// ToolDirs go first on the PATH inside the node (kubectl's).
	ToolDirs []string
	// CRISocket is the node's containerd.
	CRISocket string
	Reporter  progress.Reporter
}

// Run runs kubeadm with args inside the node, its output shown with -v 1.
func (r Runner) Run(ctx context.Context, args ...string) error {
	held, err := nodelock.HeldEnvVar(r.Node.Files.Manifests())
	if err != nil {
		return err
	}
	return r.Node.RunKubeadm(ctx, node.ExecInput{
		Command: append([]string{Component}, args...), Environ: os.Environ(), Extra: append(append([]string(nil), r.Env...), held),
		ToolDirs: r.ToolDirs, CRISocket: r.CRISocket,
	}, r.Reporter)
}

// Init is `kubeadm init` inside the node with the config devk wrote
// (kubeadmconfig.InNode), kubeadm's --skip-phases as given.
func (r Runner) Init(ctx context.Context, skipPhases []string) error {
	args := []string{"init", "--config", kubeadmconfig.InNode}
	if len(skipPhases) > 0 {
		args = append(args, "--skip-phases", strings.Join(skipPhases, ","))
	}
	if err := r.Run(ctx, args...); err != nil {
		return fmt.Errorf("kubeadm init on node %s: %w\n%s; `devk up` again resets the node and runs it again", r.Node.Name(), err, r.configGiven())
	}
	return nil
}

// Join is `kubeadm join` inside the node with the config devk wrote.
func (r Runner) Join(ctx context.Context) error {
	if err := r.Run(ctx, "join", "--config", kubeadmconfig.InNode); err != nil {
		return fmt.Errorf("kubeadm join on node %s: %w\n%s", r.Node.Name(), err, r.configGiven())
	}
	return nil
}

// configGiven says where the config devk gave kubeadm is.
func (r Runner) configGiven() string {
	return fmt.Sprintf("the config given to kubeadm: %s (inside the node: %s)", r.Node.Files.KubeadmConfig(), kubeadmconfig.InNode)
}

// UploadCerts is `kubeadm init phase upload-certs --upload-certs` inside
// the node (node 0) with config, its init config under a control-plane
// join's certificate key: kubeadm encrypts the shared CAs and keys into
// Secret kube-system/kubeadm-certs. The key goes in through a config
// file of its own (kubeadm refuses --certificate-key beside --config),
// hostPath (kubeadmconfig.UploadCertsInNode as the host sees it),
// removed afterwards.
func (r Runner) UploadCerts(ctx context.Context, config []byte, hostPath string) error {
	if err := atomicfile.Write(hostPath, config, 0o600, ""); err != nil {
		return err
	}
	defer os.Remove(hostPath)
	return r.Run(ctx, "init", "phase", "upload-certs", "--upload-certs", "--config", kubeadmconfig.UploadCertsInNode)
}

// reset is `kubeadm reset -f` inside the node: kubeadm's own undoing of
// its init or join (a control plane's etcd member removed, the kubelet
// stopped, the pods removed, its files cleared).
func (r Runner) reset(ctx context.Context) error {
	return r.Run(ctx, "reset", "-f", "--cri-socket", "unix://"+r.CRISocket)
}

// ClearUnfinished makes the node ready for a kubeadm init or join again
// after one that did not finish: a kubeadm a killed devk left running is
// stopped, and what it wrote is cleared (`kubeadm reset -f`).
func (r Runner) ClearUnfinished(ctx context.Context) error {
	n := r.Node
	if err := r.StopLeft(ctx); err != nil {
		return err
	}
	if !n.KubeadmLeftovers() {
		return nil
	}
	r.Reporter.Infof("node %s holds what an unfinished kubeadm left: kubeadm reset -f, then again", n.Name())
	if err := r.reset(ctx); err != nil {
		return fmt.Errorf("node %s: kubeadm reset after an unfinished kubeadm: %w", n.Name(), err)
	}
	return nil
}

// StopLeft stops a kubeadm a killed devk left running in the node.
func (r Runner) StopLeft(ctx context.Context) error {
	left, err := r.Node.StopLeftKubeadm(ctx)
	if left > 0 {
		r.Reporter.Infof("node %s: stopped %d kubeadm a killed devk left running", r.Node.Name(), left)
	}
	return err
}

// Resume is the phase of a node whose kubeadm init or join (command)
// finished before: its kubelet is started as kubeadm configured it when
// it does not run (a machine restarted, a kubelet killed), as systemd
// would.
func (r Runner) Resume(command string) (phase.Outcome, error) {
	n := r.Node
	_, started, err := n.Files.Procs().Start(supervise.Process{Name: "kubelet", Argv: n.KubeletArgv(), Env: r.Env})
	if err != nil {
		return phase.Done, err
	}
	return phase.ChangedIf(started, "kubeadm %s ran before; kubelet %s", command, map[bool]string{true: "started", false: "running"}[started]), nil
}

// Reset is `devk node remove`'s kubeadm phase: `kubeadm reset -f` inside
// the node, as a kubeadm user removes a node, unless kubeadm wrote
// nothing there. A removal killed during it runs it again: kubeadm's
// reset of a node it reset before finds nothing to do.
func (r Runner) Reset(ctx context.Context) (phase.Outcome, error) {
	n := r.Node
	if err := r.StopLeft(ctx); err != nil {
		return phase.Done, err
	}
	if !n.KubeadmDone() && !n.KubeadmLeftovers() {
		return phase.Unchanged("kubeadm wrote nothing on %s", n.Name()), nil
	}
	if err := r.reset(ctx); err != nil {
		return phase.Done, fmt.Errorf("node %s: %w", n.Name(), err)
	}
	return phase.Changed("kubeadm reset -f on %s (%s)", n.Name(), n.Net.Role), nil
}

// Validate runs `kubeadm config validate` of binary on config (the YAML
// documents devk gives kubeadm init) on the host: kubeadm reads and
// checks them and touches nothing. A config it rejects is an error with
// kubeadm's message and the documents, numbered by line.
func Validate(ctx context.Context, binary string, config []byte) error {
	dir, err := os.MkdirTemp("", "devk-kubeadm-config-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "kubeadm.yaml")
	if err := os.WriteFile(file, config, 0o600); err != nil {
		return err
	}
	err = execx.Run(ctx, execx.Cmd{Name: binary, Args: []string{"config", "validate", "--config", file}, Dir: dir})
	ee, ok := errors.AsType[*execx.Error](err)
	if _, exited := errors.AsType[*exec.ExitError](err); !ok || !exited || ctx.Err() != nil {
		return err // it did not run, or was stopped
	}
	return fmt.Errorf("the tree's kubeadm rejects the config devk made for it (`kubeadm config validate`: %v):\n%s\nthe config (from devk's config file and its kubeadmConfigPatches):\n%s\nfix the kubeadmConfigPatches entry (or the setting) that made what kubeadm names",
		ee.Err, indent(strings.TrimSpace(ee.Output)), numbered(config))
}

// indent puts two spaces before each line of s.
func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// numbered is data with each line's number before it.
func numbered(data []byte) string {
	var b strings.Builder
	for i, line := range bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")) {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, line)
	}
	return strings.TrimRight(b.String(), "\n")
}
