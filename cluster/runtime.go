package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/cluster/internal/containerd"
	"github.com/devk/devk/cluster/internal/images"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/supervise"
	"github.com/devk/devk/internal/validname"
	"github.com/devk/devk/phase"
)

// sandboxImage is the pause image by digest: the sandbox of every pod
// runs as root in the node's network namespace, so containerd must run
// exactly the image devk built, whoever answers on the registry's port.
// The registry is the one --registry names, if given.
func (c *Cluster) sandboxImage(ctx context.Context) (string, error) {
	registry := c.Config.Registry
	if c.Registry != "" {
		registry = c.Registry
	}
	_, ref, err := images.Pause(ctx, c.home().PauseCache(), registry)
	return ref, err
}

func (c *Cluster) containerdConfig(ctx context.Context, n Node) (containerd.Config, error) {
	d, state := n.Files.Containerd(), n.Files.ContainerdState()
	sandbox, err := c.sandboxImage(ctx)
	if err != nil {
		return containerd.Config{}, err
	}
	return containerd.Config{
		Root: n.Files.ContainerdRoot(), State: state, Socket: n.Files.ContainerdSocket(),
		OptDir: filepath.Join(d, "opt"), SandboxImage: sandbox,
		RestrictOOMScoreAdj: c.Config.RestrictOOMScoreAdj,
		CNIBinDir:           containerd.CNIBinDir(), CNIConfDir: n.Files.CNIConfDir(), CertsDir: filepath.Join(d, "certs.d"),
		// runc's default, /run/containerd/runc, is the host's.
		RuncRoot: filepath.Join(state, "runc"),
	}, nil
}

// writeRuntimeFiles writes node n's containerd config and hosts.toml
// files, and its CNI conflist once its pod subnet is known (podSubnetOf);
// it reports whether anything changed.
func (c *Cluster) writeRuntimeFiles(ctx context.Context, n Node) (bool, error) {
	cc, err := c.containerdConfig(ctx, n)
	if err != nil {
		return false, err
	}
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
	for _, reg := range c.loopbackRegistries() {
		for _, h := range containerd.RegistryAliases(reg) {
			path, err := validname.PathIn(cc.CertsDir, h, "hosts.toml")
			if err != nil {
				return changed, fmt.Errorf("registry %q: %w", reg, err)
			}
			hosts, err := containerd.HostsTOML(h, c.forwarders().Mirror(reg))
			if err != nil {
				return changed, err
			}
			if err := write(path, hosts); err != nil {
				return changed, err
			}
		}
	}
	subnet, err := c.podSubnetOf(n)
	if err != nil || subnet == "" {
		return changed, err
	}
	w, err := c.writeConflist(n, subnet)
	return changed || w, err
}

func (c *Cluster) runRuntime(ctx context.Context) (phase.Outcome, error) {
	c.Config.OwnRuntime = true
	n := c.FirstNode()
	out, err := c.startRuntime(ctx, n)
	if err != nil {
		return out, err
	}
	c.Config.CRISocket = n.Files.ContainerdSocket()
	if err := c.SaveConfig(); err != nil {
		return phase.Done, err
	}
	if subnet, err := c.podSubnetOf(n); err != nil {
		return phase.Done, err
	} else if err := ensurePodMasquerade(ctx, n, subnet, c.Config.PodCIDR); err != nil {
		return phase.Done, err
	}
	return out, nil
}

// startRuntime writes node n's runtime files, makes the node's mount
// namespace, and starts (or, when they changed, restarts) its containerd
// in the node's network and mount namespaces, then waits until it
// answers on its socket.
func (c *Cluster) startRuntime(ctx context.Context, n Node) (phase.Outcome, error) {
	changed, err := c.writeRuntimeFiles(ctx, n)
	if err != nil {
		return phase.Done, err
	}
	for _, d := range []string{n.Files.ContainerdRoot(), n.Files.ContainerdState(), n.Files.Run()} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return phase.Done, err
		}
	}
	if _, err := ensureMountNS(ctx, n); err != nil {
		return phase.Done, err
	}
	procs := n.Files.Procs()
	if pid, ok := procs.Running("containerd"); ok && !inNodeMountNS(n, pid) {
		return phase.Done, outsideMountNS(c, n, "containerd", pid)
	}
	if changed {
		if stopped, err := procs.Stop(ctx, "containerd", restartGrace); err != nil {
			return phase.Done, err
		} else if stopped {
			c.Reporter.Infof("containerd config changed: restarting %s's containerd", n.Name())
		}
	}
	pid, started, err := procs.Start(supervise.Process{Name: "containerd", Argv: n.enter(containerd.Binary(), "--config", n.Files.ContainerdConfig()), Env: c.daemonEnv()})
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
