package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/cluster/internal/containerd"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

// Runtime is what node n's containerd is started with besides the
// node's own files.
type Runtime struct {
	// SandboxImage is the pause image by digest: the sandbox of every pod
	// runs as root in the node's network namespace, so containerd must
	// run exactly the image devk built, whoever answers on the registry's
	// port.
	SandboxImage string
	// Mirrors are the loopback registries, each with its mirror (its
	// forwarder on devk's bridge).
	Mirrors []Mirror
	// Env is what containerd gets on top of devk's own environment.
	Env      []string
	Reporter progress.Reporter
}

// Mirror is a loopback registry and the mirror the node pulls its
// images from.
type Mirror struct{ Registry, URL string }

// containerdConfig is node n's containerd's config.toml, as data.
func (n Node) containerdConfig(sandbox string) containerd.Config {
	d, state := n.Files.Containerd(), n.Files.ContainerdState()
	return containerd.Config{
		Root: n.Files.ContainerdRoot(), State: state, Socket: n.Files.ContainerdSocket(),
		OptDir: filepath.Join(d, "opt"), SandboxImage: sandbox,
		RestrictOOMScoreAdj: n.Config.RestrictOOMScoreAdj,
		CNIBinDir:           containerd.CNIBinDir(), CNIConfDir: n.Files.CNIConfDir(), CertsDir: filepath.Join(d, "certs.d"),
		// runc's default, /run/containerd/runc, is the host's.
		RuncRoot: filepath.Join(state, "runc"),
	}
}

// writeRuntimeFiles writes node n's containerd config and hosts.toml
// files, and its CNI conflist once its pod subnet is known (PodSubnet);
// it reports whether anything changed.
func (n Node) writeRuntimeFiles(r Runtime) (bool, error) {
	cc := n.containerdConfig(r.SandboxImage)
	changed := false
	write := func(path string, data []byte) error {
		w, err := atomicfile.WriteIfChanged(path, data, 0o644, "")
		changed = changed || w
		return err
	}
	config, err := containerd.ConfigTOML(cc)
	if err != nil {
		return changed, err
	}
	if err := write(n.Files.ContainerdConfig(), config); err != nil {
		return changed, err
	}
	// Loopback registries speak plain HTTP, through their forwarder;
	// others keep containerd's default (HTTPS).
	for _, m := range r.Mirrors {
		for _, h := range containerd.RegistryAliases(m.Registry) {
			path, err := validname.PathIn(cc.CertsDir, h, "hosts.toml")
			if err != nil {
				return changed, fmt.Errorf("registry %q: %w", m.Registry, err)
			}
			hosts, err := containerd.HostsTOML(m.URL)
			if err != nil {
				return changed, err
			}
			if err := write(path, hosts); err != nil {
				return changed, err
			}
		}
	}
	subnet, err := n.PodSubnet()
	if err != nil || subnet == "" {
		return changed, err
	}
	w, err := n.WriteConflist(subnet)
	return changed || w, err
}

// StartRuntime writes node n's runtime files, makes the node's mount
// namespace, and starts (or, when they changed, restarts) its containerd
// in the node's network and mount namespaces, then waits until it
// answers on its socket.
func (n Node) StartRuntime(ctx context.Context, r Runtime) (phase.Outcome, error) {
	changed, err := n.writeRuntimeFiles(r)
	if err != nil {
		return phase.Done, err
	}
	for _, d := range []string{n.Files.ContainerdRoot(), n.Files.ContainerdState(), n.Files.Run()} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return phase.Done, err
		}
	}
	if _, err := n.EnsureMountNS(ctx); err != nil {
		return phase.Done, err
	}
	procs := n.Files.Procs()
	if pid, ok := procs.Running("containerd"); ok && !n.inMountNS(pid) {
		return phase.Done, n.outsideMountNS("containerd", pid)
	}
	if changed {
		if stopped, err := procs.Stop(ctx, "containerd", restartGrace); err != nil {
			return phase.Done, err
		} else if stopped {
			r.Reporter.Infof("containerd config changed: restarting %s's containerd", n.Name())
		}
	}
	pid, started, err := procs.Start(supervise.Process{Name: "containerd", Argv: n.Enter(containerd.Binary(), "--config", n.Files.ContainerdConfig()), Env: r.Env})
	if err != nil {
		return phase.Done, err
	}
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, containerdPollInterval, containerdStartTimeout, true, func(ctx context.Context) (bool, error) {
		if _, ok := procs.Running("containerd"); !ok {
			return false, fmt.Errorf("containerd exited; its log ends:\n%s", procs.ExitedTail(ctx, "containerd", 15))
		}
		if err := cri.Answers(ctx, n.Files.ContainerdSocket()); err != nil {
			if ctx.Err() == nil {
				lastErr = err
			}
			return false, nil
		}
		return true, nil
	})
	if poll.TimedOut(ctx, err) {
		return phase.Done, fmt.Errorf("containerd did not answer on %s within %s: %v; its log ends:\n%s", n.Files.ContainerdSocket(), containerdStartTimeout, lastErr, supervise.Tail(n.Files.LogFile("containerd"), 15))
	}
	if err != nil {
		return phase.Done, err
	}
	if started {
		return phase.Changed("containerd started (pid %d)", pid), nil
	}
	return phase.ChangedIf(changed, "containerd running (pid %d)", pid), nil
}
